"""Queries on the monthly operation counters (`ops_usage`: user, calendar month "YYYY-MM", count)."""

from __future__ import annotations

from inboxd.store.db import Tx


async def get_count(tx: Tx, user_id: str, month: str) -> int:
    value = await tx.fetchval("SELECT count FROM ops_usage WHERE user_id = ? AND month = ?", user_id, month)
    return 0 if value is None else int(value)


async def add_counts(tx: Tx, deltas: dict[tuple[str, str], int]) -> None:
    """Add each delta to its row; additive, so several processes may flush their own counts."""
    await tx.executemany(
        "INSERT INTO ops_usage (user_id, month, count) VALUES (?, ?, ?) "
        "ON CONFLICT (user_id, month) DO UPDATE SET count = ops_usage.count + excluded.count",
        [(user_id, month, n) for (user_id, month), n in deltas.items()],
    )
