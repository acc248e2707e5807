"""The message filters as SQL, and the search index the background indexer fills.

`message_search` holds, per indexed message, what the summary columns lack: the recipients
(lowercased) and whether it has attachments. The words themselves live in a tsvector column
with a GIN index on PostgreSQL, and in the FTS5 table `message_fts` (rowid = `doc_id`) on
SQLite. Words are cut in Python (`services/filters.py`) and stored as they are, so neither
database's own parser decides what a word is.

Filters that read each row (`from`, `to`, `subject`, `unread`, `has_attachments`: substrings,
folded in Python for non-ASCII on SQLite, no index answers them) read at most the newest
`scan_rows` messages of the mailbox within `since`/`until`: `query` finds the oldest of those
once, by the list index, and bounds the read by it; a page it leaves short while older messages
exist raises `FilterTooBroad` (`check_bound`) rather than answer as if nothing more matched.

A message is indexed once (`messages.indexed` goes 0 → 1 in the same transaction that writes
its row); deleting or purging a message takes its row out of the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from inboxd.errors import FilterTooBroad
from inboxd.model import MessageFilter, Term
from inboxd.store.db import Tx


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


# The longest word the index answers for: longer runs are base64, hashes and the like, nobody
# searches for them (no query names them, services/filters.py), and PostgreSQL caps a lexeme at 2 KiB.
MAX_TERM_CHARS = 64
# Up to this many full-text matches in a mailbox, PostgreSQL sorts them; beyond, it walks the list.
FEW_MATCHES = 2000


def _like(needle: str) -> str:
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _fts5_query(terms: Sequence[Term]) -> str:
    return " ".join('"' + t.text.replace('"', '""') + '"' + ("*" if t.prefix else "") for t in terms)


def _tsquery(terms: Sequence[Term]) -> str:
    return " & ".join(
        "'" + t.text.replace("\\", "\\\\").replace("'", "''") + "'" + (":*" if t.prefix else "") for t in terms
    )


def _text_match(dialect: str, columns: Sequence[str], needle: str) -> tuple[str, list[Any]]:
    """Case-insensitive substring of any of `columns` (`needle` is lowercase already)."""
    if dialect == "postgresql":
        op = "ILIKE"
        wrap = "{}"
    elif needle.isascii():
        op = "LIKE"  # SQLite's LIKE folds ASCII case itself
        wrap = "{}"
    else:
        op = "LIKE"
        wrap = "inboxd_lower({})"  # registered on every SQLite connection (store/sqlite.py)
    pattern = _like(needle)
    sql = " OR ".join(f"{wrap.format(c)} {op} ? ESCAPE '\\'" for c in columns)
    return f"({sql})", [pattern] * len(columns)


def mailbox_term(mailbox_id: str) -> str:
    """A word only the mailbox's indexed messages carry: full text starts from the mailbox's own
    matches rather than everyone's."""
    return "mbx" + mailbox_id.replace("-", "")


def doc_id_base(created_at: float) -> int:
    """SQLite's FTS5 rowid follows `created_at` (microseconds, room for 64 per microsecond), so
    a full-text page walks the matches newest first and stops after the page."""
    return int(created_at * 1_000_000) * 64


@dataclass(frozen=True, slots=True)
class Query:
    """A filtered list as SQL pieces over `messages m`."""

    source: str
    where: list[str]
    args: list[Any]
    order: str
    # `created_at` of the oldest message a row-reading filter may read; None: no bound applies.
    floor: float | None = None


def reads_rows(flt: MessageFilter) -> bool:
    """Whether `flt` tests each candidate row with what no index answers."""
    return bool(flt.from_ or flt.to or flt.subject or flt.unread is not None or flt.has_attachments is not None)


def _range(flt: MessageFilter) -> tuple[str, list[float]]:
    """`since`/`until` on `messages` (no alias), which the list index answers."""
    sql = ""
    args: list[float] = []
    if flt.since is not None:
        sql += " AND created_at >= ?"
        args.append(flt.since)
    if flt.until is not None:
        sql += " AND created_at < ?"
        args.append(flt.until)
    return sql, args


