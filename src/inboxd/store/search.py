"""The message filters as SQL, and the search index the background indexer fills.

`message_search` holds, per indexed message, what the summary columns lack: the recipients
(lowercased) and whether it has attachments. The words themselves live in a tsvector column
with a GIN index on PostgreSQL, and in the FTS5 table `message_fts` (rowid = `doc_id`) on
SQLite. Words are cut in Python (`services/filters.py`) and stored as they are, so neither
database's own parser decides what a word is.

A message is indexed once (`messages.indexed` goes 0 → 1 in the same transaction that writes
its row); deleting or purging a message takes its row out of the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inboxd.model import MessageFilter, Term
from inboxd.store.db import Row, Tx


@dataclass(frozen=True, slots=True)
class Pending:
    """A message waiting for the index."""

    id: str
    mailbox_id: str
    size: int


@dataclass(frozen=True, slots=True)
class Doc:
    message_id: str
    mailbox_id: str
    recipients: str
    has_attachments: bool
    terms: list[str]


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
        wrap = "inboxd_lower({})"  # registered on every SQLite connection (store/db.py)
    pattern = _like(needle)
    sql = " OR ".join(f"{wrap.format(c)} {op} ? ESCAPE '\\'" for c in columns)
    return f"({sql})", [pattern] * len(columns)


def conditions(dialect: str, flt: MessageFilter) -> tuple[str, list[str], list[Any]]:
    """(join, extra WHERE conditions, their arguments) for `flt` on `messages m`."""
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
    if not flt.needs_index:
        return "", where, args
    if flt.to:
        # Stored lowercase, so a plain LIKE is case-insensitive on both databases.
        where.append("s.recipients LIKE ? ESCAPE '\\'")
        args.append(_like(flt.to))
    if flt.has_attachments is not None:
        where.append("s.has_attachments = ?")
        args.append(1 if flt.has_attachments else 0)
    if flt.terms:
        if dialect == "postgresql":
            where.append("s.terms @@ CAST(? AS tsquery)")
            args.append(_tsquery(flt.terms))
        else:
            where.append("s.doc_id IN (SELECT rowid FROM message_fts WHERE message_fts MATCH ?)")
            args.append(_fts5_query(flt.terms))
    return " JOIN message_search s ON s.message_id = m.id", where, args


async def pending(tx: Tx, *, limit: int) -> list[Pending]:
    rows = await tx.fetch(
        "SELECT id, mailbox_id, size FROM messages WHERE indexed = 0 AND deleted = 0 ORDER BY created_at LIMIT ?",
        limit,
    )
    return [Pending(r[0], r[1], r[2]) for r in rows]


async def sources(tx: Tx, message_ids: Sequence[str]) -> list[Row]:
    """(message id, compressed raw, subject, from, sender, mailbox address) of each message."""
    if not message_ids:
        return []
    marks = ", ".join("?" for _ in message_ids)
    return await tx.fetch(
        "SELECT m.id, s.raw, m.subject, m.from_header, m.sender, b.address FROM messages m "
        "JOIN message_sources s ON s.message_id = m.id JOIN mailboxes b ON b.id = m.mailbox_id "
        f"WHERE m.id IN ({marks})",
        *message_ids,
    )


async def mark_unindexable(tx: Tx, message_ids: Sequence[str]) -> None:
    """Messages whose source is gone (deleted meanwhile): nothing to index."""
    await tx.executemany("UPDATE messages SET indexed = 1 WHERE id = ?", [(i,) for i in message_ids])


async def save(tx: Tx, docs: Sequence[Doc]) -> list[str]:
    """Write the rows of messages still live and not yet indexed; returns their mailbox ids."""
    done: list[str] = []
    for doc in docs:
        # The flag update is the claim: another process's indexer, or a delete that got here
        # first, leaves nothing to write.
        if not await tx.execute(
            "UPDATE messages SET indexed = 1 WHERE id = ? AND indexed = 0 AND deleted = 0", doc.message_id
        ):
            continue
        attachments = 1 if doc.has_attachments else 0
        if tx.dialect == "postgresql":
            await tx.execute(
                "INSERT INTO message_search (message_id, mailbox_id, recipients, has_attachments, terms) "
                "VALUES (?, ?, ?, ?, array_to_tsvector(CAST(? AS text[])))",
                doc.message_id,
                doc.mailbox_id,
                doc.recipients,
                attachments,
                doc.terms,
            )
        else:
            doc_id = await tx.fetchval(
                "INSERT INTO message_search (message_id, mailbox_id, recipients, has_attachments) "
                "VALUES (?, ?, ?, ?) RETURNING doc_id",
                doc.message_id,
                doc.mailbox_id,
                doc.recipients,
                attachments,
            )
            await tx.execute("INSERT INTO message_fts (rowid, terms) VALUES (?, ?)", doc_id, " ".join(doc.terms))
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
