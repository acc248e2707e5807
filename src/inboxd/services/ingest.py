"""Mail reception as a use-case: recipient checks for RCPT, and one transaction per message that
stores a copy per recipient, charges quotas and queues the webhook events; publish after commit.

The SMTP layer calls only `resolve` and `deliver`: it is the seam behind which the protocol
front end can change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import msgspec

from inboxd.config import Settings
from inboxd.errors import MessageRejected
from inboxd.events import EventBus
from inboxd.ids import random_hex, random_uuid, time_ordered_uuid
from inboxd.mail.decoding import without_surrogates
from inboxd.mail.message_walk import MessageWalk, Summary
from inboxd.model import FaultSet, Mailbox, MessageSummary, NewMailEvent, iso
from inboxd.services import tags
from inboxd.services.rawcodec import compress
from inboxd.services.recipients import RecipientCache
from inboxd.store import custom_domains as domain_store
from inboxd.store import mailboxes as mailbox_store
from inboxd.store import message_ingest as message_store
from inboxd.store import search_index as search
from inboxd.store import webhooks as webhook_store
from inboxd.store.db import Database, Joinable, Tx

EMAIL_RECEIVED = "email.received"
# Messages above this size are parsed and compressed in a thread: the event loop would otherwise
# stall every HTTP request and WebSocket for the time a big message takes (docs/performance.md).
OFF_LOOP_BYTES = 256 * 1024
# Messages up to this size hand their MIME walk (and so their bytes) to this process's search
# indexer, which goes on from where the summary stopped; bigger ones it reads back and parses.
HANDOFF_BYTES = 256 * 1024
_encode = msgspec.json.Encoder().encode


class Stored(NamedTuple):
    """A copy just stored, as the search index takes it: what it reads of the message, and the walk
    ingest took its summary from (None for a big message: the indexer reads and parses it again),
    and what the indexer would otherwise read of its row (None when read back)."""

    source: search.Source
    walk: MessageWalk | None
    pending: search.Pending | None = None


@dataclass(frozen=True, slots=True)
class Recipient:
    mailbox: Mailbox
    plan: str
    # The mailbox's SMTP faults (services/faults.py); None for nearly every mailbox.
    faults: FaultSet | None = None
    # The tag of the plus part of the RCPT address (`box+signup@…`) when plus addressing found the mailbox.
    tags: tuple[str, ...] = ()


def email_received_body(event: NewMailEvent, *, event_id: str, created_at: float) -> str:
    """The spec's `email.received` webhook body (section 6)."""
    return _encode(
        {
            "id": event_id,
            "type": EMAIL_RECEIVED,
            "created_at": iso(created_at),
            "data": {
                "email_id": event.message_id,
                "account_id": event.mailbox_id,
                "address": event.address,
                "from": event.from_,
                "sender": event.sender,
                "subject": event.subject,
                "preview_text": event.preview_text,
                "size": event.size,
                "created_at": iso(event.created_at),
            },
        }
    ).decode()


