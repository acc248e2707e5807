"""The search index the background indexer fills, which the filters of `store/search.py` read.

`message_search` holds, per indexed message, what the summary columns lack: the recipients
(lowercased) and whether it has attachments. The words themselves live in a tsvector column
with a GIN index on PostgreSQL, and in the FTS5 table `search.fts_table()` (rowid = `doc_id`) on
SQLite. Words are cut in Python (`services/filters.py`) and stored as they are, so neither
database's own parser decides what a word is: FTS5's `ascii` tokenizer only splits at the spaces
between them, and the table keeps no positions and no word counts, which no query asks for
(migration 0012), but does keep its column lists, without which a prefix query merges every
matching word's whole list (migration 0013).

A message is indexed once (`messages.indexed` goes 0 → 1 in the same transaction that writes
its row); deleting or purging a message takes its row out of the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from inboxd.store.db import Tx
from inboxd.store.search import DOC_ID_ROOM, doc_id_base, fts_table, listed, mailbox_term, unindexed_of_mailbox
from inboxd.store.sql import (
    Statement,
    arrays,
    json_rows,
    name_statements,
    one_of,
    sa,
    schema,
    upsert,
)


@dataclass(frozen=True, slots=True)
class Pending:
    """A message waiting for the index."""

    id: str
    mailbox_id: str
    size: int
    created_at: float


@dataclass(frozen=True, slots=True)
class Doc:
    message_id: str
    mailbox_id: str
    created_at: float
    recipients: str
    has_attachments: bool
    words: str  # services/filters.py `index_words`: words separated by spaces


_encode = msgspec.json.Encoder().encode
_decode_ids = msgspec.json.Decoder(list[str]).decode

# The longest word the index answers for: longer runs are base64, hashes and the like, nobody
# searches for them (no query names them, services/filters.py), and PostgreSQL caps a lexeme at 2 KiB.
MAX_TERM_CHARS = 64


_PENDING_ALL = Statement(
    lambda: (
        sa.select(
            schema.messages.c.id, schema.messages.c.mailbox_id, schema.messages.c.size, schema.messages.c.created_at
        )
        .where(schema.messages.c.indexed == 0, schema.messages.c.deleted == 0)
        .order_by(schema.messages.c.created_at)
        .limit(sa.bindparam("limit"))
    )
)
_PENDING_SETTLED = Statement(
    lambda: (
        sa.select(
            schema.messages.c.id, schema.messages.c.mailbox_id, schema.messages.c.size, schema.messages.c.created_at
        )
        .where(
            schema.messages.c.indexed == 0,
            schema.messages.c.deleted == 0,
            sa.or_(schema.messages.c.created_at < sa.bindparam("settled_before"), one_of(schema.messages.c.id, "own")),
        )
        .order_by(schema.messages.c.created_at)
        .limit(sa.bindparam("limit"))
    )
)


async def pending(tx: Tx, *, limit: int, own: Sequence[str] = (), settled_before: float | None = None) -> list[Pending]:
    """Messages waiting to be indexed, oldest first: those of `own`, and any stored before
    `settled_before` (every one when it is None)."""
    if settled_before is None:
        rows = await tx.fetch(_PENDING_ALL, limit=limit)
    else:
        rows = await tx.fetch(_PENDING_SETTLED, settled_before=settled_before, own=own, limit=limit)
    return [Pending(r[0], r[1], r[2], r[3]) for r in rows]


_PENDING_IN = Statement(
    lambda: (
        sa.select(
            schema.messages.c.id, schema.messages.c.mailbox_id, schema.messages.c.size, schema.messages.c.created_at
        )
        .where(schema.messages.c.indexed == 0, schema.messages.c.deleted == 0, unindexed_of_mailbox(schema.messages))
        .order_by(schema.messages.c.created_at)
        .limit(sa.bindparam("limit"))
    )
)


async def pending_in(tx: Tx, *, mailbox_id: str, limit: int) -> list[Pending]:
    """The mailbox's messages waiting to be indexed, oldest first (through the partial
    `ix_messages_unindexed`: what the indexer has not reached, whatever the mailbox's size)."""
    rows = await tx.fetch(_PENDING_IN, mailbox=mailbox_id, limit=limit)
    return [Pending(r[0], r[1], r[2], r[3]) for r in rows]


class Source(NamedTuple):
    """What the indexer reads of a message."""

    message_id: str
    compressed: bytes | bytearray
    subject: str
    from_header: str
    sender: str
    address: str
    envelope: str | None


_SOURCES = Statement(
    lambda: (
        sa.select(
            listed().c.id,
            listed().c.source_id,
            listed().c.subject,
            listed().c.from_header,
            listed().c.sender,
            schema.mailboxes.c.address,
            listed().c.envelope,
        )
        .select_from(listed().join(schema.mailboxes, schema.mailboxes.c.id == listed().c.mailbox_id))
        .where(listed().c.deleted == 0, one_of(listed().c.id, "ids"))
    )
)


