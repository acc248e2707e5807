"""What a user holds, counted in one query: mailboxes, custom domains and webhooks."""

from __future__ import annotations

from dataclasses import dataclass

from inboxd.store.db import Tx
from inboxd.store.sql import Statement, name_statements, sa, schema


def _count_of_user(table: sa.Table) -> sa.ScalarSelect[int]:
    return (
        sa.select(sa.func.count())
        .select_from(table)
        .where(table.c.user_id == sa.bindparam("user_id"))
        .scalar_subquery()
    )


HOLDINGS = Statement(
    lambda: sa.select(
        _count_of_user(schema.mailboxes).label("mailboxes"),
        _count_of_user(schema.custom_domains).label("domains"),
        _count_of_user(schema.webhooks).label("webhooks"),
    )
)


@dataclass(frozen=True, slots=True)
class Holdings:
    mailboxes: int
    domains: int
    webhooks: int


async def holdings(tx: Tx, user_id: str) -> Holdings:
    row = await tx.fetchrow(HOLDINGS, user_id=user_id)
    assert row is not None
    return Holdings(mailboxes=int(row["mailboxes"]), domains=int(row["domains"]), webhooks=int(row["webhooks"]))


name_statements(__name__, globals())