class IngestService:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        bus: EventBus,
        clock: Callable[[], float],
        public_domains: Callable[[str], bool],
    ) -> None:
        self._db = db
        self._settings = settings
        self._bus = bus
        self._clock = clock
        self._is_public = public_domains
        self._job_listeners: list[Callable[[], None]] = []
        self._stored_listeners: list[Callable[[Sequence[Stored]], None]] = []
        self._recipients = RecipientCache(clock=clock, ttl=settings.recipient_cache_ttl)
        bus.on_changed(self._recipients.clear)

    def on_jobs_queued(self, listener: Callable[[], None]) -> None:
        """Called after a commit that queued webhook jobs (the worker wakes at once)."""
        self._job_listeners.append(listener)

    def on_stored(self, listener: Callable[[Sequence[Stored]], None]) -> None:
        """Called after every commit that stored mail, with what the search index needs of each
        new copy (this process's indexer takes them at once, without reading or parsing them again)."""
        self._stored_listeners.append(listener)

    def cached(self, address: str, *, declared_size: int | None = None) -> Recipient | None:
        """The recipient for an RCPT address when the recipient cache accepts it, without waiting;
        None means ask `resolve` (not cached, or something the cache would refuse)."""
        address = address.strip().lower()
        hit = self._recipients.get(address)
        if hit is None or _refusal(hit[0], declared_size, used=hit[1]) is not None:
            return None
        mailbox = hit[0].mailbox
        return Recipient(
            mailbox=mailbox, plan=hit[0].plan, faults=hit[0].faults, tags=tags.plus_tag(address, mailbox.address)
        )

    async def resolve(self, address: str, *, declared_size: int | None = None) -> Recipient:
        """The mailbox for an RCPT address (plus addressing included), or a named refusal."""
        address = address.strip().lower()
        local, _, domain = address.rpartition("@")
        if not local or not domain:
            raise MessageRejected(code="bad_recipient")
        found = await self._recipients.fetch(address, partial(self._lookup, address, local, domain))
        if found is None and not self._is_public(domain) and not await self._serves(domain):
            raise MessageRejected(code="relay_denied")
        refusal = "unknown_recipient" if found is None else _refusal(found, declared_size)
        if refusal is not None:
            raise MessageRejected(code=refusal)
        assert found is not None
        return Recipient(
            mailbox=found.mailbox,
            plan=found.plan,
            faults=found.faults,
            tags=tags.plus_tag(address, found.mailbox.address),
        )

    async def _lookup(self, address: str, local: str, domain: str) -> mailbox_store.RecipientRow | None:
        now = self._clock()
        found = await self._db.read(partial(mailbox_store.recipient, address=address, now=now))
        if found is None and "+" in local:
            base = f"{local.split('+', 1)[0]}@{domain}"
            found = await self._db.read(partial(mailbox_store.recipient, address=base, now=now))
        return found

    async def _serves(self, domain: str) -> bool:
        custom = await self._db.read(partial(domain_store.get_by_name, domain=domain))
        return custom is not None and custom.verify_status == "verified"

    async def deliver(
        self,
        *,
        sender: str,
        recipients: Sequence[Recipient],
        raw: bytes | bytearray,
        envelope: Sequence[str] | None = None,
        client_ip: str | None = None,
        helo: str | None = None,
    ) -> list[str]:
        """Store one copy per recipient in one transaction; returns the message ids after commit.

        `envelope`, the RCPT addresses, is kept with each copy when given (the SMTP sandbox's capture);
        `client_ip` and `helo`, what the SMTP session knew of its client, are kept with the bytes
        (the authentication check's SPF needs them).
        """
        size = len(raw)
        if size > OFF_LOOP_BYTES:
            walk, summary, compressed = await asyncio.to_thread(_prepare, raw)
        else:
            walk, summary, compressed = _prepare(raw)
        del raw  # not needed past this point (but through a small message's walk); the caller lets go too
        handed = walk if size <= HANDOFF_BYTES else None
        del walk
        now = self._clock()
        kept = None if envelope is None else _encode([storable(a) for a in envelope]).decode()
        copies = [self._copy(r, summary, sender=sender, size=size, now=now) for r in recipients]
        # One row of bytes for the delivery, however many mailboxes it reaches.
        source_id = time_ordered_uuid(now)
        client_ip, helo = _storable_or_none(client_ip), _storable_or_none(helo)
        items = [
            message_store.NewMessage(
                summary=c, raw_compressed=compressed, source_id=source_id, envelope=kept, client_ip=client_ip, helo=helo
            )
            for c in copies
        ]
        addresses = {r.mailbox.id: r.mailbox.address for r in recipients}
        events = [
            _event(c, addresses[c.mailbox_id], r.mailbox.user_id) for c, r in zip(copies, recipients, strict=True)
        ]
        queued = await self._db.write(Joinable(_store, _Delivery(items, events, now)))
        for recipient in recipients:
            self._recipients.charge(recipient.mailbox.id, size)
        await self._bus.publish(events)
        if self._stored_listeners:
            stored = [
                Stored(
                    search.Source(c.id, compressed, c.subject, c.from_, c.sender, addresses[c.mailbox_id], kept),
                    handed,
                    search.Pending(c.id, c.mailbox_id, size, c.created_at),
                )
                for c in copies
            ]
            for took in self._stored_listeners:
                took(stored)
        if queued:
            for wake in self._job_listeners:
                wake()
        return [c.id for c in copies]

    def _copy(self, recipient: Recipient, summary: Summary, *, sender: str, size: int, now: float) -> MessageSummary:
        retention = self._settings.retention_pro if recipient.plan == "pro" else self._settings.retention_free
        # Ingest's tags: the plus part first, then the X-Tags header (merged is cheap: a few short strings).
        kept = tags.merged(recipient.tags, tags.from_header(summary.x_tags)) if summary.x_tags or recipient.tags else ()
        return MessageSummary(
            id=time_ordered_uuid(now),
            mailbox_id=recipient.mailbox.id,
            sender=storable(sender),
            from_=storable(summary.from_),
            subject=storable(summary.subject),
            preview_text=storable(summary.preview_text),
            size=size,
            is_read=False,
            created_at=now,
            expires_at=now + retention,
            tags=kept,
        )


