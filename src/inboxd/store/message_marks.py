"""Marks on stored messages: read and unread, the unread counts, and the tags."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from inboxd.model import MessageSummary
from inboxd.store.db import Tx
from inboxd.store.message_ingest import DELETE_TAGS, INSERT_TAG
from inboxd.store.messages import get
from inboxd.store.sql import Statement, name_statements, one_of, sa, schema


def _live_unread_of(mailbox: sa.ColumnElement[bool]) -> list[sa.ColumnElement[bool]]:
    return [
        mailbox,
        schema.messages.c.is_read == 0,
        schema.messages.c.deleted == 0,
        schema.messages.c.expires_at > sa.bindparam("now"),
    ]


_MARK_READ = Statement(
    lambda: (
        sa.update(schema.messages)
        .where(
            *_live_unread_of(schema.messages.c.mailbox_id == sa.bindparam("mailbox")),
            schema.messages.c.id == sa.bindparam("id"),
        )
        .values(is_read=1)
    )
)
_MARK_MANY_READ = Statement(
    postgresql=lambda: (
        sa.update(schema.messages)
        .where(
            *_live_unread_of(schema.messages.c.mailbox_id == sa.bindparam("mailbox")),
            one_of(schema.messages.c.id, "ids"),
        )
        .values(is_read=1)
    )
)
_MARK_ALL_READ = Statement(
    lambda: (
        sa.update(schema.messages)
        .where(*_live_unread_of(schema.messages.c.mailbox_id == sa.bindparam("mailbox")))
        .values(is_read=1)
    )
)


async def mark_read(tx: Tx, mailbox_id: str, message_ids: Sequence[str], *, now: float) -> int:
    """Mark unread live messages read; returns how many changed."""
    if not message_ids:
        return 0
    if tx.dialect == "postgresql" and len(message_ids) > 1:
        return await tx.execute(_MARK_MANY_READ, mailbox=mailbox_id, now=now, ids=message_ids)
    # One by one on SQLite (no round trips): each is a key lookup, where SQLite's planner, not
    # knowing how long a `json_each` list is, would walk the mailbox's list index instead.
    changed = 0
    for message_id in dict.fromkeys(message_ids):
        changed += await tx.execute(_MARK_READ, mailbox=mailbox_id, now=now, id=message_id)
    return changed


async def mark_all_read(tx: Tx, mailbox_id: str, *, now: float) -> int:
    return await tx.execute(_MARK_ALL_READ, mailbox=mailbox_id, now=now)


_MARK_UNREAD = Statement(
    lambda: (
        sa.update(schema.messages)
        .where(
            schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
            schema.messages.c.id == sa.bindparam("id"),
            schema.messages.c.is_read == 1,
            schema.messages.c.deleted == 0,
            schema.messages.c.expires_at > sa.bindparam("now"),
        )
        .values(is_read=0)
    )
)


async def mark_unread(tx: Tx, mailbox_id: str, message_id: str, *, now: float) -> int:
    return await tx.execute(_MARK_UNREAD, mailbox=mailbox_id, id=message_id, now=now)


_UNREAD_COUNTS = Statement(
    lambda: (
        sa.select(schema.messages.c.mailbox_id, sa.func.count())
        .where(*_live_unread_of(one_of(schema.messages.c.mailbox_id, "mailboxes")))
        .group_by(schema.messages.c.mailbox_id)
    )
)


async def unread_counts(tx: Tx, mailbox_ids: Sequence[str], *, now: float) -> dict[str, int]:
    """Live unread messages per mailbox; mailboxes with none are absent."""
    if not mailbox_ids:
        return {}
    rows = await tx.fetch(_UNREAD_COUNTS, mailboxes=mailbox_ids, now=now)
    return {str(r[0]): int(r[1]) for r in rows}


_SET_TAGS = Statement(
    lambda: (
        sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(tags=sa.bindparam("tags"))
    )
)


async def set_tags(tx: Tx, mailbox_id: str, message_id: str, tags: Sequence[str]) -> MessageSummary | None:
    """Replace a message's tags; the message with its new tags, or None when it is not there."""
    found = await get(tx, mailbox_id, message_id)
    if found is None:
        return None
    await tx.execute(_SET_TAGS, tags=" ".join(tags), id=message_id)
    await tx.execute(DELETE_TAGS, id=message_id)
    if tags:
        await tx.executemany(
            INSERT_TAG,
            [
                {"message_id": message_id, "tag": t, "mailbox_id": mailbox_id, "created_at": found.created_at}
                for t in tags
            ],
        )
    return msgspec.structs.replace(found, tags=tuple(tags))


name_statements(__name__, globals())
