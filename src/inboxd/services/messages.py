"""Reading and changing messages: pages, detail (full parse on first open, kept), raw source,
attachments, the HTML view (made safe on first view, kept), read marks and deletion. Expired
messages answer 410 until they are purged.

The first detail build and the HTML view's sanitizing run on the analysis executor
(services/analysis.py), once for concurrent requests of one message, in its owner's share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import msgspec

from inboxd.errors import FilterTooBroad, Gone, InsufficientStorage, InvalidRequest, NotFound
from inboxd.mail import html_view
from inboxd.mail.codes import find_codes, find_links
from inboxd.mail.html_view import SafeHtml
from inboxd.mail.parse import AttachmentPart, attachment_parts, parse_message
from inboxd.model import (
    NO_FILTER,
    Attachment,
    AttachmentContent,
    Link,
    Mailbox,
    MessageDetail,
    MessageFilter,
    MessageSummary,
)
from inboxd.services import tags
from inboxd.services.analysis import Analysis
from inboxd.services.mailboxes import InMailbox
from inboxd.services.rawcodec import decompress
from inboxd.store import message_marks, message_sweeps
from inboxd.store import messages as store
from inboxd.store.db import Database, Tx, Work
from inboxd.store.search import reads_rows

T = TypeVar("T")

MAX_MARK_IDS = 200
OFF_LOOP_BYTES = 256 * 1024
# A kept parse larger than this is not kept: its JSON (six bytes per control character) would be
# written, read and decoded whole on every open; such a message is parsed again when opened.
KEEP_DETAIL_BYTES = 2 * 1024 * 1024


# Where the attachments of recently opened messages lie in their sources: a client downloads them
# one request at a time, and walking the MIME tree for each would cost the whole parse per
# attachment (quadratic in the number of parts). Bounded by the parts held, not by messages.
PART_INDEX_PARTS = 50_000


class _PartIndex:
    """The located attachments of recently opened messages, least recently used dropped first.
    A message's source never changes, so an entry never goes stale; whether the message is still
    there is checked on every request before the index is consulted."""

    def __init__(self, max_parts: int) -> None:
        self._max_parts = max_parts
        self._held = 0
        self._entries: OrderedDict[str, tuple[AttachmentPart, ...]] = OrderedDict()

    def get(self, message_id: str) -> tuple[AttachmentPart, ...] | None:
        parts = self._entries.get(message_id)
        if parts is not None:
            self._entries.move_to_end(message_id)
        return parts

    def put(self, message_id: str, parts: tuple[AttachmentPart, ...]) -> None:
        if message_id in self._entries or len(parts) > self._max_parts:
            return
        self._entries[message_id] = parts
        self._held += len(parts) + 1
        while self._held > self._max_parts:
            _, dropped = self._entries.popitem(last=False)
            self._held -= len(dropped) + 1


# The HTML views kept in memory (`_KeptViews`): a view is made once per message and remote choice;
# one whose document is longer than a tenth of the bound is made again at each view.
KEPT_VIEW_CHARS = 32 * 1024 * 1024


class _KeptViews:
    """Made-safe HTML views by (message id, remote allowed), bounded in characters, the least
    recently used dropped first. A message's source never changes, so a view never goes stale;
    whether the message is still there is checked on every request first."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._held = 0
        self._entries: OrderedDict[tuple[str, bool], SafeHtml] = OrderedDict()

    def get(self, key: tuple[str, bool]) -> SafeHtml | None:
        view = self._entries.get(key)
        if view is not None:
            self._entries.move_to_end(key)
        return view

    def put(self, key: tuple[str, bool], view: SafeHtml) -> None:
        size = len(view.document)
        if key in self._entries or size * 10 > self._max_chars:
            return
        self._entries[key] = view
        self._held += size
        while self._held > self._max_chars:
            _, dropped = self._entries.popitem(last=False)
            self._held -= len(dropped.document)

    def forget(self, message_ids: Sequence[str]) -> None:
        for message_id in message_ids:
            for remote in (False, True):
                dropped = self._entries.pop((message_id, remote), None)
                if dropped is not None:
                    self._held -= len(dropped.document)


