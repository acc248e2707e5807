"""Queries on the monthly operation counters (`ops_usage`: user, calendar month "YYYY-MM", count)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from inboxd.store.db import Tx
from inboxd.store.schema import ops_usage
from inboxd.store.sql import Statement, param, values_of

GET_COUNT = Statement(
    sa.select(ops_usage.c.count).where(
        ops_usage.c.user_id == param(ops_usage.c.user_id), ops_usage.c.month == param(ops_usage.c.month)
    )
)


def _add(insert: Any) -> Any:
    """INSERT of a delta that adds it to the row's count when the row exists (`ON CONFLICT`,
    written by each dialect's own `insert`)."""
    statement = insert(ops_usage).values(values_of(ops_usage))
    return statement.on_conflict_do_update(
        index_elements=[ops_usage.c.user_id, ops_usage.c.month],
        set_={"count": ops_usage.c.count + statement.excluded["count"]},
    )


ADD = Statement(sqlite=_add(sqlite_insert), postgresql=_add(postgresql_insert))


async def get_count(tx: Tx, user_id: str, month: str) -> int:
    value = await tx.fetchval(GET_COUNT, user_id=user_id, month=month)
    return 0 if value is None else int(value)


async def add_counts(tx: Tx, deltas: dict[tuple[str, str], int]) -> None:
    """Add each delta to its row; additive, so several processes may flush their own counts."""
    await tx.executemany(
        ADD, [{"user_id": user_id, "month": month, "count": n} for (user_id, month), n in deltas.items()]
    )