def _refusal(found: mailbox_store.RecipientRow, declared_size: int | None, *, used: int | None = None) -> str | None:
    """Why RCPT refuses this mailbox (an error code), or None when it takes mail; `used` when it
    is known better than the row's (the recipient cache's)."""
    if not found.domain_live:
        # A mailbox whose custom domain was deleted is unknown here (5.1.1), not a relay (5.7.1).
        return "unknown_recipient"
    if found.user_status != "active":
        # A suspended user's mailboxes exist but take no mail until the user is reactivated.
        return "mailbox_disabled"
    quota = found.mailbox.quota
    used = found.mailbox.used if used is None else used  # expired bytes already free their room
    if used >= quota or (declared_size and used + declared_size > quota):
        return "mailbox_full"
    return None


async def _refusal_at_commit(tx: Tx, items: Sequence[message_store.NewMessage]) -> MessageRejected:
    """Why the quota charge refused the message: a mailbox deleted since RCPT accepted it (another
    process's recipient cache may not have heard of the deletion yet: 5.1.1), else a full one."""
    ids = sorted({item.summary.mailbox_id for item in items})
    if await mailbox_store.count_existing(tx, ids) < len(ids):
        return MessageRejected(code="unknown_recipient")
    return MessageRejected(code="mailbox_full")


def _prepare(raw: bytes | bytearray) -> tuple[MessageWalk, Summary, bytes]:
    """The MIME walk, the summary and the compressed bytes of one message (pure; may run in a thread)."""
    walk = MessageWalk(raw)
    return walk, walk.summary(), compress(raw)


def storable(text: str) -> str:
    """Text both databases accept: no NUL (PostgreSQL refuses it) and no lone surrogates."""
    if text.isascii() and "\x00" not in text:
        return text
    return without_surrogates(text).replace("\x00", "\ufffd")


def _storable_or_none(text: str | None) -> str | None:
    return None if text is None else storable(text)


def _event(copy: MessageSummary, address: str, user_id: str) -> NewMailEvent:
    return NewMailEvent(
        message_id=copy.id,
        mailbox_id=copy.mailbox_id,
        user_id=user_id,
        address=address,
        sender=copy.sender,
        from_=copy.from_,
        subject=copy.subject,
        preview_text=copy.preview_text,
        size=copy.size,
        created_at=copy.created_at,
    )


@dataclass(frozen=True, slots=True)
class _Delivery:
    """One message's copies and their events, as `_store` writes them."""

    items: Sequence[message_store.NewMessage]
    events: Sequence[NewMailEvent]
    now: float


async def _store(tx: Tx, deliveries: Sequence[_Delivery]) -> list[int]:
    """The ingest transaction of one delivery, or of several the writer joined (`Joinable`): the
    copies, their quota charge and their webhook jobs; the jobs queued for each. When a mailbox is
    full, the whole call fails, and joined deliveries are then written one by one, so only the
    message that does not fit is refused."""
    items = [item for d in deliveries for item in d.items]
    users = sorted({e.user_id for d in deliveries for e in d.events})
    hooks = await message_store.insert_charged(tx, items, hook_users=users, event_type=EMAIL_RECEIVED)
    if hooks is None:
        # One full mailbox refuses the message for all: SMTP has one reply to DATA.
        raise await _refusal_at_commit(tx, items)
    jobs: list[webhook_store.NewJob] = []
    queued: list[int] = []
    for delivery in deliveries:
        before = len(jobs)
        for event in delivery.events:
            for webhook_id in hooks.get(event.user_id, ()):
                event_id = f"evt_{random_hex()}"
                jobs.append(
                    webhook_store.NewJob(
                        id=random_uuid(),
                        webhook_id=webhook_id,
                        event_id=event_id,
                        event_type=EMAIL_RECEIVED,
                        payload=email_received_body(event, event_id=event_id, created_at=delivery.now),
                        event_at=delivery.now,
                        due_at=delivery.now,
                    )
                )
        queued.append(len(jobs) - before)
    if jobs:
        await webhook_store.insert_jobs(tx, jobs)
    return queued
