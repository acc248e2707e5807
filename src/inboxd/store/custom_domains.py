"""Queries on custom domains."""

from __future__ import annotations

from inboxd.model import CustomDomain
from inboxd.store.db import Row, Tx

COLUMNS = "id, user_id, domain, verify_status, verify_token, verified_at, mx_configured, created_at"


def domain_from(row: Row) -> CustomDomain:
    return CustomDomain(
        id=row["id"],
        user_id=row["user_id"],
        domain=row["domain"],
        verify_status=row["verify_status"],
        verify_token=row["verify_token"],
        verified_at=row["verified_at"],
        mx_configured=bool(row["mx_configured"]),
        created_at=row["created_at"],
    )


async def get_by_name(tx: Tx, domain: str) -> CustomDomain | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM custom_domains WHERE domain = ?", domain)
    return None if row is None else domain_from(row)


async def get(tx: Tx, domain_id: str) -> CustomDomain | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM custom_domains WHERE id = ?", domain_id)
    return None if row is None else domain_from(row)


async def insert(tx: Tx, domain: CustomDomain) -> None:
    await tx.execute(
        f"INSERT INTO custom_domains ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        domain.id,
        domain.user_id,
        domain.domain,
        domain.verify_status,
        domain.verify_token,
        domain.verified_at,
        int(domain.mx_configured),
        domain.created_at,
    )


async def list_for_user(tx: Tx, user_id: str) -> list[CustomDomain]:
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM custom_domains WHERE user_id = ? ORDER BY created_at DESC, id DESC", user_id
    )
    return [domain_from(r) for r in rows]


async def count_for_user(tx: Tx, user_id: str) -> int:
    return int(await tx.fetchval("SELECT COUNT(*) FROM custom_domains WHERE user_id = ?", user_id))


async def mark_verified(tx: Tx, domain_id: str, *, now: float) -> None:
    await tx.execute(
        "UPDATE custom_domains SET verify_status = 'verified', verified_at = ?, mx_configured = 1 "
        "WHERE id = ? AND verify_status = 'pending'",
        now,
        domain_id,
    )


async def delete(tx: Tx, domain_id: str) -> None:
    """Removes the domain; its mailboxes stay, and the recipient lookup finds them no longer live."""
    await tx.execute("DELETE FROM custom_domains WHERE id = ?", domain_id)


async def get_for_user(tx: Tx, domain_id: str, user_id: str) -> CustomDomain | None:
    """The user's domain `domain_id`; None when the user has no such domain."""
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM custom_domains WHERE id = ? AND user_id = ?", domain_id, user_id)
    return None if row is None else domain_from(row)
