"""What a user holds, counted in one query: mailboxes, custom domains and webhooks."""

from __future__ import annotations

from dataclasses import dataclass

from inboxd.store.db import Tx


@dataclass(frozen=True, slots=True)
class Holdings:
    mailboxes: int
    domains: int
    webhooks: int


async def holdings(tx: Tx, user_id: str) -> Holdings:
    row = await tx.fetchrow(
        "SELECT (SELECT COUNT(*) FROM mailboxes WHERE user_id = ?) AS mailboxes, "
        "(SELECT COUNT(*) FROM custom_domains WHERE user_id = ?) AS domains, "
        "(SELECT COUNT(*) FROM webhooks WHERE user_id = ?) AS webhooks",
        user_id,
        user_id,
        user_id,
    )
    assert row is not None
    return Holdings(mailboxes=int(row["mailboxes"]), domains=int(row["domains"]), webhooks=int(row["webhooks"]))
