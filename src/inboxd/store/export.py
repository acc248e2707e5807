"""Reads for export and backup: a mailbox's live messages with their raw bytes, oldest first."""

from __future__ import annotations

import sqlalchemy as sa

from inboxd.model import MessageSummary
from inboxd.store.db import Tx
from inboxd.store.messages import SUMMARY, summary_from
from inboxd.store.schema import message_sources, messages
from inboxd.store.sql import Statement, param

_m, _s = messages.alias("m"), message_sources.alias("s")
_since = param(_m.c.created_at, "since")

# The summary's columns (read by position, `summary_from`), then the raw bytes.
BATCH = Statement(
    sa.select(*(_m.c[name] for name in SUMMARY), _s.c.raw)
    .select_from(_m.join(_s, _s.c.id == _m.c.source_id))
    .where(
        _m.c.mailbox_id == sa.bindparam("mailbox"),
        _m.c.deleted == 0,
        _m.c.expires_at > sa.bindparam("now"),
        sa.or_(_m.c.created_at > _since, sa.and_(_m.c.created_at == _since, _m.c.id > sa.bindparam("last_id"))),
    )
    .order_by(_m.c.created_at, _m.c.id)
    .limit(sa.bindparam("limit"))
)


async def batch(
    tx: Tx, mailbox_id: str, *, after: tuple[float, str] | None, now: float, limit: int
) -> list[tuple[MessageSummary, bytes]]:
    """The next `limit` live messages after `after` (created_at, id), by keyset: a message that
    arrives meanwhile is taken or not, but none is skipped or repeated."""
    since, last_id = after if after is not None else (float("-inf"), "")
    rows = await tx.fetch(BATCH, mailbox=mailbox_id, now=now, since=since, last_id=last_id, limit=limit)
    return [(summary_from(r), bytes(r[len(SUMMARY)])) for r in rows]
