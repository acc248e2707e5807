"""Queries on provider identities and one-time sign-in links."""

from __future__ import annotations

from inboxd.model import Identity
from inboxd.store.db import Row, Tx

_COLUMNS = "provider, subject, user_id, email, created_at, last_sign_in_at"


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
    row = await tx.fetchrow(f"SELECT {_COLUMNS} FROM identities WHERE provider = ? AND subject = ?", provider, subject)
    return None if row is None else _identity_from(row)


async def insert(tx: Tx, identity: Identity) -> None:
    await tx.execute(
        f"INSERT INTO identities ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        identity.provider,
        identity.subject,
        identity.user_id,
        identity.email,
        identity.created_at,
        identity.last_sign_in_at,
    )


async def touch(tx: Tx, provider: str, subject: str, *, email: str, now: float) -> None:
    await tx.execute(
        "UPDATE identities SET email = ?, last_sign_in_at = ? WHERE provider = ? AND subject = ?",
        email,
        now,
        provider,
        subject,
    )


async def delete(tx: Tx, *, provider: str, subject: str, user_id: str) -> int:
    return await tx.execute(
        "DELETE FROM identities WHERE provider = ? AND subject = ? AND user_id = ?", provider, subject, user_id
    )


async def lock_user(tx: Tx, user_id: str) -> None:
    """Hold the user's row until the unit of work ends, so two changes to their identities from two
    processes run one after the other (within a process, writes already run one at a time)."""
    if tx.dialect == "postgresql":
        await tx.fetchval("SELECT id FROM users WHERE id = ? FOR UPDATE", user_id)


async def for_user(tx: Tx, user_id: str) -> list[Identity]:
    rows = await tx.fetch(f"SELECT {_COLUMNS} FROM identities WHERE user_id = ? ORDER BY created_at", user_id)
    return [_identity_from(r) for r in rows]


async def insert_link(tx: Tx, *, link_id: str, user_id: str, now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO sign_in_links (id, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
        link_id,
        user_id,
        now,
        expires_at,
    )


async def use_link(tx: Tx, link_id: str, *, now: float) -> tuple[str | None, str]:
    """Mark a link used; (user id, "ok") or (None, why not: "unknown", "used", "expired")."""
    row = await tx.fetchrow("SELECT user_id, expires_at, used_at FROM sign_in_links WHERE id = ?", link_id)
    if row is None:
        return None, "unknown"
    if row["used_at"] is not None:
        return None, "used"
    if row["expires_at"] <= now:
        return None, "expired"
    # The guard on used_at makes the claim single even if two processes race for it.
    if await tx.execute("UPDATE sign_in_links SET used_at = ? WHERE id = ? AND used_at IS NULL", now, link_id) != 1:
        return None, "used"
    return str(row["user_id"]), "ok"


async def delete_stale_links(tx: Tx, *, before: float) -> int:
    return await tx.execute("DELETE FROM sign_in_links WHERE expires_at <= ?", before)
