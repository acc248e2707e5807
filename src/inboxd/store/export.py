"""Reads for export and backup: a mailbox's live messages with their raw bytes, oldest first."""

from __future__ import annotations

from inboxd.model import MessageSummary
from inboxd.store.db import Tx
from inboxd.store.messages import summary_from

_COLUMNS = (
    "m.id, m.mailbox_id, m.sender, m.from_header, m.subject, m.preview_text, m.size, m.is_read, m.created_at, "
    "m.expires_at, s.raw"
)


async def batch(
    tx: Tx, mailbox_id: str, *, after: tuple[float, str] | None, now: float, limit: int
) -> list[tuple[MessageSummary, bytes]]:
    """The next `limit` live messages after `after` (created_at, id), by keyset: a message that
    arrives meanwhile is taken or not, but none is skipped or repeated."""
    since, last_id = after if after is not None else (float("-inf"), "")
    rows = await tx.fetch(
        f"SELECT {_COLUMNS} FROM messages m JOIN message_sources s ON s.id = m.source_id "
        "WHERE m.mailbox_id = ? AND m.deleted = 0 AND m.expires_at > ? "
        "AND (m.created_at > ? OR (m.created_at = ? AND m.id > ?)) "
        f"ORDER BY m.created_at, m.id LIMIT {int(limit)}",
        mailbox_id,
        now,
        since,
        since,
        last_id,
    )
    return [(summary_from(r), bytes(r[10])) for r in rows]
