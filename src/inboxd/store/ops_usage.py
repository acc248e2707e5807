"""Queries on the monthly operation counters (`ops_usage`: user, calendar month "YYYY-MM", count)."""

from __future__ import annotations

from typing import Any

from inboxd.store.db import Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of

GET_COUNT = Statement(
    lambda: sa.select(schema.ops_usage.c.count).where(
        schema.ops_usage.c.user_id == param(schema.ops_usage.c.user_id),
        schema.ops_usage.c.month == param(schema.ops_usage.c.month),
    )
)


def _add(dialect: str) -> Any:
    """INSERT of a delta that adds it to the row's count when the row exists (`ON CONFLICT`,
    written by each dialect's own `insert`)."""
    from sqlalchemy.dialects import postgresql, sqlite

    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    statement = insert(schema.ops_usage).values(values_of(schema.ops_usage))
    return statement.on_conflict_do_update(
        index_elements=[schema.ops_usage.c.user_id, schema.ops_usage.c.month],
        set_={"count": schema.ops_usage.c.count + statement.excluded["count"]},
    )


ADD = Statement(sqlite=lambda: _add("sqlite"), postgresql=lambda: _add("postgresql"))


async def get_count(tx: Tx, user_id: str, month: str) -> int:
    value = await tx.fetchval(GET_COUNT, user_id=user_id, month=month)
    return 0 if value is None else int(value)


async def add_counts(tx: Tx, deltas: dict[tuple[str, str], int]) -> None:
    """Add each delta to its row; additive, so several processes may flush their own counts."""
    await tx.executemany(
        ADD, [{"user_id": user_id, "month": month, "count": n} for (user_id, month), n in deltas.items()]
    )


name_statements(__name__, globals())