async def _scan_floor(tx: Tx, mailbox_id: str, flt: MessageFilter, scan_rows: int) -> float | None:
    """`created_at` of the `scan_rows`-th newest message in the filter's time range; None when
    there are fewer (then every one may be read)."""
    if scan_rows <= 0 or not reads_rows(flt):
        return None
    extra, args = _range(flt)
    value = await tx.fetchval(
        f"SELECT created_at FROM messages WHERE mailbox_id = ? AND deleted = 0{extra} "
        f"ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET {int(scan_rows) - 1}",
        mailbox_id,
        *args,
    )
    return None if value is None else float(value)


async def check_bound(tx: Tx, mailbox_id: str, flt: MessageFilter, q: Query, *, found: int, size: int) -> None:
    """Raise `FilterTooBroad` when the bound cut a short page: older messages were not read."""
    if q.floor is None or found >= size:
        return
    extra, args = _range(flt)
    older = await tx.fetchval(
        f"SELECT 1 FROM messages WHERE mailbox_id = ? AND deleted = 0{extra} AND created_at < ? LIMIT 1",
        mailbox_id,
        *args,
        q.floor,
    )
    if older:
        raise FilterTooBroad(
            "The filters `from`, `to`, `subject`, `unread` and `has_attachments` read at most the newest "
            "messages of the mailbox within `since`/`until`, and older ones remain: narrow the range with "
            "`since` and `until`, or search with `q` alone."
        )


async def query(tx: Tx, mailbox_id: str, flt: MessageFilter, *, scan_rows: int = 0) -> Query:
    join, where, args = conditions(tx.dialect, flt)
    floor = await _scan_floor(tx, mailbox_id, flt, scan_rows)
    if floor is not None:
        where, args = [*where, "m.created_at >= ?"], [*args, floor]
    ordered = "m.created_at DESC, m.id DESC"
    if flt.tag and not flt.terms:
        # Driven from the tag's index entries, newest first: a page reads only tagged messages.
        source = "message_tags t JOIN messages m ON m.id = t.message_id" + join
        where, args = ["t.mailbox_id = ?", "t.tag = ?", *where], [mailbox_id, flt.tag, *args]
        return Query(source, where, args, "t.created_at DESC, t.message_id DESC", floor)
    if flt.tag:
        where = [*where, "EXISTS (SELECT 1 FROM message_tags t WHERE t.message_id = m.id AND t.tag = ?)"]
        args = [*args, flt.tag]
    if not flt.terms:
        return Query("messages m" + join, where, args, ordered, floor)
    terms = [Term(mailbox_term(mailbox_id)), *flt.terms]
    if tx.dialect != "postgresql":
        # FTS5 yields rowids in order, so the page is read newest first without a sort; under a
        # bound, the rowid range stops the walk at the oldest message it may read.
        match: list[str] = ["f.message_fts MATCH ?"]
        match_args: list[Any] = [_fts5_query(terms)]
        if floor is not None:
            match.append("f.rowid >= ?")
            match_args.append(doc_id_base(floor))
        source = "message_fts f JOIN message_search s ON s.doc_id = f.rowid JOIN messages m ON m.id = s.message_id"
        return Query(source, [*match, *where], [*match_args, *args], "f.rowid DESC", floor)
    # PostgreSQL: a few matches are fetched from the GIN index and sorted; many are better found
    # by walking the mailbox newest first until a page is full. Counting the mailbox's matches
    # first decides. The tsquery and the mailbox go into the SQL text as literals: asyncpg keeps
    # prepared statements, and PostgreSQL's generic plan for a parameter tsquery knows nothing
    # of the word and may pick a sequential scan (docs/performance.md, "Search and waits").
    literal = _literal(_tsquery(flt.terms))
    matches = await tx.fetch(
        f"SELECT message_id FROM message_search WHERE terms @@ CAST({literal} AS tsquery) "
        f"AND mailbox_id = {_literal(_uuid(mailbox_id))} LIMIT {FEW_MATCHES + 1}"
    )
    if len(matches) <= FEW_MATCHES:
        # Driven from the matches (a parameter array: no plan can guess its length, and from
        # them any plan is a few key lookups and a small sort).
        source = "unnest(CAST(? AS text[])) AS hit(id) JOIN messages m ON m.id = hit.id" + join
        return Query(source, where, [[r[0] for r in matches], *args], ordered, floor)
    source = "messages m JOIN message_search s ON s.message_id = m.id"
    return Query(source, [*where, f"s.terms @@ CAST({literal} AS tsquery)"], args, ordered, floor)


