"""Queries on SMTP sandboxes: the per-user row, its mailbox, and captured messages with their envelope."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from inboxd.model import NO_FILTER, Mailbox, MessageFilter, Sandbox, SandboxMessage
from inboxd.store import mailboxes as mailbox_store
from inboxd.store import message_sweeps, search_index
from inboxd.store import messages as message_store
from inboxd.store.db import Row, Tx
from inboxd.store.messages import PAGE_SIZE, summary_from
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of

_decode_envelope = msgspec.json.Decoder(list[str]).decode


def _sandbox(row: Row) -> Sandbox:
    return Sandbox(
        user_id=row["user_id"],
        username=row["username"],
        mailbox=mailbox_store.mailbox_from(row),
        created_at=row["sandbox_created_at"],
    )


@cache
def _s() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.sandboxes.alias("s")


@cache
def _m() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.mailboxes.alias("m")


@cache
def _with_mailbox() -> sa.Select[Any]:
    """The sandbox with its mailbox, whose `user_id` is the sandbox's (read once, by `_sandbox`
    and `mailbox_from` both)."""
    return sa.select(
        _s().c.user_id,
        _s().c.username,
        _s().c.created_at.label("sandbox_created_at"),
        *(c for c in mailbox_store.mailbox_columns(_m()) if c.key != "user_id"),
    ).select_from(_s().join(_m(), _m().c.id == _s().c.mailbox_id))


FOR_USER = Statement(lambda: _with_mailbox().where(_s().c.user_id == param(_s().c.user_id)))
BY_USERNAME = Statement(lambda: _with_mailbox().where(_s().c.username == param(_s().c.username)))
INSERT = Statement(lambda: sa.insert(schema.sandboxes).values(values_of(schema.sandboxes)))
ENVELOPE = Statement(
    lambda: sa.select(schema.messages.c.envelope).where(
        schema.messages.c.id == param(schema.messages.c.id),
        schema.messages.c.mailbox_id == param(schema.messages.c.mailbox_id),
        schema.messages.c.deleted == 0,
    )
)
LIVE = Statement(
    lambda: sa.select(
        schema.messages.c.id, schema.messages.c.size, schema.messages.c.expired, schema.messages.c.source_id
    ).where(schema.messages.c.mailbox_id == param(schema.messages.c.mailbox_id), schema.messages.c.deleted == 0)
)
SET_DELETED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == param(schema.messages.c.id)).values(deleted=1)
)
DELETE_DETAIL = Statement(
    lambda: sa.delete(schema.message_details).where(schema.message_details.c.message_id == sa.bindparam("id"))
)
DELETE_CHECKS = Statement(
    lambda: sa.delete(schema.message_checks).where(schema.message_checks.c.message_id == sa.bindparam("id"))
)
FREE = Statement(
    lambda: (
        sa.update(schema.mailboxes)
        .where(schema.mailboxes.c.id == param(schema.mailboxes.c.id))
        .values(used=schema.mailboxes.c.used - sa.bindparam("freed"))
    )
)


async def for_user(tx: Tx, user_id: str) -> Sandbox | None:
    row = await tx.fetchrow(FOR_USER, user_id=user_id)
    return None if row is None else _sandbox(row)


async def by_username(tx: Tx, username: str) -> Sandbox | None:
    row = await tx.fetchrow(BY_USERNAME, username=username)
    return None if row is None else _sandbox(row)


async def insert(tx: Tx, *, user_id: str, username: str, mailbox: Mailbox, auth_hash: str) -> None:
    await mailbox_store.insert(tx, mailbox, auth_hash)
    await tx.execute(INSERT, user_id=user_id, username=username, mailbox_id=mailbox.id, created_at=mailbox.created_at)


def _message(row: Row) -> SandboxMessage:
    envelope = row[len(message_store.SUMMARY)]
    return SandboxMessage(summary=summary_from(row), recipients=tuple(_decode_envelope(envelope)) if envelope else ())


async def page(
    tx: Tx, mailbox_id: str, *, page: int, now: float, flt: MessageFilter = NO_FILTER, scan_rows: int = 0
) -> list[SandboxMessage]:
    rows = await message_store.page_rows(
        tx, mailbox_id, page=page, now=now, flt=flt, size=PAGE_SIZE, scan_rows=scan_rows, envelope=True
    )
    return [_message(r) for r in rows]


async def envelope(tx: Tx, mailbox_id: str, message_id: str) -> tuple[str, ...]:
    value = await tx.fetchval(ENVELOPE, id=message_id, mailbox_id=mailbox_id)
    return tuple(_decode_envelope(value)) if value else ()


async def delete_all(tx: Tx, mailbox_id: str) -> int:
    """Delete every message of the sandbox that is not yet deleted; returns how many.

    Expired ones (already out of `used`) are removed too, but only live ones count as deleted.
    """
    rows = await tx.fetch(LIVE, mailbox_id=mailbox_id)
    if not rows:
        return 0
    ids = [{"id": r["id"]} for r in rows]
    freed = sum(int(r["size"]) for r in rows if not r["expired"])
    await tx.executemany(SET_DELETED, ids)
    await message_sweeps.release_sources(tx, [r["source_id"] for r in rows])
    await tx.executemany(DELETE_DETAIL, ids)
    await tx.executemany(DELETE_CHECKS, ids)
    await search_index.forget(tx, [r["id"] for r in rows])
    if freed:
        await tx.execute(FREE, freed=freed, id=mailbox_id)
    return sum(1 for r in rows if not r["expired"])


name_statements(__name__, globals())
