"""Queries on SMTP sandboxes: the per-user row, its mailbox, and captured messages with their envelope."""

from __future__ import annotations

import msgspec

from inboxd.model import NO_FILTER, Mailbox, MessageFilter, Sandbox, SandboxMessage
from inboxd.store import mailboxes as mailbox_store
from inboxd.store import messages as message_store
from inboxd.store import search
from inboxd.store.db import Row, Tx
from inboxd.store.messages import PAGE_SIZE, summary_from

_decode_envelope = msgspec.json.Decoder(list[str]).decode
_MAILBOX = ", ".join(f"m.{c.strip()}" for c in mailbox_store.COLUMNS.split(","))


def _sandbox(row: Row) -> Sandbox:
    return Sandbox(
        user_id=row["user_id"],
        username=row["username"],
        mailbox=mailbox_store.mailbox_from(row),
        created_at=row["sandbox_created_at"],
    )


_SELECT = (
    f"SELECT s.user_id AS user_id, s.username, s.created_at AS sandbox_created_at, {_MAILBOX} "
    "FROM sandboxes s JOIN mailboxes m ON m.id = s.mailbox_id"
)


async def for_user(tx: Tx, user_id: str) -> Sandbox | None:
    row = await tx.fetchrow(f"{_SELECT} WHERE s.user_id = ?", user_id)
    return None if row is None else _sandbox(row)


async def by_username(tx: Tx, username: str) -> Sandbox | None:
    row = await tx.fetchrow(f"{_SELECT} WHERE s.username = ?", username)
    return None if row is None else _sandbox(row)


async def insert(tx: Tx, *, user_id: str, username: str, mailbox: Mailbox, auth_hash: str) -> None:
    await mailbox_store.insert(tx, mailbox, auth_hash)
    await tx.execute(
        "INSERT INTO sandboxes (user_id, username, mailbox_id, created_at) VALUES (?, ?, ?, ?)",
        user_id,
        username,
        mailbox.id,
        mailbox.created_at,
    )


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
    value = await tx.fetchval(
        "SELECT envelope FROM messages WHERE id = ? AND mailbox_id = ? AND deleted = 0", message_id, mailbox_id
    )
    return tuple(_decode_envelope(value)) if value else ()


async def delete_all(tx: Tx, mailbox_id: str) -> int:
    """Delete every message of the sandbox that is not yet deleted; returns how many.

    Expired ones (already out of `used`) are removed too, but only live ones count as deleted.
    """
    rows = await tx.fetch(
        "SELECT id, size, expired, source_id FROM messages WHERE mailbox_id = ? AND deleted = 0", mailbox_id
    )
    if not rows:
        return 0
    ids = [(r["id"],) for r in rows]
    freed = sum(int(r["size"]) for r in rows if not r["expired"])
    await tx.executemany("UPDATE messages SET deleted = 1 WHERE id = ?", ids)
    await message_store.release_sources(tx, [r["source_id"] for r in rows])
    await tx.executemany("DELETE FROM message_details WHERE message_id = ?", ids)
    await tx.executemany("DELETE FROM message_checks WHERE message_id = ?", ids)
    await search.forget(tx, [r["id"] for r in rows])
    if freed:
        await tx.execute("UPDATE mailboxes SET used = used - ? WHERE id = ?", freed, mailbox_id)
    return sum(1 for r in rows if not r["expired"])
