"""The search indexer: fills `message_search` off the SMTP path.

Ingest answers 250 without waiting for it; the indexer is woken after each commit with the new
messages (and looks on its own every few seconds), gathers what LINGER seconds bring, takes the
messages still flagged `indexed = 0` (read from the database, unless ingest handed over every
one of them, with what their rows hold: then `save`'s claim alone checks them), builds their
documents in a thread and writes their rows in one transaction, then tells the bus which
mailboxes gained indexed mail so waits on full-text filters look again. A message ingest handed
over comes with the MIME walk its summary was taken from, which goes on where the summary
stopped: it is neither read back, nor decompressed, nor parsed again. Others (too big to keep,
left by a restart or another process) are read back and parsed. The flag lives in the database,
so a restart simply carries on.

A list or a wait on `q`, `to` or `has_attachments` never answers without mail the index lacks:
its read finds the mailbox's waiting mail (`search.require_indexed`) and the database has it
indexed here first (`catch_up`, one batch of that mailbox at a time), so the background pass only
decides how soon mail is indexed when nobody asks (`INBOXD_INDEX_LINGER`).

Several processes on one database each index the mail they took themselves, and another's only
once it is SETTLE seconds old (left behind by a process that stopped): each message is parsed
once, and two indexers do not queue on each other's row locks (which, with the ingest writes in
the same group commits, deadlocked on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import msgspec

from inboxd.events import EventBus
from inboxd.mail.html_text import html_to_text
from inboxd.mail.message_walk import MessageWalk, body_prefixes
from inboxd.services.filters import index_words
from inboxd.services.ingest import Stored, storable
from inboxd.services.rawcodec import decompress
from inboxd.store import search_index
from inboxd.store.db import Database
from inboxd.tasks import cancel_and_wait

log = logging.getLogger("inboxd.indexer")
BATCH = 200
POLL_INTERVAL = 5.0
# Seconds the indexer waits after a wake before it reads what is waiting (well within the 2 s in
# which mail is searchable).
LINGER = 0.05
SETTLE = 10.0
OWN_LIMIT = 100_000
# Sources ingest hands over with the ids (so the indexer need not read them back) are kept up to
# this many bytes in all, each up to SOURCE_BYTES (compressed, and raw with the walk ingest took its
# summary from); beyond, only the id is kept.
KEPT_BYTES = 16 * 1024 * 1024
SOURCE_BYTES = 384 * 1024
# What a walk holds besides the raw bytes (parsed headers, the paused generator), roughly.
WALK_OVERHEAD = 4096
BODY_CHARS = 256 * 1024
# The body's words come from its first BODY_CHARS characters, so no more than this much of its
# encoded payload is decoded (base64 and 4-byte UTF-8 fit 256 Ki characters in it).
BODY_BYTES = 2 * 1024 * 1024
# HTML is rendered to text from its first this many characters: html.parser costs about a
# microsecond per character, in Python, holding the GIL the event loop needs.
HTML_CHARS = 512 * 1024
# Sources read and parsed at once: a batch of big messages (25 MiB each) must not all sit in memory.
CHUNK_BYTES = 16 * 1024 * 1024
_decode_envelope = msgspec.json.Decoder(list[str]).decode


def build_doc(
    row: search_index.Source, pending: search_index.Pending, walk: MessageWalk | None = None
) -> search_index.Doc:
    """One message's index row from its stored source, or from the MIME walk ingest took its summary
    from (the walk goes on where the summary stopped: nothing is decompressed or parsed again);
    pure CPU, run in a thread."""
    message_id, compressed, subject, from_, sender, address, envelope = row
    bodies = body_prefixes(decompress(compressed), BODY_BYTES) if walk is None else walk.bodies(BODY_BYTES)
    # The sandbox keeps the envelope recipients: Bcc'd addresses are found by `to` too.
    captured = _decode_envelope(envelope) if envelope else []
    recipients = storable(" ".join([address, *bodies.recipients, *captured])).lower()
    body = bodies.text_body if bodies.text_body.strip() else html_to_text(bodies.html_body[:HTML_CHARS])
    return search_index.Doc(
        message_id=message_id,
        mailbox_id=pending.mailbox_id,
        created_at=pending.created_at,
        recipients=recipients,
        has_attachments=bodies.has_attachments,
        words=index_words((subject, from_, sender, recipients, body[:BODY_CHARS])),
    )


class SearchIndexer:
    def __init__(
        self,
        db: Database,
        bus: EventBus,
        *,
        clock: Callable[[], float],
        batch: int = BATCH,
        interval: float = POLL_INTERVAL,
        linger: float = LINGER,
    ) -> None:
        self._db = db
        self._bus = bus
        self._clock = clock
        self._batch = batch
        self._interval = interval
        self._linger = linger
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # `catch_up` in flight per mailbox: concurrent lists of one mailbox share one batch.
        self._catching: dict[str, asyncio.Future[None]] = {}
        # The messages a batch under way holds, each with the future it sets when it is done.
        self._running: dict[str, asyncio.Future[None]] = {}
        # Ids of mail this process stored and has not indexed yet, with what ingest handed over
        # when it kept it; a message whose id is lost from here (the set is capped) is indexed all
        # the same once settled.
        self._own: dict[str, Stored | None] = {}
        self._kept_bytes = 0
        # When the next batch reads what is waiting even if ingest handed all of it over: mail
        # left by a restart or another process is found at least every `interval` seconds.
        self._next_scan = 0.0
        # Messages indexed from what ingest handed over, and read back from the database (the
        # tests read them: a message handed over must not be read back).
        self.handed = self.read_back = 0

    def wake(self, message_ids: Sequence[str] = ()) -> None:
        for message_id in message_ids:
            if len(self._own) < OWN_LIMIT:
                self._own.setdefault(message_id, None)
        self._wake.set()

    def took(self, stored: Sequence[Stored]) -> None:
        """Mail this process just stored, with what the index needs of it (ingest's `on_stored`):
        small messages are kept with their walk, so indexing them reads nothing back from the
        database and parses nothing twice."""
        for item in stored:
            size = _held(item)
            if len(self._own) >= OWN_LIMIT:
                break
            if size <= SOURCE_BYTES and self._kept_bytes + size <= KEPT_BYTES:
                self._own[item.source.message_id] = item
                self._kept_bytes += size
            else:
                self._own.setdefault(item.source.message_id, None)
        self._wake.set()

    def _take(self, message_id: str) -> Stored | None:
        item = self._own.pop(message_id, None)
        if item is not None:
            self._kept_bytes -= _held(item)
        return item

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        try:
            if await self._db.write(search_index.rebuild_if_stale):
                log.info("search index format changed: indexing every message again")
        except Exception:
            log.exception("checking the search index format failed; indexing goes on")
        settled = False  # the first passes take whatever is waiting: what was left before this start
        while True:
            self._wake.clear()
            try:
                full = await self.index_pending(everything=not settled) == self._batch
                settled = settled or not full
            except Exception:
                log.exception("indexing failed; trying again shortly")
                full = False
            if full:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            # Mail comes in bursts: what a moment brings is one batch (one read, one thread hop, one
            # transaction) rather than a batch per commit.
            await asyncio.sleep(self._linger)

    async def index_pending(self, *, everything: bool = False) -> int:
        """Index one batch of waiting messages (this process's own and settled ones, or with
        `everything` any); returns how many were waiting."""
        own = list(itertools.islice(self._own, self._batch))
        run = self._begin(own)
        try:
            return await self._index_pending(own, run, everything=everything)
        finally:
            self._end(run)

    def _begin(self, message_ids: Sequence[str]) -> _Run:
        """A batch that is about to take `message_ids` (more may join with `_Run.add`): a
        `catch_up` that meets them waits for it rather than read them back and index them twice."""
        run = _Run(asyncio.get_running_loop().create_future(), [])
        self._add(run, message_ids)
        return run

    def _add(self, run: _Run, message_ids: Sequence[str]) -> None:
        for message_id in message_ids:
            if message_id not in self._running:
                self._running[message_id] = run.done
                run.ids.append(message_id)

    def _end(self, run: _Run) -> None:
        for message_id in run.ids:
            if self._running.get(message_id) is run.done:
                del self._running[message_id]
        run.done.set_result(None)  # whatever the outcome: a waiter reads again and sees

    async def _index_pending(self, own: list[str], run: _Run, *, everything: bool) -> int:
        kept = {message_id: self._take(message_id) for message_id in own}
        now = self._clock()
        handed_all = [s.pending for s in kept.values() if s is not None and s.pending is not None]
        if not everything and own and len(handed_all) == len(own) and now < self._next_scan:
            # All of it handed over by ingest, with what its row would say: no read. The claim in
            # `save` skips any deleted or indexed meanwhile; mail left by others waits for a scan.
            waiting = handed_all
        else:
            settled = None if everything else now - SETTLE
            waiting = await self._db.read(
                partial(search_index.pending, limit=self._batch, own=own, settled_before=settled)
            )
            self._next_scan = now + self._interval
        if len(waiting) == self._batch:  # older mail filled the batch: these come next
            taken = {p.id for p in waiting}
            self.took([s for i, s in kept.items() if i not in taken and s is not None])
            self.wake([i for i, s in kept.items() if i not in taken and s is None])
        if not waiting:
            return 0
        self._add(run, [p.id for p in waiting])
        await self._index(waiting, kept)
        return len(waiting)

    async def catch_up(self, mailbox_id: str) -> None:
        """Index one batch of the mailbox's waiting mail now (`Database.catch_up`): a list on
        `q`, `to` or `has_attachments` met mail the index lacks. Lists of one mailbox that ask at
        once share the batch; what the background indexer indexes at the same time is claimed
        once (`search_index.save` skips what is indexed already)."""
        flight = self._catching.get(mailbox_id)
        if flight is None:
            flight = asyncio.ensure_future(self._catch_up(mailbox_id))
            self._catching[mailbox_id] = flight
            flight.add_done_callback(lambda _: self._catching.pop(mailbox_id, None))
        # Shielded: a caller that goes away must not cancel the batch others wait for.
        await asyncio.shield(flight)

    async def _catch_up(self, mailbox_id: str) -> None:
        waiting = await self._db.read(partial(search_index.pending_in, mailbox_id=mailbox_id, limit=self._batch))
        # What a batch under way holds already is waited for, not taken in a second time.
        busy = {done for p in waiting if (done := self._running.get(p.id)) is not None}
        mine = [p for p in waiting if p.id not in self._running]
        if mine:
            run = self._begin([p.id for p in mine])
            try:
                await self._index(mine, {p.id: self._take(p.id) for p in mine})
            finally:
                self._end(run)
        if busy:
            await asyncio.wait(busy)  # never cancels the batches themselves

    async def _index(self, waiting: Sequence[search_index.Pending], kept: dict[str, Stored | None]) -> None:
        """Build the documents of `waiting` (from what ingest handed over, in `kept`, or read back)
        and write them in one transaction; tell the bus which mailboxes gained indexed mail."""
        pending_of = {p.id: p for p in waiting}
        # Handed over by ingest (the claim in `save` checks each is still there and unindexed), or read back.
        handed = [item for p in waiting if (item := kept.get(p.id)) is not None]
        docs = await asyncio.to_thread(_build_all, handed, pending_of) if handed else []
        self.handed += len(handed)
        for chunk in _chunks([p for p in waiting if kept.get(p.id) is None]):
            rows = await self._db.read_large(partial(search_index.sources, message_ids=chunk))
            self.read_back += len(rows)
            docs += await asyncio.to_thread(_build_all, [Stored(row, None) for row in rows], pending_of)
        # Deleted meanwhile, or unparseable: nothing to index, and not worth another try.
        skipped = set(pending_of) - {d.message_id for d in docs}
        if skipped:
            await self._db.write(partial(search_index.mark_unindexable, message_ids=sorted(skipped)))
        mailboxes = await self._db.write(partial(search_index.save, docs=docs))
        if mailboxes:
            await self._bus.indexed(sorted(set(mailboxes)))


@dataclass(slots=True)
class _Run:
    """A batch under way: set `done` when it ends; `ids`, the messages it registered."""

    done: asyncio.Future[None]
    ids: list[str]


def _chunks(waiting: Sequence[search_index.Pending]) -> list[list[str]]:
    chunks: list[list[str]] = []
    size = 0
    for item in waiting:
        if not chunks or (chunks[-1] and size + item.size > CHUNK_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(item.id)
        size += item.size
    return chunks


def _held(item: Stored) -> int:
    """The bytes a kept message holds: its compressed source, and its raw bytes through the walk."""
    return len(item.source.compressed) + (item.walk.size + WALK_OVERHEAD if item.walk is not None else 0)


def _build_all(items: Sequence[Stored], pending_of: dict[str, search_index.Pending]) -> list[search_index.Doc]:
    docs = []
    for source, walk, _ in items:
        try:
            docs.append(build_doc(source, pending_of[source.message_id], walk))
        except Exception:
            log.exception("cannot index message %s; it is left out of search", source.message_id)
    return docs
