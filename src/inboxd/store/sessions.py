"""Queries on browser sessions: one row per session, keyed by the hash of its cookie value."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from inboxd.model import WebSession
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, one_of, param, sa, schema, values_of
from inboxd.store.users import user_from, user_labelled


@cache
def _s() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.sessions.alias("s")


@cache
def _u() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.users.alias("u")


@cache
def _by_id() -> sa.ColumnElement[bool]:
    return schema.sessions.c.id == param(schema.sessions.c.id)


INSERT = Statement(
    lambda: sa.insert(schema.sessions).values(
        {
            **values_of(schema.sessions, "id", "user_id", "csrf_token", "created_at", "last_seen_at", "expires_at"),
            "data": "{}",
        }
    )
)
# The user's columns are null for a sign-in under way (no user yet).
GET = Statement(
    lambda: (
        sa.select(
            _s().c.id,
            _s().c.csrf_token,
            _s().c.data,
            _s().c.created_at,
            _s().c.last_seen_at,
            _s().c.expires_at,
            *user_labelled(_u(), "u_"),
        )
        .select_from(_s().outerjoin(_u(), _u().c.id == _s().c.user_id))
        .where(_s().c.id == param(_s().c.id))
    )
)
TOUCH = Statement(
    lambda: (
        sa.update(schema.sessions)
        .where(_by_id())
        .values(last_seen_at=param(schema.sessions.c.last_seen_at), expires_at=param(schema.sessions.c.expires_at))
    )
)
PUT_DATA = Statement(lambda: sa.update(schema.sessions).where(_by_id()).values(data=param(schema.sessions.c.data)))
DELETE = Statement(lambda: sa.delete(schema.sessions).where(_by_id()))
DELETE_FOR_USER = Statement(
    lambda: (
        sa.delete(schema.sessions)
        .where(schema.sessions.c.user_id == param(schema.sessions.c.user_id))
        .returning(schema.sessions.c.id)
    )
)
SIGNED_IN = Statement(
    lambda: sa.select(schema.sessions.c.id).where(
        one_of(schema.sessions.c.id, "ids"),
        schema.sessions.c.user_id.is_not(None),
        schema.sessions.c.expires_at > sa.bindparam("now"),
    )
)
COUNT_FOR_USER = Statement(
    lambda: (
        sa.select(sa.func.count())
        .select_from(schema.sessions)
        .where(
            schema.sessions.c.user_id == param(schema.sessions.c.user_id),
            schema.sessions.c.expires_at > sa.bindparam("now"),
        )
    )
)
# In bounded batches, so one sweep never holds the writer long.
DELETE_EXPIRED = Statement(
    lambda: sa.delete(schema.sessions).where(
        schema.sessions.c.id.in_(
            sa.select(schema.sessions.c.id)
            .where(schema.sessions.c.expires_at <= sa.bindparam("now"))
            .limit(sa.bindparam("limit"))
        )
    )
)


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
        INSERT,
        id=session_id,
        user_id=user_id,
        csrf_token=csrf_token,
        created_at=now,
        last_seen_at=now,
        expires_at=expires_at,
    )


async def get(tx: Tx, session_id: str) -> WebSession | None:
    row = await tx.fetchrow(GET, id=session_id)
    return None if row is None else _session_from(row)


async def touch(tx: Tx, session_id: str, *, now: float, expires_at: float) -> None:
    await tx.execute(TOUCH, last_seen_at=now, expires_at=expires_at, id=session_id)


async def put_data(tx: Tx, session_id: str, data: dict[str, object]) -> None:
    await tx.execute(PUT_DATA, data=json.dumps(data), id=session_id)


async def delete(tx: Tx, session_id: str) -> None:
    await tx.execute(DELETE, id=session_id)


async def delete_for_user(tx: Tx, user_id: str) -> list[str]:
    """Delete every session of the user; the ids of those deleted."""
    return [row[0] for row in await tx.fetch(DELETE_FOR_USER, user_id=user_id)]


async def signed_in(tx: Tx, session_ids: Sequence[str], *, now: float) -> set[str]:
    """Those of `session_ids` that are signed-in sessions not yet expired."""
    if not session_ids:
        return set()
    rows = await tx.fetch(SIGNED_IN, ids=session_ids, now=now)
    return {row[0] for row in rows}


async def count_for_user(tx: Tx, user_id: str, *, now: float) -> int:
    return int(await tx.fetchval(COUNT_FOR_USER, user_id=user_id, now=now))


async def delete_expired(tx: Tx, *, now: float, limit: int = 1000) -> int:
    return await tx.execute(DELETE_EXPIRED, now=now, limit=limit)


name_statements(__name__, globals())
