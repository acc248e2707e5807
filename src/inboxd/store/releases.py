"""Queries on `releases`, the record of messages sent on to the relay."""

from __future__ import annotations

import json
from typing import Any

from inboxd.model import RelayAnswer, Release
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of


def _r() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.releases.c


INSERT = Statement(lambda: sa.insert(schema.releases).values(values_of(schema.releases)))
OF_MESSAGE = Statement(
    lambda: (
        sa.select(schema.releases)
        .where(_r().message_id == param(_r().message_id), _r().mailbox_id == param(_r().mailbox_id))
        .order_by(_r().created_at.desc())
        .limit(sa.bindparam("limit"))
    )
)


async def insert(tx: Tx, release: Release) -> None:
    answers = json.dumps([[a.address, a.accepted, a.code, a.message] for a in release.answers])
    await tx.execute(
        INSERT,
        id=release.id,
        user_id=release.user_id,
        mailbox_id=release.mailbox_id,
        message_id=release.message_id,
        answers=answers,
        created_at=release.created_at,
    )


async def of_message(tx: Tx, *, mailbox_id: str, message_id: str, limit: int) -> list[Release]:
    rows = await tx.fetch(OF_MESSAGE, message_id=message_id, mailbox_id=mailbox_id, limit=limit)
    return [_release(row) for row in rows]


def _release(row: Row) -> Release:
    return Release(
        id=row["id"],
        user_id=row["user_id"],
        mailbox_id=row["mailbox_id"],
        message_id=row["message_id"],
        created_at=row["created_at"],
        answers=tuple(RelayAnswer(a, bool(ok), int(code), text) for a, ok, code, text in json.loads(row["answers"])),
    )


name_statements(__name__, globals())
