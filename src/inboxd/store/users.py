"""Queries on users, API tokens and server-wide values."""

from __future__ import annotations

from typing import Any

from inboxd.model import ApiToken, User
from inboxd.store.db import Row, Tx

USER_COLUMNS = "id, email, plan, role, status, created_at"
TOKEN_COLUMNS = "id, user_id, name, created_at, last_used_at, revoked_at, prefix"


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


async def insert_user(tx: Tx, user: User) -> None:
    await tx.execute(
        f"INSERT INTO users ({USER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        user.id,
        user.email,
        user.plan,
        user.role,
        user.status,
        user.created_at,
    )


async def get_user(tx: Tx, user_id: str) -> User | None:
    row = await tx.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = ?", user_id)
    return None if row is None else user_from(row)


async def get_user_by_email(tx: Tx, email: str) -> User | None:
    row = await tx.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE email = ?", email)
    return None if row is None else user_from(row)


async def lock_user(tx: Tx, user_id: str) -> None:
    """Serialize a user's count-then-insert work (caps) until the transaction ends.

    SQLite has one writer, so its transactions never interleave; PostgreSQL needs the row lock.
    """
    if tx.dialect == "postgresql":
        await tx.fetchval("SELECT id FROM users WHERE id = ? FOR UPDATE", user_id)


async def count_users(tx: Tx) -> int:
    return int(await tx.fetchval("SELECT COUNT(*) FROM users"))


async def update_user(tx: Tx, user_id: str, *, plan: str | None, status: str | None) -> None:
    if plan is not None:
        await tx.execute("UPDATE users SET plan = ? WHERE id = ?", plan, user_id)
    if status is not None:
        await tx.execute("UPDATE users SET status = ? WHERE id = ?", status, user_id)


async def insert_token(tx: Tx, token: ApiToken, token_hash: str) -> None:
    await tx.execute(
        "INSERT INTO api_tokens (id, user_id, name, token_hash, created_at, prefix) VALUES (?, ?, ?, ?, ?, ?)",
        token.id,
        token.user_id,
        token.name,
        token_hash,
        token.created_at,
        token.prefix,
    )


async def token_with_user(tx: Tx, token_hash: str) -> tuple[ApiToken, User] | None:
    row = await tx.fetchrow(
        "SELECT t.id, t.user_id, t.name, t.created_at, t.last_used_at, t.revoked_at, t.prefix, "
        "u.id AS u_id, u.email AS u_email, u.plan AS u_plan, u.role AS u_role, "
        "u.status AS u_status, u.created_at AS u_created_at "
        "FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?",
        token_hash,
    )
    if row is None:
        return None
    return token_from(row), user_from(row, "u_")


async def list_tokens(tx: Tx, user_id: str) -> list[ApiToken]:
    rows = await tx.fetch(
        f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = ? ORDER BY created_at DESC, id DESC",
        user_id,
    )
    return [token_from(r) for r in rows]


async def count_active_tokens(tx: Tx, user_id: str) -> int:
    return int(await tx.fetchval("SELECT COUNT(*) FROM api_tokens WHERE user_id = ? AND revoked_at IS NULL", user_id))


async def revoke_token(tx: Tx, user_id: str, token_id: str, now: float) -> bool:
    row = await tx.fetchrow("SELECT revoked_at FROM api_tokens WHERE id = ? AND user_id = ?", token_id, user_id)
    if row is None:
        return False
    if row["revoked_at"] is None:
        await tx.execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ?", now, token_id)
    return True


async def touch_tokens(tx: Tx, last_used: dict[str, float]) -> None:
    """Write coalesced `last_used_at` values; never moves one backwards."""
    await tx.executemany(
        "UPDATE api_tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
        [(ts, token_id, ts) for token_id, ts in last_used.items()],
    )


async def get_meta(tx: Tx, key: str) -> str | None:
    value: Any = await tx.fetchval("SELECT value FROM meta WHERE key = ?", key)
    return None if value is None else str(value)


async def put_meta_if_absent(tx: Tx, key: str, value: str) -> str:
    await tx.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", key, value)
    stored = await get_meta(tx, key)
    assert stored is not None
    return stored


async def update_role(tx: Tx, user_id: str, role: str) -> None:
    await tx.execute("UPDATE users SET role = ? WHERE id = ?", role, user_id)


async def search_users(tx: Tx, *, query: str, after: str, limit: int) -> list[User]:
    """Users whose email contains `query`, by email, after the email `after` (keyset)."""
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = await tx.fetch(
        f"SELECT {USER_COLUMNS} FROM users WHERE email LIKE ? ESCAPE '\\' AND email > ? ORDER BY email LIMIT ?",
        pattern,
        after,
        limit,
    )
    return [user_from(r) for r in rows]


async def get_token(tx: Tx, user_id: str, token_id: str) -> ApiToken | None:
    """The user's token `token_id`, revoked or not; None when the user has no such token."""
    row = await tx.fetchrow(f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = ? AND user_id = ?", token_id, user_id)
    return None if row is None else token_from(row)
