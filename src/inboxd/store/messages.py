"""Queries on messages: the ingest insert, list pages, detail, raw source, marks and sweeps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inboxd.model import NO_FILTER, MessageFilter, MessageSummary
from inboxd.store import search
from inboxd.store.db import Row, Tx

COLUMNS = "id, mailbox_id, sender, from_header, subject, preview_text, size, is_read, created_at, expires_at"
PAGE_SIZE = 30


def summary_from(row: Row) -> MessageSummary:
    # By position (the order of COLUMNS): name lookups on a row cost more than the query here.
    return MessageSummary(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9])


@dataclass(frozen=True, slots=True)
class NewMessage:
    summary: MessageSummary
    raw_compressed: bytes


async def insert_many(tx: Tx, items: Sequence[NewMessage]) -> None:
    """Insert stored copies (their sizes are charged by `charge`)."""
    await tx.executemany(
        f"INSERT INTO messages ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                m.summary.id,
                m.summary.mailbox_id,
                m.summary.sender,
                m.summary.from_,
                m.summary.subject,
                m.summary.preview_text,
                m.summary.size,
                0,
                m.summary.created_at,
                m.summary.expires_at,
            )
            for m in items
        ],
    )
    await tx.executemany(
        "INSERT INTO message_sources (message_id, raw) VALUES (?, ?)",
        [(m.summary.id, m.raw_compressed) for m in items],
    )


async def charge(tx: Tx, mailbox_id: str, size: int) -> bool:
    """Add `size` to the mailbox's `used` if it stays within its quota; False when it would not."""
    changed = await tx.execute(
        "UPDATE mailboxes SET used = used + ? WHERE id = ? AND used + ? <= quota", size, mailbox_id, size
    )
    return changed == 1


async def page(
    tx: Tx, mailbox_id: str, *, page: int, now: float, flt: MessageFilter = NO_FILTER, size: int = PAGE_SIZE
) -> list[MessageSummary]:
    join, extra, args = search.conditions(tx.dialect, flt)
    where = " AND ".join(["m.mailbox_id = ?", "m.deleted = 0", "m.expires_at > ?", *extra])
    columns = ", ".join(f"m.{c}" for c in COLUMNS.split(", "))
    rows = await tx.fetch(
        f"SELECT {columns} FROM messages m{join} WHERE {where} "
        f"ORDER BY m.created_at DESC, m.id DESC LIMIT {int(size)} OFFSET ?",
        mailbox_id,
        now,
        *args,
        (page - 1) * size,
    )
    return [summary_from(r) for r in rows]


async def get(tx: Tx, mailbox_id: str, message_id: str) -> MessageSummary | None:
    """A live or expired (not yet purged) message of the mailbox; None when deleted or unknown."""
    row = await tx.fetchrow(
        f"SELECT {COLUMNS} FROM messages WHERE id = ? AND mailbox_id = ? AND deleted = 0",
        message_id,
        mailbox_id,
    )
    return None if row is None else summary_from(row)


async def raw(tx: Tx, message_id: str) -> bytes | None:
    value = await tx.fetchval("SELECT raw FROM message_sources WHERE message_id = ?", message_id)
    return None if value is None else bytes(value)


async def detail_json(tx: Tx, message_id: str) -> str | None:
    value = await tx.fetchval("SELECT detail FROM message_details WHERE message_id = ?", message_id)
    return None if value is None else str(value)


async def save_detail(tx: Tx, message_id: str, detail: str) -> None:
    await tx.execute(
        "INSERT INTO message_details (message_id, detail) VALUES (?, ?) ON CONFLICT (message_id) DO NOTHING",
        message_id,
        detail,
    )


async def mark_read(tx: Tx, mailbox_id: str, message_ids: Sequence[str], *, now: float) -> int:
    """Mark unread live messages read; returns how many changed."""
    if not message_ids:
        return 0
    marks = ", ".join("?" for _ in message_ids)
    return await tx.execute(
        f"UPDATE messages SET is_read = 1 WHERE mailbox_id = ? AND is_read = 0 AND deleted = 0 "
        f"AND expires_at > ? AND id IN ({marks})",
        mailbox_id,
        now,
        *message_ids,
    )


async def mark_all_read(tx: Tx, mailbox_id: str, *, now: float) -> int:
    return await tx.execute(
        "UPDATE messages SET is_read = 1 WHERE mailbox_id = ? AND is_read = 0 AND deleted = 0 AND expires_at > ?",
        mailbox_id,
        now,
    )


async def soft_delete(tx: Tx, mailbox_id: str, message_id: str) -> bool:
    """Delete a message; its size leaves `used` unless expiry already took it out."""
    row = await tx.fetchrow(
        "SELECT size, expired FROM messages WHERE id = ? AND mailbox_id = ? AND deleted = 0",
        message_id,
        mailbox_id,
    )
    if row is None:
        return False
    await tx.execute("UPDATE messages SET deleted = 1 WHERE id = ?", message_id)
    if not row["expired"]:
        await tx.execute("UPDATE mailboxes SET used = used - ? WHERE id = ?", row["size"], mailbox_id)
    await tx.execute("DELETE FROM message_sources WHERE message_id = ?", message_id)
    await tx.execute("DELETE FROM message_details WHERE message_id = ?", message_id)
    await search.forget(tx, [message_id])
    return True


async def expire_due(tx: Tx, *, now: float, limit: int) -> int:
    """Flag messages whose retention ended and take their bytes out of `used`."""
    rows = await tx.fetch(
        "SELECT id, mailbox_id, size FROM messages WHERE expired = 0 AND deleted = 0 AND expires_at <= ? LIMIT ?",
        now,
        limit,
    )
    if not rows:
        return 0
    await tx.executemany("UPDATE messages SET expired = 1 WHERE id = ?", [(r["id"],) for r in rows])
    await tx.executemany(
        "UPDATE mailboxes SET used = used - ? WHERE id = ?", [(r["size"], r["mailbox_id"]) for r in rows]
    )
    return len(rows)


async def purge(tx: Tx, *, expired_before: float, limit: int) -> int:
    """Remove for good the messages past their grace, and the soft-deleted ones."""
    rows = await tx.fetch(
        "SELECT id FROM messages WHERE deleted = 1 OR (expired = 1 AND expires_at <= ?) LIMIT ?",
        expired_before,
        limit,
    )
    if not rows:
        return 0
    ids = [(r["id"],) for r in rows]
    await tx.executemany("DELETE FROM message_sources WHERE message_id = ?", ids)
    await tx.executemany("DELETE FROM message_details WHERE message_id = ?", ids)
    await search.forget(tx, [r["id"] for r in rows])
    await tx.executemany("DELETE FROM messages WHERE id = ?", ids)
    return len(ids)