def _literal(text: str) -> str:
    if "?" in text:  # `?` is our placeholder (store/postgres.py rewrites it); words never hold one
        raise ValueError("a SQL literal may not hold a question mark")
    return "'" + text.replace("'", "''") + "'"


def _uuid(value: str) -> str:
    if not all(c in "0123456789abcdef-" for c in value):
        raise ValueError("not a lowercase UUID")
    return value


def conditions(dialect: str, flt: MessageFilter) -> tuple[str, list[str], list[Any]]:
    """(join, extra WHERE conditions, their arguments) for `flt` on `messages m`, full text
    aside (`query` adds it)."""
    where: list[str] = []
    args: list[Any] = []
    if flt.from_:
        sql, more = _text_match(dialect, ("m.from_header", "m.sender"), flt.from_)
        where.append(sql)
        args += more
    if flt.subject:
        sql, more = _text_match(dialect, ("m.subject",), flt.subject)
        where.append(sql)
        args += more
    if flt.unread is not None:
        where.append("m.is_read = ?")
        args.append(0 if flt.unread else 1)
    if flt.since is not None:
        where.append("m.created_at >= ?")
        args.append(flt.since)
    if flt.until is not None:
        where.append("m.created_at < ?")
        args.append(flt.until)
    if not (flt.to or flt.has_attachments is not None):
        return "", where, args
    if flt.to:
        # Stored lowercase, so a plain LIKE is case-insensitive on both databases.
        where.append("s.recipients LIKE ? ESCAPE '\\'")
        args.append(_like(flt.to))
    if flt.has_attachments is not None:
        where.append("s.has_attachments = ?")
        args.append(1 if flt.has_attachments else 0)
    return " JOIN message_search s ON s.message_id = m.id", where, args


async def pending(tx: Tx, *, limit: int, own: Sequence[str] = (), settled_before: float | None = None) -> list[Pending]:
    """Messages waiting to be indexed, oldest first: those of `own`, and any stored before
    `settled_before` (every one when it is None)."""
    if settled_before is None:
        which, args = "", []
    else:
        marks = ", ".join("?" for _ in own) or "NULL"
        which, args = f" AND (created_at < ? OR id IN ({marks}))", [settled_before, *own]
    rows = await tx.fetch(
        f"SELECT id, mailbox_id, size, created_at FROM messages WHERE indexed = 0 AND deleted = 0{which} "
        "ORDER BY created_at LIMIT ?",
        *args,
        limit,
    )
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


async def sources(tx: Tx, message_ids: Sequence[str]) -> list[Source]:
    """The `Source` of each message still there.

    The sources are read one by one with `Tx.fetch_blob`: they may be megabytes each.
    """
    if not message_ids:
        return []
    marks = ", ".join("?" for _ in message_ids)
    rows = await tx.fetch(
        "SELECT m.id, m.source_id, m.subject, m.from_header, m.sender, b.address, m.envelope FROM messages m "
        "JOIN mailboxes b ON b.id = m.mailbox_id "
        f"WHERE m.deleted = 0 AND m.id IN ({marks})",
        *message_ids,
    )
    out: list[Source] = []
    for row in rows:
        raw = await tx.fetch_blob("message_sources", "raw", "id", row[1])
        if raw is not None:
            out.append(Source(row[0], raw, row[2], row[3], row[4], row[5], row[6]))
    return out


async def mark_unindexable(tx: Tx, message_ids: Sequence[str]) -> None:
    """Messages whose source is gone (deleted meanwhile): nothing to index."""
    await tx.executemany("UPDATE messages SET indexed = 1 WHERE id = ?", [(i,) for i in message_ids])


