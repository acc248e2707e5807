"""The event bus: after a message commits, its `new_email` frame reaches every WebSocket
listening on that mailbox.

Each event is serialized once, whatever the number of listeners; listeners receive the frame
text. `LocalBus` fans out inside one process; `RedisBus` (in `events_redis.py`) carries frames
across processes.

It also tells waits (`services/waits.py`) when messages of a mailbox entered the search index.

The bus also carries revocations: a password reset (or a deletion) announces the mailbox's new
password generation, and every open WebSocket authenticated with an older one closes, in this
process and, through Redis, in every other.

And it carries `changed`: mailboxes, their owners or their domains changed, so every process drops
what it cached of them (the recipient cache behind RCPT, `services/recipients.py`).

And `sessions_ended`: browser sessions signed out (or ended by a suspension), so every process
closes the live inbox's sockets opened with a token handed to one of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import msgspec

from inboxd.model import NewMailEvent, iso

T = TypeVar("T")
Listener = Callable[[str], None]
# Called with the mailbox's new password generation; tokens of older generations are void.
RevokeListener = Callable[[int], None]
# Called with the ids of browser sessions that ended.
SessionsEndedListener = Callable[[Sequence[str]], None]
# A generation above any real one: the mailbox is gone, every token of it is void.
REVOKE_ALL = 2**62
_encode = msgspec.json.Encoder().encode


def new_email_frame(event: NewMailEvent) -> str:
    """The spec's WebSocket `new_email` message, exactly its fields."""
    return _encode(
        {
            "type": "new_email",
            "id": event.message_id,
            "sender": event.sender,
            "from": event.from_,
            "subject": event.subject,
            "preview_text": event.preview_text,
            "size": event.size,
            "created_at": iso(event.created_at),
            "account_id": event.mailbox_id,
            "address": event.address,
        }
    ).decode()


class EventBus(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def publish(self, events: Sequence[NewMailEvent]) -> None: ...
    def listen(self, mailbox_id: str, listener: Listener) -> Callable[[], None]:
        """Call `listener(frame)` for each new mail of the mailbox; returns the unsubscribe."""
        ...

    async def revoke(self, mailbox_id: str, password_gen: int) -> None:
        """Announce that tokens of the mailbox older than `password_gen` are void (after commit)."""
        ...

    def on_revoke(self, mailbox_id: str, listener: RevokeListener) -> Callable[[], None]:
        """Call `listener(password_gen)` on each revocation of the mailbox; returns the unsubscribe."""
        ...

    def on_resync(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after the bus may have missed revocations (a lost Redis came back)."""
        ...

    async def changed(self) -> None:
        """Announce (after commit) that mailboxes, users or domains changed: caches of them are void."""
        ...

    def on_changed(self, listener: Callable[[], None]) -> None:
        """Call `listener()` on each `changed`, and whenever the bus may have missed one."""
        ...

    async def sessions_ended(self, session_ids: Sequence[str]) -> None:
        """Announce (after commit) that these browser sessions ended: their live tokens' sockets close."""
        ...

    def on_sessions_ended(self, listener: SessionsEndedListener) -> None:
        """Call `listener(session_ids)` on each `sessions_ended`."""
        ...

    async def indexed(self, mailbox_ids: Sequence[str]) -> None:
        """Announce that new messages of these mailboxes entered the search index."""
        ...

    def on_indexed(self, mailbox_id: str, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` when messages of the mailbox enter the search index; returns the unsubscribe."""
        ...

    async def claim_slot(self, mailbox_id: str, cap: int) -> str | None:
        """Take one of the mailbox's `cap` WebSocket slots counted across processes: a slot id to
        release later ("" when only this process counts), or None when every slot is taken."""
        ...

    def release_slot(self, slot: str) -> None: ...


class Fanout:
    """Local listeners by mailbox; the part every bus shares."""

    def __init__(self) -> None:
        self._listeners: defaultdict[str, set[Listener]] = defaultdict(set)
        self._revoke_listeners: defaultdict[str, set[RevokeListener]] = defaultdict(set)
        self._resync_listeners: list[Callable[[], None]] = []
        self._index_listeners: defaultdict[str, set[Callable[[], None]]] = defaultdict(set)
        self._changed_listeners: list[Callable[[], None]] = []
        self._ended_listeners: list[SessionsEndedListener] = []

    def on_resync(self, listener: Callable[[], None]) -> None:
        self._resync_listeners.append(listener)

    def resync(self) -> None:
        for listener in self._resync_listeners:
            listener()
        self.deliver_changed()  # a `changed` may have been missed as well

    def on_changed(self, listener: Callable[[], None]) -> None:
        self._changed_listeners.append(listener)

    def deliver_changed(self) -> None:
        for listener in self._changed_listeners:
            listener()

    def on_sessions_ended(self, listener: SessionsEndedListener) -> None:
        self._ended_listeners.append(listener)

    def deliver_sessions_ended(self, session_ids: Sequence[str]) -> None:
        for listener in self._ended_listeners:
            listener(session_ids)

    def listen(self, mailbox_id: str, listener: Listener) -> Callable[[], None]:
        return _add(self._listeners, mailbox_id, listener)

    def on_revoke(self, mailbox_id: str, listener: RevokeListener) -> Callable[[], None]:
        return _add(self._revoke_listeners, mailbox_id, listener)

    def deliver_revoke(self, mailbox_id: str, password_gen: int) -> None:
        for listener in tuple(self._revoke_listeners.get(mailbox_id, ())):
            listener(password_gen)

    def has_listeners(self, mailbox_id: str) -> bool:
        return mailbox_id in self._listeners

    def on_indexed(self, mailbox_id: str, listener: Callable[[], None]) -> Callable[[], None]:
        return _add(self._index_listeners, mailbox_id, listener)

    def deliver_indexed(self, mailbox_id: str) -> None:
        for listener in tuple(self._index_listeners.get(mailbox_id, ())):
            listener()

    def listener_count(self) -> int:
        """Every mail, revocation and index listener held, over all mailboxes."""
        registries = (self._listeners, self._revoke_listeners, self._index_listeners)
        return sum(len(items) for registry in registries for items in registry.values())

    def deliver(self, mailbox_id: str, frame: str) -> None:
        for listener in tuple(self._listeners.get(mailbox_id, ())):
            listener(frame)


class LocalBus(Fanout):
    """In one process: publish calls the listeners directly."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def publish(self, events: Sequence[NewMailEvent]) -> None:
        for event in events:
            if self.has_listeners(event.mailbox_id):
                self.deliver(event.mailbox_id, new_email_frame(event))

    async def revoke(self, mailbox_id: str, password_gen: int) -> None:
        self.deliver_revoke(mailbox_id, password_gen)

    async def changed(self) -> None:
        self.deliver_changed()

    async def sessions_ended(self, session_ids: Sequence[str]) -> None:
        self.deliver_sessions_ended(session_ids)

    async def indexed(self, mailbox_ids: Sequence[str]) -> None:
        for mailbox_id in mailbox_ids:
            self.deliver_indexed(mailbox_id)

    async def claim_slot(self, mailbox_id: str, cap: int) -> str | None:
        return ""  # one process: the WebSocket hub's own count is the whole count

    def release_slot(self, slot: str) -> None:
        return None


def _add(registry: defaultdict[str, set[T]], key: str, item: T) -> Callable[[], None]:
    registry[key].add(item)

    def remove() -> None:
        items = registry.get(key)
        if items is not None:
            items.discard(item)
            if not items:
                del registry[key]

    return remove
