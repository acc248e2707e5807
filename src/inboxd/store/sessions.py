"""Queries on browser sessions: one row per session, keyed by the hash of its cookie value."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from inboxd.model import WebSession
from inboxd.store.db import Row, Tx
from inboxd.store.users import USER_COLUMNS, user_from

_USER = ", ".join(f"u.{c} AS u_{c}" for c in USER_COLUMNS.split(", "))


def _session_from(row: Row) -> WebSession:
    try:
        data: Any = json.loads(row["data"])
    except ValueError:
        data = {}
    return WebSession(
        id=row["id"],
        user=user_from(row, "u_") if row["u_id"] is not None else None,
        csrf_token=row["csrf_token"],
        data=data if isinstance(data, dict) else {},
        created_at=row["created_at"],
        last_seen_at=row["last_seen_at"],
        expires_at=row["expires_at"],
    )


async def insert(
    tx: Tx, *, session_id: str, user_id: str | None, csrf_token: str, now: float, expires_at: float
) -> None:
    await tx.execute(
        "INSERT INTO sessions (id, user_id, csrf_token, data, created_at, last_seen_at, expires_at) "
        "VALUES (?, ?, ?, '{}', ?, ?, ?)",
        session_id,
        user_id,
        csrf_token,
        now,
        now,
        expires_at,
    )


async def get(tx: Tx, session_id: str) -> WebSession | None:
    row = await tx.fetchrow(
        f"SELECT s.id, s.csrf_token, s.data, s.created_at, s.last_seen_at, s.expires_at, {_USER} "
        "FROM sessions s LEFT JOIN users u ON u.id = s.user_id WHERE s.id = ?",
        session_id,
    )
    return None if row is None else _session_from(row)


async def touch(tx: Tx, session_id: str, *, now: float, expires_at: float) -> None:
    await tx.execute("UPDATE sessions SET last_seen_at = ?, expires_at = ? WHERE id = ?", now, expires_at, session_id)


async def put_data(tx: Tx, session_id: str, data: dict[str, object]) -> None:
    await tx.execute("UPDATE sessions SET data = ? WHERE id = ?", json.dumps(data), session_id)


async def delete(tx: Tx, session_id: str) -> None:
    await tx.execute("DELETE FROM sessions WHERE id = ?", session_id)


async def delete_for_user(tx: Tx, user_id: str) -> list[str]:
    """Delete every session of the user; the ids of those deleted."""
    return [row[0] for row in await tx.fetch("DELETE FROM sessions WHERE user_id = ? RETURNING id", user_id)]


async def signed_in(tx: Tx, session_ids: Sequence[str], *, now: float) -> set[str]:
    """Those of `session_ids` that are signed-in sessions not yet expired."""
    if not session_ids:
        return set()
    marks = ", ".join("?" * len(session_ids))
    rows = await tx.fetch(
        f"SELECT id FROM sessions WHERE id IN ({marks}) AND user_id IS NOT NULL AND expires_at > ?",
        *session_ids,
        now,
    )
    return {row[0] for row in rows}


async def count_for_user(tx: Tx, user_id: str, *, now: float) -> int:
    return int(await tx.fetchval("SELECT COUNT(*) FROM sessions WHERE user_id = ? AND expires_at > ?", user_id, now))


async def delete_expired(tx: Tx, *, now: float, limit: int = 1000) -> int:
    return await tx.execute(
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires_at <= ? LIMIT ?)", now, limit
    )