async def sources(tx: Tx, message_ids: Sequence[str]) -> list[Source]:
    """The `Source` of each message still there.

    The sources are read one by one with `Tx.fetch_blob`: they may be megabytes each.
    """
    if not message_ids:
        return []
    rows = await tx.fetch(_SOURCES, ids=message_ids)
    out: list[Source] = []
    for row in rows:
        raw = await tx.fetch_blob("message_sources", "raw", "id", row[1])
        if raw is not None:
            out.append(Source(row[0], raw, row[2], row[3], row[4], row[5], row[6]))
    return out


_SET_INDEXED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(indexed=1)
)


async def mark_unindexable(tx: Tx, message_ids: Sequence[str]) -> None:
    """Messages whose source is gone (deleted meanwhile): nothing to index."""
    await tx.executemany(_SET_INDEXED, [{"id": i} for i in message_ids])


def _save_postgres() -> Any:
    """PostgreSQL's `save` of a batch in one statement: the flag update claims the messages, and
    only the claimed get a row. Words are letters and digits separated by spaces; the tsvector
    keeps each once, and none longer than a query can name."""
    claimed = (
        sa.update(schema.messages)
        .where(one_of(schema.messages.c.id, "ids"), schema.messages.c.indexed == 0, schema.messages.c.deleted == 0)
        .values(indexed=1)
        .returning(schema.messages.c.id)
        .cte("claimed")
    )
    d = arrays(
        "d", message_id=sa.Text, mailbox_id=sa.Text, recipients=sa.Text, has_attachments=sa.SmallInteger, terms=sa.Text
    )
    word = sa.func.unnest(sa.func.string_to_array(d.c.terms, " ")).table_valued("w").render_derived(name="words")
    words = (
        sa.select(sa.func.array_agg(word.c.w))
        .where(word.c.w != "", sa.func.length(word.c.w) <= MAX_TERM_CHARS)
        .scalar_subquery()
    )
    rows = sa.select(
        d.c.message_id, d.c.mailbox_id, d.c.recipients, d.c.has_attachments, sa.func.array_to_tsvector(words)
    ).select_from(d.join(claimed, claimed.c.id == d.c.message_id))
    return (
        sa.insert(schema.message_search)
        .from_select(["message_id", "mailbox_id", "recipients", "has_attachments", "terms"], rows)
        .returning(schema.message_search.c.mailbox_id)
    )


_SAVE_POSTGRES = Statement(postgresql=_save_postgres)
# SQLite's `save` of a batch: which messages are still there and unindexed, their flags, then the
# rows, each a statement for the whole batch (`json_rows`): five statements a batch, none a row.
_CLAIMABLE = Statement(
    sqlite=lambda: sa.select(sa.func.json_group_array(schema.messages.c.id)).where(
        one_of(schema.messages.c.id, "ids"), schema.messages.c.indexed == 0, schema.messages.c.deleted == 0
    )
)
_MARK_INDEXED = Statement(
    sqlite=lambda: sa.update(schema.messages).where(one_of(schema.messages.c.id, "ids")).values(indexed=1)
)
_DOC_ID_TAKEN = Statement(
    lambda: sa.select(schema.message_search.c.doc_id).where(schema.message_search.c.doc_id == sa.bindparam("doc_id"))
)


def _doc_ids_taken() -> Any:
    """The ids already taken from each of the bases given (a JSON list): one range seek per base
    on the primary key, however far apart the bases are (a batch may mix old mail with new)."""
    base = sa.func.json_each(sa.bindparam("bases")).table_valued("value").alias("b")
    doc_id = schema.message_search.c.doc_id
    return sa.select(doc_id).join(base, sa.and_(doc_id >= base.c.value, doc_id < base.c.value + DOC_ID_ROOM))


_DOC_IDS_TAKEN = Statement(sqlite=_doc_ids_taken)
_SEARCH_COLUMNS = ("doc_id", "message_id", "mailbox_id", "recipients", "has_attachments")


def _insert_search() -> Any:
    rows = json_rows("rows", *_SEARCH_COLUMNS)
    return sa.insert(schema.message_search).from_select(list(_SEARCH_COLUMNS), sa.select(*rows.c))


def _insert_fts() -> Any:
    rows = json_rows("rows", "rowid", "terms")
    return sa.insert(fts_table()).from_select(["rowid", "terms"], sa.select(*rows.c))


_INSERT_SEARCH = Statement(sqlite=_insert_search)
_INSERT_FTS = Statement(sqlite=_insert_fts)


def _indexed_text(doc: Doc) -> str:
    """The words the index keeps for a message: its mailbox's own word first."""
    return f"{mailbox_term(doc.mailbox_id)} {doc.words}"


