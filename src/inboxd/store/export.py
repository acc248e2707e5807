"""Reads for export and backup: a mailbox's live messages with their raw bytes, oldest first."""

from __future__ import annotations

from typing import Any

from inboxd.model import MessageSummary
from inboxd.store.db import Tx
from inboxd.store.messages import SUMMARY, summary_from
from inboxd.store.sql import Statement, name_statements, param, sa, schema


def _batch() -> sa.Select[Any]:
    """The summary's columns (read by position, `summary_from`), then the raw bytes."""
    m, s = schema.messages.alias("m"), schema.message_sources.alias("s")
    since = param(m.c.created_at, "since")
    return (
        sa.select(*(m.c[name] for name in SUMMARY), s.c.raw)
        .select_from(m.join(s, s.c.id == m.c.source_id))
        .where(
            m.c.mailbox_id == sa.bindparam("mailbox"),
            m.c.deleted == 0,
            m.c.expires_at > sa.bindparam("now"),
            sa.or_(m.c.created_at > since, sa.and_(m.c.created_at == since, m.c.id > sa.bindparam("last_id"))),
        )
        .order_by(m.c.created_at, m.c.id)
        .limit(sa.bindparam("limit"))
    )


BATCH = Statement(_batch)


async def batch(
    tx: Tx, mailbox_id: str, *, after: tuple[float, str] | None, now: float, limit: int
) -> list[tuple[MessageSummary, bytes]]:
    """The next `limit` live messages after `after` (created_at, id), by keyset: a message that
    arrives meanwhile is taken or not, but none is skipped or repeated."""
    since, last_id = after if after is not None else (float("-inf"), "")
    rows = await tx.fetch(BATCH, mailbox=mailbox_id, now=now, since=since, last_id=last_id, limit=limit)
    return [(summary_from(r), bytes(r[len(SUMMARY)])) for r in rows]


name_statements(__name__, globals())