# PostgreSQL's `save` of a batch in one statement: the flag update claims the messages, and only
# the claimed get a row. Words are letters and digits separated by spaces; the tsvector keeps each
# once, and none longer than a query can name.
_SAVE_POSTGRES = f"""
WITH claimed AS (
    UPDATE messages SET indexed = 1
    WHERE id = ANY(CAST(? AS text[])) AND indexed = 0 AND deleted = 0
    RETURNING id
)
INSERT INTO message_search (message_id, mailbox_id, recipients, has_attachments, terms)
SELECT d.message_id, d.mailbox_id, d.recipients, d.has_attachments,
       array_to_tsvector(ARRAY(
           SELECT w FROM unnest(string_to_array(d.terms, ' ')) AS w WHERE w <> '' AND length(w) <= {MAX_TERM_CHARS}
       ))
FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS smallint[]), CAST(? AS text[]))
     AS d(message_id, mailbox_id, recipients, has_attachments, terms)
JOIN claimed ON claimed.id = d.message_id
RETURNING mailbox_id
"""


def _indexed_text(doc: Doc) -> str:
    """The words the index keeps for a message: its mailbox's own word first."""
    return f"{mailbox_term(doc.mailbox_id)} {doc.words}"


async def save(tx: Tx, docs: Sequence[Doc]) -> list[str]:
    """Write the rows of messages still live and not yet indexed; returns their mailbox ids."""
    if tx.dialect == "postgresql":
        if not docs:
            return []
        ids = [d.message_id for d in docs]
        rows = await tx.fetch(
            _SAVE_POSTGRES,
            ids,
            ids,
            [d.mailbox_id for d in docs],
            [d.recipients for d in docs],
            [1 if d.has_attachments else 0 for d in docs],
            [_indexed_text(d) for d in docs],
        )
        return [r[0] for r in rows]
    done: list[str] = []
    for doc in docs:
        # The flag update is the claim: another process's indexer, or a delete that got here
        # first, leaves nothing to write.
        if not await tx.execute(
            "UPDATE messages SET indexed = 1 WHERE id = ? AND indexed = 0 AND deleted = 0", doc.message_id
        ):
            continue
        doc_id = doc_id_base(doc.created_at)
        while await tx.fetchval("SELECT 1 FROM message_search WHERE doc_id = ?", doc_id):
            doc_id += 1  # copies stored in the same microsecond
        await tx.execute(
            "INSERT INTO message_search (doc_id, message_id, mailbox_id, recipients, has_attachments) "
            "VALUES (?, ?, ?, ?, ?)",
            doc_id,
            doc.message_id,
            doc.mailbox_id,
            doc.recipients,
            1 if doc.has_attachments else 0,
        )
        await tx.execute("INSERT INTO message_fts (rowid, terms) VALUES (?, ?)", doc_id, _indexed_text(doc))
        done.append(doc.mailbox_id)
    return done


async def forget(tx: Tx, message_ids: Sequence[str]) -> None:
    """Take deleted or purged messages out of the index."""
    if not message_ids:
        return
    rows = [(i,) for i in message_ids]
    if tx.dialect != "postgresql":
        await tx.executemany(
            "DELETE FROM message_fts WHERE rowid = (SELECT doc_id FROM message_search WHERE message_id = ?)", rows
        )
    await tx.executemany("DELETE FROM message_search WHERE message_id = ?", rows)


async def forget_mailbox(tx: Tx, mailbox_id: str) -> None:
    if tx.dialect != "postgresql":
        await tx.execute(
            "DELETE FROM message_fts WHERE rowid IN (SELECT doc_id FROM message_search WHERE mailbox_id = ?)",
            mailbox_id,
        )
    await tx.execute("DELETE FROM message_search WHERE mailbox_id = ?", mailbox_id)


# What the index rows hold and how they are keyed; a change of it rebuilds the index at start.
FORMAT = "2"  # 2: FTS5 rowid from created_at, a mailbox word in every document


async def rebuild_if_stale(tx: Tx) -> bool:
    """Empty the index and flag every message for indexing when it was built by another format;
    True when it did. A new database (no format recorded yet) only gets the mark: False."""
    built_by = await tx.fetchval("SELECT value FROM meta WHERE key = 'search_format'")
    if built_by == FORMAT:
        return False
    if tx.dialect != "postgresql":
        await tx.execute("DELETE FROM message_fts")
    await tx.execute("DELETE FROM message_search")
    await tx.execute("UPDATE messages SET indexed = 0 WHERE indexed = 1")
    await tx.execute(
        "INSERT INTO meta (key, value) VALUES ('search_format', ?) ON CONFLICT (key) DO UPDATE SET value = ?",
        FORMAT,
        FORMAT,
    )
    return built_by is not None
