"""Queries on users, API tokens and server-wide values."""

from __future__ import annotations

from functools import cache
from typing import Any

from inboxd.model import ApiToken, User
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, upsert, values_of
from inboxd.store.text_match import contains_pattern, like


@cache
def user_columns() -> tuple[sa.Column[Any], ...]:
    """What a `User` is read from: every column of the user."""
    return tuple(schema.users.c)


@cache
def token_columns() -> tuple[sa.Column[Any], ...]:
    """What an `ApiToken` is read from: the token's columns but its hash."""
    return tuple(c for c in schema.api_tokens.c if c.key != "token_hash")


def user_from(row: Row, prefix: str = "") -> User:
    return User(
        id=row[f"{prefix}id"],
        email=row[f"{prefix}email"],
        plan=row[f"{prefix}plan"],
        role=row[f"{prefix}role"],
        status=row[f"{prefix}status"],
        created_at=row[f"{prefix}created_at"],
    )


def token_from(row: Row) -> ApiToken:
    return ApiToken(
        id=row["id"],
        user_id=row["user_id"],
        name=row["name"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
        prefix=row["prefix"],
    )


def user_labelled(table: sa.FromClause, prefix: str) -> list[sa.ColumnElement[Any]]:
    """The user's columns of `table` (an alias of `users` in a join), named `prefix` + column,
    for `user_from(row, prefix)`."""
    return [table.c[c.key].label(prefix + c.key) for c in user_columns()]


@cache
def _t() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.api_tokens.alias("t")


@cache
def _u() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.users.alias("u")


INSERT_USER = Statement(lambda: sa.insert(schema.users).values(values_of(schema.users)))
USER_BY_ID = Statement(lambda: sa.select(*user_columns()).where(schema.users.c.id == param(schema.users.c.id)))
USER_BY_EMAIL = Statement(lambda: sa.select(*user_columns()).where(schema.users.c.email == param(schema.users.c.email)))
# The row lock that serializes a user's count-then-insert work on PostgreSQL (`lock_user`).
LOCK_USER = Statement(
    lambda: (
        sa.select(schema.users.c.id).where(schema.users.c.id == param(schema.users.c.id, "user_id")).with_for_update()
    )
)
COUNT_USERS = Statement(lambda: sa.select(sa.func.count()).select_from(schema.users))


def _set_user(column: str) -> Statement:
    """An UPDATE of one column of one user's row (the plan, the status, the role)."""
    return Statement(
        lambda: (
            sa.update(schema.users)
            .where(schema.users.c.id == param(schema.users.c.id))
            .values({column: param(schema.users.c[column])})
        )
    )


SET_PLAN = _set_user("plan")
SET_STATUS = _set_user("status")
SET_ROLE = _set_user("role")
INSERT_TOKEN = Statement(
    lambda: sa.insert(schema.api_tokens).values(
        values_of(schema.api_tokens, "id", "user_id", "name", "token_hash", "created_at", "prefix")
    )
)
TOKEN_WITH_USER = Statement(
    lambda: (
        sa.select(*(_t().c[c.key] for c in token_columns()), *user_labelled(_u(), "u_"))
        .select_from(_t().join(_u(), _u().c.id == _t().c.user_id))
        .where(_t().c.token_hash == param(_t().c.token_hash))
    )
)
TOKENS_OF_USER = Statement(
    lambda: (
        sa.select(*token_columns())
        .where(schema.api_tokens.c.user_id == param(schema.api_tokens.c.user_id))
        .order_by(schema.api_tokens.c.created_at.desc(), schema.api_tokens.c.id.desc())
    )
)
COUNT_ACTIVE_TOKENS = Statement(
    lambda: (
        sa.select(sa.func.count())
        .select_from(schema.api_tokens)
        .where(
            schema.api_tokens.c.user_id == param(schema.api_tokens.c.user_id), schema.api_tokens.c.revoked_at.is_(None)
        )
    )
)
TOKEN_OF_USER = Statement(
    lambda: sa.select(*token_columns()).where(
        schema.api_tokens.c.id == param(schema.api_tokens.c.id),
        schema.api_tokens.c.user_id == param(schema.api_tokens.c.user_id),
    )
)
TOKEN_REVOKED_AT = Statement(
    lambda: sa.select(schema.api_tokens.c.revoked_at).where(
        schema.api_tokens.c.id == param(schema.api_tokens.c.id),
        schema.api_tokens.c.user_id == param(schema.api_tokens.c.user_id),
    )
)
REVOKE_TOKEN = Statement(
    lambda: (
        sa.update(schema.api_tokens)
        .where(schema.api_tokens.c.id == param(schema.api_tokens.c.id))
        .values(revoked_at=param(schema.api_tokens.c.revoked_at))
    )
)
# Never moves `last_used_at` backwards.
TOUCH_TOKEN = Statement(
    lambda: (
        sa.update(schema.api_tokens)
        .where(
            schema.api_tokens.c.id == param(schema.api_tokens.c.id),
            sa.or_(
                schema.api_tokens.c.last_used_at.is_(None),
                schema.api_tokens.c.last_used_at < param(schema.api_tokens.c.last_used_at),
            ),
        )
        .values(last_used_at=param(schema.api_tokens.c.last_used_at))
    )
)
META = Statement(lambda: sa.select(schema.meta.c.value).where(schema.meta.c.key == param(schema.meta.c.key)))
PUT_META_IF_ABSENT = upsert(lambda: schema.meta, keys=["key"])
SEARCH_USERS = Statement(
    lambda: (
        sa.select(*user_columns())
        .where(like(schema.users.c.email, sa.bindparam("pattern")), schema.users.c.email > sa.bindparam("after"))
        .order_by(schema.users.c.email)
        .limit(sa.bindparam("limit"))
    )
)


async def insert_user(tx: Tx, user: User) -> None:
    await tx.execute(
        INSERT_USER,
        id=user.id,
        email=user.email,
        plan=user.plan,
        role=user.role,
        status=user.status,
        created_at=user.created_at,
    )


async def get_user(tx: Tx, user_id: str) -> User | None:
    row = await tx.fetchrow(USER_BY_ID, id=user_id)
    return None if row is None else user_from(row)


async def get_user_by_email(tx: Tx, email: str) -> User | None:
    row = await tx.fetchrow(USER_BY_EMAIL, email=email)
    return None if row is None else user_from(row)


async def lock_user(tx: Tx, user_id: str) -> None:
    """Serialize a user's count-then-insert work (caps) until the transaction ends.

    SQLite has one writer, so its transactions never interleave; PostgreSQL needs the row lock.
    """
    if tx.dialect == "postgresql":
        await tx.fetchval(LOCK_USER, user_id=user_id)


async def count_users(tx: Tx) -> int:
    return int(await tx.fetchval(COUNT_USERS))


async def update_user(tx: Tx, user_id: str, *, plan: str | None, status: str | None) -> None:
    if plan is not None:
        await tx.execute(SET_PLAN, plan=plan, id=user_id)
    if status is not None:
        await tx.execute(SET_STATUS, status=status, id=user_id)


async def insert_token(tx: Tx, token: ApiToken, token_hash: str) -> None:
    await tx.execute(
        INSERT_TOKEN,
        id=token.id,
        user_id=token.user_id,
        name=token.name,
        token_hash=token_hash,
        created_at=token.created_at,
        prefix=token.prefix,
    )


async def token_with_user(tx: Tx, token_hash: str) -> tuple[ApiToken, User] | None:
    row = await tx.fetchrow(TOKEN_WITH_USER, token_hash=token_hash)
    if row is None:
        return None
    return token_from(row), user_from(row, "u_")


async def list_tokens(tx: Tx, user_id: str) -> list[ApiToken]:
    rows = await tx.fetch(TOKENS_OF_USER, user_id=user_id)
    return [token_from(r) for r in rows]


async def count_active_tokens(tx: Tx, user_id: str) -> int:
    return int(await tx.fetchval(COUNT_ACTIVE_TOKENS, user_id=user_id))


async def revoke_token(tx: Tx, user_id: str, token_id: str, now: float) -> bool:
    row = await tx.fetchrow(TOKEN_REVOKED_AT, id=token_id, user_id=user_id)
    if row is None:
        return False
    if row["revoked_at"] is None:
        await tx.execute(REVOKE_TOKEN, revoked_at=now, id=token_id)
    return True


async def touch_tokens(tx: Tx, last_used: dict[str, float]) -> None:
    """Write coalesced `last_used_at` values; never moves one backwards."""
    await tx.executemany(TOUCH_TOKEN, [{"last_used_at": ts, "id": token_id} for token_id, ts in last_used.items()])


async def get_meta(tx: Tx, key: str) -> str | None:
    value: Any = await tx.fetchval(META, key=key)
    return None if value is None else str(value)


async def put_meta_if_absent(tx: Tx, key: str, value: str) -> str:
    await tx.execute(PUT_META_IF_ABSENT, key=key, value=value)
    stored = await get_meta(tx, key)
    assert stored is not None
    return stored


async def update_role(tx: Tx, user_id: str, role: str) -> None:
    await tx.execute(SET_ROLE, role=role, id=user_id)


async def search_users(tx: Tx, *, query: str, after: str, limit: int) -> list[User]:
    """Users whose email contains `query`, by email, after the email `after` (keyset)."""
    rows = await tx.fetch(SEARCH_USERS, pattern=contains_pattern(query), after=after, limit=limit)
    return [user_from(r) for r in rows]


async def get_token(tx: Tx, user_id: str, token_id: str) -> ApiToken | None:
    """The user's token `token_id`, revoked or not; None when the user has no such token."""
    row = await tx.fetchrow(TOKEN_OF_USER, id=token_id, user_id=user_id)
    return None if row is None else token_from(row)


name_statements(__name__, globals())
