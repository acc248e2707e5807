"""Waiting for a message: the newest one a filter keeps, at once if it is there, otherwise the
moment one is committed.

A wait holds no timer loop and never polls the database: it listens on the event bus for the
mailbox (new mail, and the search index catching up when the filter reads the index), and runs
the filtered query once at the start and once per wake-up. The bus may be in-process or Redis,
so mail accepted by another process wakes it too. Cancelling the wait (the client went away)
removes its listeners on the way out.

Open waits are capped: `max_waits_per_mailbox` per mailbox and `max_waits_per_user` per user (the
mailbox's owner), counted by the limiter (in memory, or in Redis across processes); one more is
429 `too_many_waits`. A wait takes its places before it starts listening and gives them back however it
ends (a match, a timeout, the client leaving, shutdown); in Redis a place also lapses on its own
shortly after the wait's longest life, should its process die.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from inboxd.config import Settings
from inboxd.errors import NotFound, RateLimited, Unavailable, WaitTimeout
from inboxd.events import EventBus
from inboxd.model import Mailbox, MessageDetail, MessageFilter
from inboxd.services.limits import Admission
from inboxd.services.messages import MessageService

T = TypeVar("T")
# How long past its timeout a wait's places may outlive a process that died holding them.
HOLD_GRACE = 60.0


class WaitService:
    def __init__(self, messages: MessageService, bus: EventBus, *, admission: Admission, settings: Settings) -> None:
        self._messages = messages
        self._bus = bus
        self._admission = admission
        self._settings = settings
        self._active: dict[asyncio.Event, str] = {}  # wake-up event → mailbox id
        # `registered`/`settled` callers: their condition, and what to wake them with.
        self._watchers: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._closing = False

    @property
    def active(self) -> int:
        """Waits in progress in this process."""
        return len(self._active)

    async def registered(self, count: int, *, mailbox_id: str | None = None) -> None:
        """Return once at least `count` waits (on `mailbox_id`, or on any mailbox) are listening in
        this process: a test or an embedding sends its mail after that rather than after a sleep."""
        await self._until(lambda n: n >= count, mailbox_id)

    async def settled(self, count: int = 0, *, mailbox_id: str | None = None) -> None:
        """Return once at most `count` waits (on `mailbox_id`, or any) are left, their places given back."""
        await self._until(lambda n: n <= count, mailbox_id)

    async def _until(self, check: Callable[[int], bool], mailbox_id: str | None) -> None:
        def met() -> bool:
            return check(sum(1 for m in self._active.values() if mailbox_id in (None, m)))

        if met():
            return
        watch = (met, asyncio.get_running_loop().create_future())
        self._watchers.append(watch)
        try:
            await watch[1]
        finally:
            self._watchers.remove(watch)

    def _note_change(self) -> None:
        for met, done in self._watchers:
            if not done.done() and met():
                done.set_result(None)

    async def wait(self, mailbox: Mailbox, flt: MessageFilter, *, within: float) -> MessageDetail:
        """The message detail of the newest match."""
        return await self.wait_for(mailbox, flt, within=within, read=partial(self._messages.detail, mailbox))

    async def wait_for(
        self, mailbox: Mailbox, flt: MessageFilter, *, within: float, read: Callable[[str], Awaitable[T]]
    ) -> T:
        """`read(message id)` of the newest match; a face with its own detail (the sandbox) passes
        its reader. `NotFound` from it means the message went away meanwhile: look again."""
        if self._closing:
            raise Unavailable()
        held = await self._admission.hold(
            (
                (f"wait:{{{mailbox.user_id}}}:mailbox:{mailbox.id}", self._settings.max_waits_per_mailbox),
                (f"wait:{{{mailbox.user_id}}}:all", self._settings.max_waits_per_user),
            ),
            lifetime=within + HOLD_GRACE,
        )
        if held is None:
            raise RateLimited(
                f"Too many open waits: at most {self._settings.max_waits_per_mailbox} per mailbox and "
                f"{self._settings.max_waits_per_user} per user; let one end first.",
                code="too_many_waits",
            )
        woken = asyncio.Event()
        try:
            return await self._listen(mailbox, flt, woken, within=within, read=read)
        finally:
            # Shielded: a client that leaves cancels the wait, and its places must still go back.
            try:
                await asyncio.shield(self._admission.let_go(held))
            finally:
                self._active.pop(woken, None)
                self._note_change()

    async def _listen(
        self,
        mailbox: Mailbox,
        flt: MessageFilter,
        woken: asyncio.Event,
        *,
        within: float,
        read: Callable[[str], Awaitable[T]],
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        wake: Callable[..., None] = lambda *_: woken.set()  # noqa: E731
        # Listen before the first look, so a message committed in between still wakes us.
        stops = [self._bus.listen(mailbox.id, wake)]
        if flt.needs_index:
            stops.append(self._bus.on_indexed(mailbox.id, wake))
        self._active[woken] = mailbox.id
        self._note_change()
        try:
            while True:
                woken.clear()
                found = await self._messages.newest(mailbox, flt)
                if found is not None:
                    try:
                        return await read(found.id)
                    except NotFound:
                        continue  # deleted in between: look again
                if self._closing:
                    raise Unavailable()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise WaitTimeout(f"No matching message arrived within {within:g} s.")
                try:
                    async with asyncio.timeout(remaining):
                        await woken.wait()
                except TimeoutError:
                    raise WaitTimeout(f"No matching message arrived within {within:g} s.") from None
        finally:
            for stop in stops:
                stop()

    def close(self) -> None:
        """The server is stopping: every wait answers 503 now rather than hold the shutdown."""
        self._closing = True
        for woken in self._active:
            woken.set()
