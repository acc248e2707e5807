"""Queries on custom domains."""

from __future__ import annotations

from typing import Any

from inboxd.model import CustomDomain
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of


def _c() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.custom_domains.c


def _by_id() -> sa.ColumnElement[bool]:
    return _c().id == param(_c().id)


def _of_user() -> sa.ColumnElement[bool]:
    return _c().user_id == param(_c().user_id)


BY_NAME = Statement(lambda: sa.select(schema.custom_domains).where(_c().domain == param(_c().domain)))
GET_FOR_USER = Statement(lambda: sa.select(schema.custom_domains).where(_by_id(), _of_user()))
INSERT = Statement(
    lambda: sa.insert(schema.custom_domains).values(
        values_of(
            schema.custom_domains,
            "id",
            "user_id",
            "domain",
            "verify_status",
            "verify_token",
            "verified_at",
            "mx_configured",
            "created_at",
        )
    )
)
OF_USER = Statement(
    lambda: sa.select(schema.custom_domains).where(_of_user()).order_by(_c().created_at.desc(), _c().id.desc())
)
COUNT_OF_USER = Statement(lambda: sa.select(sa.func.count()).select_from(schema.custom_domains).where(_of_user()))
MARK_VERIFIED = Statement(
    lambda: (
        sa.update(schema.custom_domains)
        .where(_by_id(), _c().verify_status == "pending")
        .values(verify_status="verified", verified_at=param(_c().verified_at), mx_configured=1)
    )
)
DELETE = Statement(lambda: sa.delete(schema.custom_domains).where(_by_id()))


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
    row = await tx.fetchrow(BY_NAME, domain=domain)
    return None if row is None else domain_from(row)


async def get_for_user(tx: Tx, domain_id: str, user_id: str) -> CustomDomain | None:
    """The user's domain `domain_id`; None when the user has no such domain."""
    row = await tx.fetchrow(GET_FOR_USER, id=domain_id, user_id=user_id)
    return None if row is None else domain_from(row)


async def insert(tx: Tx, domain: CustomDomain) -> None:
    await tx.execute(
        INSERT,
        id=domain.id,
        user_id=domain.user_id,
        domain=domain.domain,
        verify_status=domain.verify_status,
        verify_token=domain.verify_token,
        verified_at=domain.verified_at,
        mx_configured=int(domain.mx_configured),
        created_at=domain.created_at,
    )


async def list_for_user(tx: Tx, user_id: str) -> list[CustomDomain]:
    rows = await tx.fetch(OF_USER, user_id=user_id)
    return [domain_from(r) for r in rows]


async def count_for_user(tx: Tx, user_id: str) -> int:
    return int(await tx.fetchval(COUNT_OF_USER, user_id=user_id))


async def mark_verified(tx: Tx, domain_id: str, *, now: float) -> None:
    await tx.execute(MARK_VERIFIED, verified_at=now, id=domain_id)


async def delete(tx: Tx, domain_id: str) -> None:
    """Removes the domain; its mailboxes stay, and the recipient lookup finds them no longer live."""
    await tx.execute(DELETE, id=domain_id)


name_statements(__name__, globals())