# What the encoded JSON kept in memory may hold (`KeptJson`): a list item is about 400 bytes, a
# detail up to six times its bodies (those above 64 KiB are streamed and not kept).
KEPT_ITEM_BYTES = 4 * 1024 * 1024
KEPT_DETAIL_BYTES = 8 * 1024 * 1024

# A kept JSON is keyed by the message's id, its read mark and its tags (`messages.tags`, spaces
# between them): everything else an answer says of a message (sender, subject, size, its mailbox's
# address, the parse...) never changes once it is stored, and the mark and tags are read with the
# message on every request, so a change, in this process or another, selects another entry instead
# of serving a stale one. A deleted or expired message is not read at all.
KeptKey = tuple[str, bool, str]


def kept_key(summary: MessageSummary) -> KeptKey:
    return (summary.id, summary.is_read, " ".join(summary.tags))


class KeptJson:
    """Encoded JSON answers by `KeptKey`, bounded in bytes, the oldest kept dropped first (not
    the least recently used: a hit is then one dict lookup; a dropped entry is encoded again)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._held = 0
        self._entries: dict[KeptKey, bytes] = {}
        self.get = self._entries.get

    def put(self, key: KeptKey, data: bytes) -> None:
        if key in self._entries or len(data) * 16 > self._max_bytes:
            return
        self._entries[key] = data
        self._held += len(data)
        while self._held > self._max_bytes:
            self._held -= len(self._entries.pop(next(iter(self._entries))))

    def forget(self, message_ids: Sequence[str]) -> None:
        """Drop a deleted message's untagged entries (memory only: it would never be read again;
        a tagged one's go with the oldest)."""
        for message_id in message_ids:
            for is_read in (False, True):
                dropped = self._entries.pop((message_id, is_read, ""), None)
                if dropped is not None:
                    self._held -= len(dropped)


# The kept parse says which version of it it is; an older one is parsed again on its next open, so
# fields added since (codes, links, headers...) appear on messages received before them. Raise it
# too when the rules of inboxd.mail.codes change, so kept codes and links follow them.
DETAIL_VERSION = 4


class _StoredDetail(msgspec.Struct):
    text_body: str
    html_body: str
    attachments: list[tuple[str, str, int]]
    v: int = 1
    to: str = ""
    cc: str = ""
    headers: list[tuple[str, str]] = []
    codes: list[str] = []
    links: list[tuple[str, str]] = []


def _build_detail(raw: bytes) -> _StoredDetail:
    """The full parse and what is extracted from it; CPU-bound, run off the event loop."""
    parsed = parse_message(raw)
    return _StoredDetail(
        v=DETAIL_VERSION,
        text_body=parsed.text_body,
        html_body=parsed.html_body,
        attachments=[(a.filename, a.content_type, len(a.data)) for a in parsed.attachments],
        to=parsed.to,
        cc=parsed.cc,
        headers=list(parsed.headers),
        codes=find_codes(parsed.summary.subject, parsed.text_body, parsed.html_body),
        links=[(link.url, link.text) for link in find_links(parsed.text_body, parsed.html_body)],
    )


_encode_detail = msgspec.json.Encoder().encode
_decode_detail = msgspec.json.Decoder(_StoredDetail).decode


@dataclass(frozen=True, slots=True)
class Opened:
    """What the detail of a message is made from: read in one go (`MessageService.detail_in`)."""

    mailbox: Mailbox
    summary: MessageSummary
    kept: str | None  # the parse kept from an earlier opening, if any
    # The detail's JSON kept from an earlier answer (`MessageService.details`): then `kept` is not read.
    encoded: bytes | None = None


def _live(summary: MessageSummary | None, now: float) -> MessageSummary:
    """A message that is there and not past its expiry: 404 and 410 otherwise."""
    if summary is None:
        raise NotFound("No such message.")
    if summary.expires_at <= now:
        raise Gone("This message has expired.", code="expired")
    return summary