async def save(tx: Tx, docs: Sequence[Doc]) -> list[str]:
    """Write the rows of messages still live and not yet indexed; returns their mailbox ids."""
    if not docs:
        return []
    ids = [d.message_id for d in docs]
    if tx.dialect == "postgresql":
        rows = await tx.fetch(
            _SAVE_POSTGRES,
            ids=ids,
            d_message_id=ids,
            d_mailbox_id=[d.mailbox_id for d in docs],
            d_recipients=[d.recipients for d in docs],
            d_has_attachments=[1 if d.has_attachments else 0 for d in docs],
            d_terms=[_indexed_text(d) for d in docs],
        )
        return [r[0] for r in rows]
    claimable = await tx.fetchval(_CLAIMABLE, ids=ids)
    claimed = set(_decode_ids(claimable))
    kept = [d for d in docs if d.message_id in claimed]
    if not kept:
        return []
    await tx.execute(_MARK_INDEXED, ids=claimed)
    bases = [doc_id_base(d.created_at) for d in kept]
    # Copies stored in the same microsecond share a base: each takes the next id free.
    taken = {r[0] for r in await tx.fetch(_DOC_IDS_TAKEN, bases=_encode(sorted(set(bases))).decode())}
    placed: list[tuple[Doc, int]] = []
    for doc, base in zip(kept, bases, strict=True):
        doc_id = base
        # `taken` holds every id within DOC_ID_ROOM of a base; past it (never seen: 64 copies of
        # one microsecond) each id is looked up.
        while doc_id in taken or (doc_id >= base + DOC_ID_ROOM and await tx.fetchval(_DOC_ID_TAKEN, doc_id=doc_id)):
            doc_id += 1
        taken.add(doc_id)
        placed.append((doc, doc_id))
    await tx.execute(
        _INSERT_SEARCH,
        rows=[
            (doc_id, doc.message_id, doc.mailbox_id, doc.recipients, 1 if doc.has_attachments else 0)
            for doc, doc_id in placed
        ],
    )
    await tx.execute(_INSERT_FTS, rows=[(doc_id, _indexed_text(doc)) for doc, doc_id in placed])
    return [doc.mailbox_id for doc, _ in placed]


def _doc_ids(where: sa.ColumnElement[bool]) -> Any:
    return sa.select(schema.message_search.c.doc_id).where(where)


# The FTS5 rows go first (SQLite only: PostgreSQL's words are in `message_search` itself).
_FORGET_FTS = Statement(
    sqlite=lambda: sa.delete(fts_table()).where(
        fts_table().c.rowid == _doc_ids(schema.message_search.c.message_id == sa.bindparam("id")).scalar_subquery()
    )
)
_FORGET = Statement(
    lambda: sa.delete(schema.message_search).where(schema.message_search.c.message_id == sa.bindparam("id"))
)
_FORGET_MAILBOX_FTS = Statement(
    sqlite=lambda: sa.delete(fts_table()).where(
        fts_table().c.rowid.in_(_doc_ids(schema.message_search.c.mailbox_id == sa.bindparam("mailbox")))
    )
)
_FORGET_MAILBOX = Statement(
    lambda: sa.delete(schema.message_search).where(schema.message_search.c.mailbox_id == sa.bindparam("mailbox"))
)


async def forget(tx: Tx, message_ids: Sequence[str]) -> None:
    """Take deleted or purged messages out of the index."""
    if not message_ids:
        return
    rows = [{"id": i} for i in message_ids]
    if tx.dialect != "postgresql":
        await tx.executemany(_FORGET_FTS, rows)
    await tx.executemany(_FORGET, rows)


async def forget_mailbox(tx: Tx, mailbox_id: str) -> None:
    if tx.dialect != "postgresql":
        await tx.execute(_FORGET_MAILBOX_FTS, mailbox=mailbox_id)
    await tx.execute(_FORGET_MAILBOX, mailbox=mailbox_id)


# What the index rows hold and how they are keyed; a change of it rebuilds the index at start.
FORMAT = "2"  # 2: FTS5 rowid from created_at, a mailbox word in every document

_BUILT_BY = Statement(lambda: sa.select(schema.meta.c.value).where(schema.meta.c.key == "search_format"))
_EMPTY_FTS = Statement(sqlite=lambda: sa.delete(fts_table()))
_EMPTY = Statement(lambda: sa.delete(schema.message_search))
_UNINDEX_ALL = Statement(lambda: sa.update(schema.messages).where(schema.messages.c.indexed == 1).values(indexed=0))
_SET_META = upsert(lambda: schema.meta, keys=["key"], update=["value"])


async def rebuild_if_stale(tx: Tx) -> bool:
    """Empty the index and flag every message for indexing when it was built by another format;
    True when it did. A new database (no format recorded yet) only gets the mark: False."""
    built_by = await tx.fetchval(_BUILT_BY)
    if built_by == FORMAT:
        return False
    if tx.dialect != "postgresql":
        await tx.execute(_EMPTY_FTS)
    await tx.execute(_EMPTY)
    await tx.execute(_UNINDEX_ALL)
    await tx.execute(_SET_META, key="search_format", value=FORMAT)
    return built_by is not None


name_statements(__name__, globals())
