"""Queries on `releases`, the record of messages sent on to the relay."""

from __future__ import annotations

import json

from inboxd.model import RelayAnswer, Release
from inboxd.store.db import Row, Tx

COLUMNS = "id, user_id, mailbox_id, message_id, answers, created_at"


async def insert(tx: Tx, release: Release) -> None:
    answers = json.dumps([[a.address, a.accepted, a.code, a.message] for a in release.answers])
    await tx.execute(
        f"INSERT INTO releases ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        release.id,
        release.user_id,
        release.mailbox_id,
        release.message_id,
        answers,
        release.created_at,
    )


async def of_message(tx: Tx, *, mailbox_id: str, message_id: str, limit: int) -> list[Release]:
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM releases WHERE message_id = ? AND mailbox_id = ? ORDER BY created_at DESC LIMIT ?",
        message_id,
        mailbox_id,
        limit,
    )
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
