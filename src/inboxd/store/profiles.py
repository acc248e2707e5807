"""What a user holds, counted in one query: mailboxes, custom domains and webhooks."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from inboxd.store.db import Tx
from inboxd.store.schema import custom_domains, mailboxes, webhooks
from inboxd.store.sql import Statement


def _count_of_user(table: sa.Table) -> sa.ScalarSelect[int]:
    return (
        sa.select(sa.func.count())
        .select_from(table)
        .where(table.c.user_id == sa.bindparam("user_id"))
        .scalar_subquery()
    )


HOLDINGS = Statement(
    sa.select(
        _count_of_user(mailboxes).label("mailboxes"),
        _count_of_user(custom_domains).label("domains"),
        _count_of_user(webhooks).label("webhooks"),
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
