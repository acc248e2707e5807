"""Messages leaving: a deletion, the sweep's expiry (bytes out of `used`) and purge (rows gone
for good), and the sources no copy holds any more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inboxd.store import search_index
from inboxd.store.db import Tx
from inboxd.store.message_ingest import DELETE_TAGS
from inboxd.store.sql import Statement, name_statements, one_of, sa, schema

_RELEASE = Statement(
    lambda: (
        sa.update(schema.message_sources)
        .where(schema.message_sources.c.id == sa.bindparam("id"))
        .values(refs=schema.message_sources.c.refs - 1)
    )
)
_DROP_UNHELD = Statement(
    lambda: sa.delete(schema.message_sources).where(
        schema.message_sources.c.id == sa.bindparam("id"), schema.message_sources.c.refs <= 0
    )
)


async def release_sources(tx: Tx, source_ids: Sequence[str]) -> None:
    """Each id is one copy letting go of its source (repeat an id for several copies); a source
    that no copy holds any more is removed."""
    if not source_ids:
        return
    await tx.executemany(_RELEASE, [{"id": s} for s in source_ids])
    await tx.executemany(_DROP_UNHELD, [{"id": s} for s in sorted(set(source_ids))])


_TO_DELETE = Statement(
    lambda: sa.select(schema.messages.c.size, schema.messages.c.expired, schema.messages.c.source_id).where(
        schema.messages.c.id == sa.bindparam("id"),
        schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
        schema.messages.c.deleted == 0,
    )
)
_SET_DELETED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(deleted=1)
)
_FREE = Statement(
    lambda: (
        sa.update(schema.mailboxes)
        .where(schema.mailboxes.c.id == sa.bindparam("mailbox"))
        .values(used=schema.mailboxes.c.used - sa.bindparam("size"))
    )
)
_DELETE_DETAIL = Statement(
    lambda: sa.delete(schema.message_details).where(schema.message_details.c.message_id == sa.bindparam("id"))
)
_DELETE_CHECKS = Statement(
    lambda: sa.delete(schema.message_checks).where(schema.message_checks.c.message_id == sa.bindparam("id"))
)
_DELETE_MESSAGE = Statement(lambda: sa.delete(schema.messages).where(schema.messages.c.id == sa.bindparam("id")))


async def soft_delete(tx: Tx, mailbox_id: str, message_id: str) -> bool:
    """Delete a message; its size leaves `used` unless expiry already took it out. Its bytes go
    with it unless another copy of the same delivery still holds them."""
    row = await tx.fetchrow(_TO_DELETE, id=message_id, mailbox=mailbox_id)
    if row is None:
        return False
    await tx.execute(_SET_DELETED, id=message_id)
    if not row["expired"]:
        await tx.execute(_FREE, size=row["size"], mailbox=mailbox_id)
    await release_sources(tx, [row["source_id"]])
    await tx.execute(_DELETE_DETAIL, id=message_id)
    await tx.execute(_DELETE_CHECKS, id=message_id)
    await tx.execute(DELETE_TAGS, id=message_id)
    await search_index.forget(tx, [message_id])
    return True


# The sweep's queries, each served by an index (tests/test_purge.py checks the plans): the writer
# runs them, and every pending delivery waits behind them.
EXPIRE_DUE = Statement(
    lambda: (
        sa.select(schema.messages.c.id, schema.messages.c.mailbox_id, schema.messages.c.size)
        .where(
            schema.messages.c.expired == 0,
            schema.messages.c.deleted == 0,
            schema.messages.c.expires_at <= sa.bindparam("now"),
        )
        .limit(sa.bindparam("limit"))
    )
)
PURGE_DELETED = Statement(
    lambda: sa.select(schema.messages.c.id).where(schema.messages.c.deleted == 1).limit(sa.bindparam("limit"))
)
PURGE_EXPIRED = Statement(
    lambda: (
        sa.select(schema.messages.c.id, schema.messages.c.source_id)
        .where(
            schema.messages.c.expired == 1,
            schema.messages.c.expires_at <= sa.bindparam("before"),
            schema.messages.c.deleted == 0,
        )
        .limit(sa.bindparam("limit"))
    )
)


def due(table: Any) -> sa.ColumnElement[bool]:
    """A message of `table` (`messages` or an alias) past its expiry that the sweep has not yet
    taken out of `used` (the parameter `now`): its bytes count as free already
    (ix_messages_due). Here and in `mailboxes.recipient`."""
    return sa.and_(table.c.expired == 0, table.c.expires_at <= sa.bindparam("now"), table.c.deleted == 0)


_DUE_SIZES = Statement(
    lambda: (
        sa.select(schema.messages.c.mailbox_id, sa.func.sum(schema.messages.c.size))
        .where(one_of(schema.messages.c.mailbox_id, "mailboxes"), due(schema.messages))
        .group_by(schema.messages.c.mailbox_id)
    )
)


async def due_sizes(tx: Tx, mailbox_ids: Sequence[str], *, now: float) -> dict[str, int]:
    """Bytes per mailbox of messages past their expiry that the sweep has not yet taken out of
    `used` (ix_messages_due): `used` minus these is the mailbox's usage at `now`."""
    if not mailbox_ids:
        return {}
    rows = await tx.fetch(_DUE_SIZES, mailboxes=mailbox_ids, now=now)
    return {str(r[0]): int(r[1]) for r in rows}


_SET_EXPIRED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(expired=1)
)


async def expire_due(tx: Tx, *, now: float, limit: int) -> int:
    """Flag messages whose retention ended and take their bytes out of `used`."""
    rows = await tx.fetch(EXPIRE_DUE, now=now, limit=limit)
    if not rows:
        return 0
    await tx.executemany(_SET_EXPIRED, [{"id": r["id"]} for r in rows])
    await tx.executemany(_FREE, [{"size": r["size"], "mailbox": r["mailbox_id"]} for r in rows])
    return len(rows)


async def purge(tx: Tx, *, expired_before: float, limit: int) -> int:
    """Remove for good up to `limit` rows: the soft-deleted ones (which let go of their source
    when deleted), then the expired ones past their grace (which let go now)."""
    deleted = await tx.fetch(PURGE_DELETED, limit=limit)
    ids = [{"id": r["id"]} for r in deleted]
    if len(ids) < limit:
        expired = await tx.fetch(PURGE_EXPIRED, before=expired_before, limit=limit - len(ids))
        await release_sources(tx, [r["source_id"] for r in expired])
        await tx.executemany(_DELETE_DETAIL, [{"id": r["id"]} for r in expired])
        await tx.executemany(_DELETE_CHECKS, [{"id": r["id"]} for r in expired])
        ids.extend({"id": r["id"]} for r in expired)
    if ids:
        await tx.executemany(DELETE_TAGS, ids)
        await search_index.forget(tx, [i["id"] for i in ids])
        await tx.executemany(_DELETE_MESSAGE, ids)
    return len(ids)


name_statements(__name__, globals())