class MessageService:
    def __init__(self, db: Database, *, clock: Callable[[], float], analysis: Analysis, scan_rows: int = 0) -> None:
        self._db = db
        self._clock = clock
        # The executor of mail analysis, shared with the checks (app.py builds it).
        self.analysis = analysis
        self._views = _KeptViews(KEPT_VIEW_CHARS)
        # What a row-reading filter may read of a mailbox (`INBOXD_FILTER_SCAN_ROWS`; 0: no bound).
        self._scan_rows = scan_rows
        self._parts = _PartIndex(PART_INDEX_PARTS)
        # The API's encoded list items and details (encode once: a page is a join of kept items).
        self.items = KeptJson(KEPT_ITEM_BYTES)
        self.details = KeptJson(KEPT_DETAIL_BYTES)

    async def page(self, mailbox: Mailbox, page: int, flt: MessageFilter = NO_FILTER) -> list[MessageSummary]:
        read = self.page_in(page, flt)
        return await self.read_list(flt, lambda tx: read(tx, mailbox))

    @staticmethod
    def reads_aside(flt: MessageFilter) -> bool:
        """Whether a list with `flt` is read off the event loop (`Database.read_aside`): a filter
        that reads rows may walk up to its bound of them; any other list is a short indexed read."""
        return reads_rows(flt)

    async def read_list(self, flt: MessageFilter, work: Work[T]) -> T:
        """`work`, a read of a list with `flt`, on the event loop or aside (`reads_aside`)."""
        return await (self._db.read_aside if self.reads_aside(flt) else self._db.read)(work)

    def page_in(self, page: int, flt: MessageFilter = NO_FILTER) -> InMailbox[list[MessageSummary]]:
        """One page as a read inside a mailbox, for `MailboxService.read_in`."""
        if page < 1:
            raise InvalidRequest("`page` must be an integer of at least 1.")
        now = self._clock()

        async def read(tx: Tx, mailbox: Mailbox) -> list[MessageSummary]:
            return await store.page(tx, mailbox.id, page=page, now=now, flt=flt, scan_rows=self._scan_rows)

        return read

    def page_json_in(
        self, page: int, flt: MessageFilter, encode: Callable[[MessageSummary], bytes]
    ) -> InMailbox[list[bytes]]:
        """`page_in` as each message's encoded item: `encode` once per message and read mark, then
        kept in `items`."""
        if page < 1:
            raise InvalidRequest("`page` must be an integer of at least 1.")
        now = self._clock()
        kept = self.items

        async def read(tx: Tx, mailbox: Mailbox) -> list[bytes]:
            # The page's keys first: when every item is kept, the rest of each row (its addresses,
            # subject and preview, most of the read) is not needed. The mark is as the database
            # gives it (0/1 or a bool): (id, 1, t) and (id, True, t) are one key.
            keys = await store.page_rows(
                tx, mailbox.id, page=page, now=now, flt=flt, scan_rows=self._scan_rows, keys_only=True
            )
            found = [kept.get((key[0], key[1], key[2])) for key in keys]
            if None not in found:
                return found  # type: ignore[return-value]  # no None
            # The whole page read again, its items all from this one read, so a page is never
            # stitched from two reads between which a message arrived or was marked.
            rows = await store.page_rows(tx, mailbox.id, page=page, now=now, flt=flt, scan_rows=self._scan_rows)
            # row[0], row[7] and row[10] are the id, the read mark and the tags (store.SUMMARY).
            found = [kept.get((row[0], row[7], row[10])) for row in rows]
            if None in found:
                for i, row in enumerate(rows):
                    if found[i] is None:
                        data = found[i] = encode(store.summary_from(row))
                        kept.put((row[0], bool(row[7]), row[10]), data)
            return found  # type: ignore[return-value]  # no None left

        return read

    async def newest(self, mailbox: Mailbox, flt: MessageFilter) -> MessageSummary | None:
        """The newest live message of the mailbox that `flt` keeps, among those a row-reading filter
        may read: a wait looks for new mail, which is always among them."""
        read = partial(
            store.page, mailbox_id=mailbox.id, page=1, now=self._clock(), flt=flt, size=1, scan_rows=self._scan_rows
        )
        try:
            found = await self.read_list(flt, read)
        except FilterTooBroad:
            return None
        return found[0] if found else None

    async def _live(self, mailbox: Mailbox, message_id: str) -> MessageSummary:
        summary = await self._db.read(partial(store.get, mailbox_id=mailbox.id, message_id=message_id))
        return _live(summary, self._clock())

    async def _raw(self, summary: MessageSummary) -> bytes:
        if summary.size > OFF_LOOP_BYTES:
            # A big message (up to 25 MiB) would hold the event loop for milliseconds, both read
            # from the database and decompressed.
            compressed = await self._db.read_large(partial(store.raw_large, message_id=summary.id))
            if compressed is None:
                raise NotFound("No such message.")
            return await asyncio.to_thread(decompress, compressed)
        compressed = await self._db.read(partial(store.raw, message_id=summary.id))
        if compressed is None:
            raise NotFound("No such message.")
        return decompress(compressed)

    async def detail(self, mailbox: Mailbox, message_id: str) -> MessageDetail:
        read = self.detail_in(message_id)
        return await self.detail_of(await self._db.read(lambda tx: read(tx, mailbox)))

    def detail_in(self, message_id: str, *, encoded: bool = False) -> InMailbox[Opened]:
        """A message and its kept parse as a read inside a mailbox, for `MailboxService.read_in`;
        `detail_of` makes the detail of what it read. With `encoded`, a detail's JSON kept in
        `details` is taken instead of the parse (`Opened.encoded`)."""
        now = self._clock()

        async def read(tx: Tx, mailbox: Mailbox) -> Opened:
            summary = _live(await store.get(tx, mailbox.id, message_id), now)
            kept_json = self.details.get(kept_key(summary)) if encoded else None
            if kept_json is not None:
                return Opened(mailbox=mailbox, summary=summary, kept=None, encoded=kept_json)
            return Opened(mailbox=mailbox, summary=summary, kept=await store.detail_json(tx, summary.id))

        return read

    async def detail_of(self, opened: Opened) -> MessageDetail:
        mailbox, summary = opened.mailbox, opened.summary
        stored = None if opened.kept is None else _decode_detail(opened.kept)
        if stored is None or stored.v < DETAIL_VERSION:
            stored = await self.analysis.shared((summary.id, "detail"), partial(self._first_build, mailbox, summary))
        return MessageDetail(
            summary=summary,
            address=mailbox.address,
            text_body=stored.text_body,
            html_body=stored.html_body,
            attachments=tuple(
                Attachment(index=i, filename=name, content_type=ctype, size=size)
                for i, (name, ctype, size) in enumerate(stored.attachments)
            ),
            to=stored.to,
            cc=stored.cc,
            headers=tuple((name, value) for name, value in stored.headers),
            codes=tuple(stored.codes),
            links=tuple(Link(url=url, text=text) for url, text in stored.links),
        )

    async def _first_build(self, mailbox: Mailbox, summary: MessageSummary) -> _StoredDetail:
        """The parse of a message opened for the first time (or kept by an older version), kept
        unless too large; once for concurrent openings, and to its end if they go away."""
        stored = await self.analysis.execute(
            user=mailbox.user_id, work=partial(_build_detail, await self._raw(summary))
        )
        if len(stored.text_body) + len(stored.html_body) <= KEEP_DETAIL_BYTES // 6:
            # Keeping the parse is a cache: a full disk must not fail the read (it is parsed again).
            with contextlib.suppress(InsufficientStorage):
                await self._db.write(partial(store.save_detail, message_id=summary.id, detail=_encode(stored)))
        return stored

    async def source(self, mailbox: Mailbox, message_id: str) -> bytes:
        return await self._raw(await self._live(mailbox, message_id))

    async def live(self, mailbox: Mailbox, message_id: str) -> MessageSummary:
        """A message of the mailbox that is there and not expired (404 and 410 otherwise)."""
        return await self._live(mailbox, message_id)

    async def raw_of(self, summary: MessageSummary) -> bytes:
        """The bytes of a message `live` answered."""
        return await self._raw(summary)

    async def attachment(self, mailbox: Mailbox, message_id: str, index: str) -> AttachmentContent:
        if not (index.isascii() and index.isdigit()):
            raise InvalidRequest("The attachment index must be a non-negative integer.", code="invalid_index")
        summary = await self._live(mailbox, message_id)
        raw = await self._raw(summary)
        parts = self._parts.get(summary.id)
        if parts is None:
            parts = await asyncio.to_thread(attachment_parts, raw)
            self._parts.put(summary.id, parts)
        position = int(index)
        if position >= len(parts):
            raise InvalidRequest("The message has no attachment at that index.", code="invalid_index")
        part = parts[position]
        if part.end - part.start > OFF_LOOP_BYTES:
            data = await asyncio.to_thread(part.data, raw)
        else:
            data = part.data(raw)
        return AttachmentContent(filename=part.filename, content_type=part.content_type, data=data)

    async def html_view(self, mailbox: Mailbox, message_id: str, *, allow_remote: bool) -> SafeHtml:
        """The HTML body made inert for the browser, its `cid:` images taken from its own parts:
        made once per message and remote choice, then kept (`_KeptViews`)."""
        summary = await self._live(mailbox, message_id)
        kept = self._views.get((summary.id, allow_remote))
        if kept is not None:
            return kept
        part = "html+remote" if allow_remote else "html"
        return await self.analysis.shared(
            (summary.id, part), partial(self._build_view, mailbox, summary, allow_remote=allow_remote)
        )

    async def _build_view(self, mailbox: Mailbox, summary: MessageSummary, *, allow_remote: bool) -> SafeHtml:
        raw = await self._raw(summary)

        def build() -> SafeHtml:
            parsed = parse_message(raw)
            inline = {a.content_id: (a.content_type, a.data) for a in parsed.attachments if a.content_id}
            return html_view.render(parsed.html_body, inline, allow_remote=allow_remote)

        view = await self.analysis.execute(user=mailbox.user_id, work=build)
        self._views.put((summary.id, allow_remote), view)
        return view

    async def mark_read(self, mailbox: Mailbox, message_id: str) -> None:
        await self._live(mailbox, message_id)
        await self._db.write(
            partial(message_marks.mark_read, mailbox_id=mailbox.id, message_ids=[message_id], now=self._clock())
        )

    async def mark_unread(self, mailbox: Mailbox, message_id: str) -> None:
        await self._live(mailbox, message_id)
        await self._db.write(
            partial(message_marks.mark_unread, mailbox_id=mailbox.id, message_id=message_id, now=self._clock())
        )

    async def unread_counts(self, mailboxes: Sequence[Mailbox]) -> dict[str, int]:
        ids = [m.id for m in mailboxes]
        return await self._db.read(partial(message_marks.unread_counts, mailbox_ids=ids, now=self._clock()))

    async def mark_many_read(self, mailbox: Mailbox, *, ids: Sequence[str] | None, all_: bool) -> int:
        now = self._clock()
        if all_:
            return await self._db.write(partial(message_marks.mark_all_read, mailbox_id=mailbox.id, now=now))
        if ids is None or not 1 <= len(ids) <= MAX_MARK_IDS:
            raise InvalidRequest('`ids` must hold 1 to 200 message ids, or send {"all": true}.')
        unique = list(dict.fromkeys(message_id.strip().lower() for message_id in ids))
        return await self._db.write(
            partial(message_marks.mark_read, mailbox_id=mailbox.id, message_ids=unique, now=now)
        )

    async def delete(self, mailbox: Mailbox, message_id: str) -> None:
        async def remove(tx: Tx) -> bool:
            return await message_sweeps.soft_delete(tx, mailbox.id, message_id)

        if not await self._db.write(remove):
            raise NotFound("No such message.")
        self.items.forget([message_id])
        self.details.forget([message_id])
        self._views.forget([message_id])

    async def set_tags(self, mailbox: Mailbox, message_id: str, wanted: Sequence[object]) -> tuple[str, ...]:
        """Replace a live message's tags (services/tags.py says which are valid); returns them."""
        kept = tags.checked(wanted)
        await self._live(mailbox, message_id)
        changed = await self._db.write(
            partial(message_marks.set_tags, mailbox_id=mailbox.id, message_id=message_id, tags=kept)
        )
        if changed is None:
            raise NotFound("No such message.")
        return changed.tags


def _encode(detail: _StoredDetail) -> str:
    return _encode_detail(detail).decode()
