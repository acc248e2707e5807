"""Queries on provider identities and one-time sign-in links."""

from __future__ import annotations

from typing import Any

from inboxd.model import Identity
from inboxd.store import users as user_store
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of


def _i() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.identities.c


def _l() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.sign_in_links.c


def _by_key() -> sa.ColumnElement[bool]:
    return sa.and_(_i().provider == param(_i().provider), _i().subject == param(_i().subject))


GET = Statement(lambda: sa.select(schema.identities).where(_by_key()))
INSERT = Statement(lambda: sa.insert(schema.identities).values(values_of(schema.identities)))
TOUCH = Statement(
    lambda: (
        sa.update(schema.identities)
        .where(_by_key())
        .values(email=param(_i().email), last_sign_in_at=param(_i().last_sign_in_at))
    )
)
DELETE = Statement(lambda: sa.delete(schema.identities).where(_by_key(), _i().user_id == param(_i().user_id)))
FOR_USER = Statement(
    lambda: sa.select(schema.identities).where(_i().user_id == param(_i().user_id)).order_by(_i().created_at)
)
INSERT_LINK = Statement(
    lambda: sa.insert(schema.sign_in_links).values(
        values_of(schema.sign_in_links, "id", "user_id", "created_at", "expires_at")
    )
)
LINK = Statement(lambda: sa.select(_l().user_id, _l().expires_at, _l().used_at).where(_l().id == param(_l().id)))
# The guard on used_at makes the claim single even if two processes race for it.
USE_LINK = Statement(
    lambda: (
        sa.update(schema.sign_in_links)
        .where(_l().id == param(_l().id), _l().used_at.is_(None))
        .values(used_at=param(_l().used_at))
    )
)
DELETE_STALE_LINKS = Statement(lambda: sa.delete(schema.sign_in_links).where(_l().expires_at <= sa.bindparam("before")))


def _identity_from(row: Row) -> Identity:
    return Identity(
        provider=row["provider"],
        subject=row["subject"],
        user_id=row["user_id"],
        email=row["email"],
        created_at=row["created_at"],
        last_sign_in_at=row["last_sign_in_at"],
    )


async def get(tx: Tx, provider: str, subject: str) -> Identity | None:
    row = await tx.fetchrow(GET, provider=provider, subject=subject)
    return None if row is None else _identity_from(row)


async def insert(tx: Tx, identity: Identity) -> None:
    await tx.execute(
        INSERT,
        provider=identity.provider,
        subject=identity.subject,
        user_id=identity.user_id,
        email=identity.email,
        created_at=identity.created_at,
        last_sign_in_at=identity.last_sign_in_at,
    )


async def touch(tx: Tx, provider: str, subject: str, *, email: str, now: float) -> None:
    await tx.execute(TOUCH, email=email, last_sign_in_at=now, provider=provider, subject=subject)


async def delete(tx: Tx, *, provider: str, subject: str, user_id: str) -> int:
    return await tx.execute(DELETE, provider=provider, subject=subject, user_id=user_id)


async def lock_user(tx: Tx, user_id: str) -> None:
    """Hold the user's row until the unit of work ends, so two changes to their identities from two
    processes run one after the other (within a process, writes already run one at a time)."""
    await user_store.lock_user(tx, user_id)


async def for_user(tx: Tx, user_id: str) -> list[Identity]:
    rows = await tx.fetch(FOR_USER, user_id=user_id)
    return [_identity_from(r) for r in rows]


async def insert_link(tx: Tx, *, link_id: str, user_id: str, now: float, expires_at: float) -> None:
    await tx.execute(INSERT_LINK, id=link_id, user_id=user_id, created_at=now, expires_at=expires_at)


async def use_link(tx: Tx, link_id: str, *, now: float) -> tuple[str | None, str]:
    """Mark a link used; (user id, "ok") or (None, why not: "unknown", "used", "expired")."""
    row = await tx.fetchrow(LINK, id=link_id)
    if row is None:
        return None, "unknown"
    if row["used_at"] is not None:
        return None, "used"
    if row["expires_at"] <= now:
        return None, "expired"
    if await tx.execute(USE_LINK, used_at=now, id=link_id) != 1:
        return None, "used"
    return str(row["user_id"]), "ok"


async def delete_stale_links(tx: Tx, *, before: float) -> int:
    return await tx.execute(DELETE_STALE_LINKS, before=before)


name_statements(__name__, globals())
