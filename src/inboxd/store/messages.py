"""Queries on messages: the ingest insert, list pages, detail, raw source, marks and sweeps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from inboxd.model import NO_FILTER, MessageFilter, MessageSummary
from inboxd.store import search
from inboxd.store import webhooks as webhook_store
from inboxd.store.db import Row, Tx

COLUMNS = "id, mailbox_id, sender, from_header, subject, preview_text, size, is_read, created_at, expires_at, tags"
# What an encoded list item is kept by: it changes when its read mark or tags do, nothing else.
KEY_COLUMNS = "id, is_read, tags"
PAGE_SIZE = 30


def summary_from(row: Row) -> MessageSummary:
    # By position (the order of COLUMNS): name lookups on a row cost more than the query here.
    return MessageSummary(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], _tags(row[10])
    )


def _tags(column: str | None) -> tuple[str, ...]:
    # Spaces separate the tags (services/tags.py: no tag holds one); most messages have none.
    return tuple(column.split()) if column else ()


def _tag_rows(items: Sequence[MessageSummary]) -> list[tuple[str, str, str, float]]:
    """The `message_tags` rows of new copies: (message_id, tag, mailbox_id, created_at)."""
    return [(m.id, tag, m.mailbox_id, m.created_at) for m in items for tag in m.tags]


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A copy to store. Copies with the same `source_id` share one row of raw bytes."""

    summary: MessageSummary
    raw_compressed: bytes
    source_id: str
    # The envelope recipients as a JSON list, kept for mail the SMTP sandbox captured.
    envelope: str | None = None
    # Reception data, kept with the source (one per delivery): the SMTP client's address and HELO.
    client_ip: str | None = None
    helo: str | None = None


async def insert_many(tx: Tx, items: Sequence[NewMessage]) -> None:
    """Insert stored copies (their sizes are charged by `charge`), each source once."""
    refs: dict[str, int] = {}
    firsts: dict[str, NewMessage] = {}
    for m in items:
        refs[m.source_id] = refs.get(m.source_id, 0) + 1
        firsts.setdefault(m.source_id, m)
    await tx.executemany(
        "INSERT INTO message_sources (id, raw, refs, client_ip, helo) VALUES (?, ?, ?, ?, ?)",
        [
            (source_id, firsts[source_id].raw_compressed, count, firsts[source_id].client_ip, firsts[source_id].helo)
            for source_id, count in refs.items()
        ],
    )
    await tx.executemany(
        f"INSERT INTO messages ({COLUMNS}, source_id, envelope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                m.summary.id,
                m.summary.mailbox_id,
                m.summary.sender,
                m.summary.from_,
                m.summary.subject,
                m.summary.preview_text,
                m.summary.size,
                0,
                m.summary.created_at,
                m.summary.expires_at,
                " ".join(m.summary.tags),
                m.source_id,
                m.envelope,
            )
            for m in items
        ],
    )
    tagged = _tag_rows([m.summary for m in items])
    if tagged:
        await tx.executemany(INSERT_TAG, tagged)


INSERT_TAG = "INSERT INTO message_tags (message_id, tag, mailbox_id, created_at) VALUES (?, ?, ?, ?)"


# PostgreSQL's ingest in one statement (one round trip instead of four): charge each mailbox,
# insert the sources and the copies, and read the webhooks that fire. Data-modifying CTEs all run
# whether or not the final SELECT reads them; it returns one row at least, each with the count of
# mailboxes charged.
_INSERT_CHARGED = f"""
WITH charged AS (
    UPDATE mailboxes AS b SET used = b.used + x.size
    FROM unnest(CAST(? AS text[]), CAST(? AS bigint[])) AS x(id, size)
    WHERE b.id = x.id AND b.used + x.size <= b.quota
    RETURNING b.id
), sources AS (
    INSERT INTO message_sources (id, raw, refs, client_ip, helo)
    SELECT * FROM unnest(CAST(? AS text[]), CAST(? AS bytea[]), CAST(? AS integer[]), CAST(? AS text[]),
                         CAST(? AS text[]))
), copies AS (
    INSERT INTO messages ({COLUMNS}, source_id, envelope)
    SELECT x.id, x.mailbox_id, x.sender, x.from_header, x.subject, x.preview_text, x.size, 0,
           x.created_at, x.expires_at, x.tags, x.source_id, x.envelope
    FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]),
                CAST(? AS text[]), CAST(? AS text[]), CAST(? AS bigint[]), CAST(? AS float8[]),
                CAST(? AS float8[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]))
         AS x(id, mailbox_id, sender, from_header, subject, preview_text, size, created_at,
              expires_at, tags, source_id, envelope)
), tagged AS (
    INSERT INTO message_tags (message_id, tag, mailbox_id, created_at)
    SELECT * FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS float8[]))
), hooks AS ({webhook_store.ACTIVE_FOR_USERS.format(users="= ANY(CAST(? AS text[]))")})
SELECT (SELECT count(*) FROM charged) AS charged, hooks.id, hooks.user_id, hooks.events
FROM (SELECT 1) AS one LEFT JOIN hooks ON true
"""


async def insert_charged(tx: Tx, items: Sequence[NewMessage], *, hook_users: Sequence[str]) -> list[Row] | None:
    """PostgreSQL: `charge` and `insert_many` for every item, and `webhooks.ACTIVE_FOR_USERS` of
    `hook_users`, in one statement; None (the caller rolls back) when a mailbox is full."""
    sizes: dict[str, int] = {}
    refs: dict[str, int] = {}
    firsts: dict[str, NewMessage] = {}
    for m in items:
        sizes[m.summary.mailbox_id] = sizes.get(m.summary.mailbox_id, 0) + m.summary.size
        refs[m.source_id] = refs.get(m.source_id, 0) + 1
        firsts.setdefault(m.source_id, m)
    copies = [m.summary for m in items]
    tagged = _tag_rows(copies)
    rows = await tx.fetch(
        _INSERT_CHARGED,
        list(sizes),
        list(sizes.values()),
        list(refs),
        [firsts[s].raw_compressed for s in refs],
        list(refs.values()),
        [firsts[s].client_ip for s in refs],
        [firsts[s].helo for s in refs],
        [c.id for c in copies],
        [c.mailbox_id for c in copies],
        [c.sender for c in copies],
        [c.from_ for c in copies],
        [c.subject for c in copies],
        [c.preview_text for c in copies],
        [c.size for c in copies],
        [c.created_at for c in copies],
        [c.expires_at for c in copies],
        [" ".join(c.tags) for c in copies],
        [m.source_id for m in items],
        [m.envelope for m in items],
        [t[0] for t in tagged],
        [t[1] for t in tagged],
        [t[2] for t in tagged],
        [t[3] for t in tagged],
        list(hook_users),
    )
    return rows if rows[0]["charged"] == len(sizes) else None


async def charge(tx: Tx, mailbox_id: str, size: int) -> bool:
    """Add `size` to the mailbox's `used` if it stays within its quota; False when it would not."""
    changed = await tx.execute(
        "UPDATE mailboxes SET used = used + ? WHERE id = ? AND used + ? <= quota", size, mailbox_id, size
    )
    return changed == 1


async def page(
    tx: Tx,
    mailbox_id: str,
    *,
    page: int,
    now: float,
    flt: MessageFilter = NO_FILTER,
    size: int = PAGE_SIZE,
    scan_rows: int = 0,
) -> list[MessageSummary]:
    """A page of the filtered list; `scan_rows` bounds what a row-reading filter reads (store/search.py)."""
    rows = await page_rows(tx, mailbox_id, page=page, now=now, flt=flt, size=size, scan_rows=scan_rows)
    return [summary_from(r) for r in rows]


async def page_rows(
    tx: Tx,
    mailbox_id: str,
    *,
    page: int,
    now: float,
    flt: MessageFilter = NO_FILTER,
    size: int = PAGE_SIZE,
    scan_rows: int = 0,
    only: str = COLUMNS,
) -> list[Row]:
    """`page` as rows of COLUMNS (`summary_from` makes each a summary), or of the columns `only`
    names (`KEY_COLUMNS`: what a caller holding the encoded items looks them up by)."""
    q = await search.query(tx, mailbox_id, flt, scan_rows=scan_rows)
    where = " AND ".join([*q.where, "m.mailbox_id = ?", "m.deleted = 0", "m.expires_at > ?"])
    columns = ", ".join(f"m.{c}" for c in only.split(", "))
    rows = await tx.fetch(
        f"SELECT {columns} FROM {q.source} WHERE {where} ORDER BY {q.order} LIMIT {int(size)} OFFSET ?",
        *q.args,
        mailbox_id,
        now,
        (page - 1) * size,
    )
    await search.check_bound(tx, mailbox_id, flt, q, found=len(rows), size=size)
    return rows


async def get(tx: Tx, mailbox_id: str, message_id: str) -> MessageSummary | None:
    """A live or expired (not yet purged) message of the mailbox; None when deleted or unknown."""
    row = await tx.fetchrow(
        f"SELECT {COLUMNS} FROM messages WHERE id = ? AND mailbox_id = ? AND deleted = 0",
        message_id,
        mailbox_id,
    )
    return None if row is None else summary_from(row)


async def raw(tx: Tx, message_id: str) -> bytes | None:
    value = await tx.fetchval(
        "SELECT s.raw FROM messages m JOIN message_sources s ON s.id = m.source_id WHERE m.id = ?", message_id
    )
    return None if value is None else bytes(value)


async def raw_large(tx: Tx, message_id: str) -> bytes | bytearray | None:
    """`raw` for a big message: the source read in pieces (`Tx.fetch_blob`)."""
    source_id = await tx.fetchval("SELECT source_id FROM messages WHERE id = ?", message_id)
    return None if source_id is None else await tx.fetch_blob("message_sources", "raw", "id", source_id)


async def detail_json(tx: Tx, message_id: str) -> str | None:
    value = await tx.fetchval("SELECT detail FROM message_details WHERE message_id = ?", message_id)
    return None if value is None else str(value)


async def save_detail(tx: Tx, message_id: str, detail: str) -> None:
    """Keep a message's parse; replaces a kept parse of an older version."""
    await tx.execute(
        "INSERT INTO message_details (message_id, detail) VALUES (?, ?) "
        "ON CONFLICT (message_id) DO UPDATE SET detail = excluded.detail",
        message_id,
        detail,
    )


@dataclass(frozen=True, slots=True)
class ReceptionData:
    """What the SMTP session knew of a delivery: the MAIL FROM address, the client and its HELO
    (both None for mail stored before they were recorded, or not received over SMTP)."""

    mail_from: str
    client_ip: str | None
    helo: str | None


async def reception(tx: Tx, message_id: str) -> ReceptionData | None:
    row = await tx.fetchrow(
        "SELECT m.sender, s.client_ip, s.helo FROM messages m JOIN message_sources s ON s.id = m.source_id "
        "WHERE m.id = ?",
        message_id,
    )
    return None if row is None else ReceptionData(str(row[0]), row[1], row[2])


async def checks_json(tx: Tx, message_id: str) -> str | None:
    value = await tx.fetchval("SELECT report FROM message_checks WHERE message_id = ?", message_id)
    return None if value is None else str(value)


async def save_checks(tx: Tx, message_id: str, report: str, *, now: float) -> None:
    """Keep a message's check report; replaces the one kept before (a refresh)."""
    await tx.execute(
        "INSERT INTO message_checks (message_id, report, checked_at) VALUES (?, ?, ?) "
        "ON CONFLICT (message_id) DO UPDATE SET report = excluded.report, checked_at = excluded.checked_at",
        message_id,
        report,
        now,
    )


async def mark_read(tx: Tx, mailbox_id: str, message_ids: Sequence[str], *, now: float) -> int:
    """Mark unread live messages read; returns how many changed."""
    if not message_ids:
        return 0
    marks = ", ".join("?" for _ in message_ids)
    return await tx.execute(
        f"UPDATE messages SET is_read = 1 WHERE mailbox_id = ? AND is_read = 0 AND deleted = 0 "
        f"AND expires_at > ? AND id IN ({marks})",
        mailbox_id,
        now,
        *message_ids,
    )


async def mark_all_read(tx: Tx, mailbox_id: str, *, now: float) -> int:
    return await tx.execute(
        "UPDATE messages SET is_read = 1 WHERE mailbox_id = ? AND is_read = 0 AND deleted = 0 AND expires_at > ?",
        mailbox_id,
        now,
    )


async def release_sources(tx: Tx, source_ids: Sequence[str]) -> None:
    """Each id is one copy letting go of its source (repeat an id for several copies); a source
    that no copy holds any more is removed."""
    if not source_ids:
        return
    await tx.executemany("UPDATE message_sources SET refs = refs - 1 WHERE id = ?", [(s,) for s in source_ids])
    await tx.executemany(
        "DELETE FROM message_sources WHERE id = ? AND refs <= 0", [(s,) for s in sorted(set(source_ids))]
    )


async def soft_delete(tx: Tx, mailbox_id: str, message_id: str) -> bool:
    """Delete a message; its size leaves `used` unless expiry already took it out. Its bytes go
    with it unless another copy of the same delivery still holds them."""
    row = await tx.fetchrow(
        "SELECT size, expired, source_id FROM messages WHERE id = ? AND mailbox_id = ? AND deleted = 0",
        message_id,
        mailbox_id,
    )
    if row is None:
        return False
    await tx.execute("UPDATE messages SET deleted = 1 WHERE id = ?", message_id)
    if not row["expired"]:
        await tx.execute("UPDATE mailboxes SET used = used - ? WHERE id = ?", row["size"], mailbox_id)
    await release_sources(tx, [row["source_id"]])
    await tx.execute("DELETE FROM message_details WHERE message_id = ?", message_id)
    await tx.execute("DELETE FROM message_checks WHERE message_id = ?", message_id)
    await tx.execute("DELETE FROM message_tags WHERE message_id = ?", message_id)
    await search.forget(tx, [message_id])
    return True


# The sweep's queries, each served by an index (tests/test_purge.py checks the plans): the writer
# runs them, and every pending delivery waits behind them.
EXPIRE_DUE = "SELECT id, mailbox_id, size FROM messages WHERE expired = 0 AND deleted = 0 AND expires_at <= ? LIMIT ?"
PURGE_DELETED = "SELECT id FROM messages WHERE deleted = 1 LIMIT ?"
PURGE_EXPIRED = "SELECT id, source_id FROM messages WHERE expired = 1 AND expires_at <= ? AND deleted = 0 LIMIT ?"


# A message past its expiry that the sweep has not yet taken out of `used` (one `?`: now): its
# bytes count as free already (ix_messages_due). Here and in `mailboxes.recipient`.
DUE = "expired = 0 AND expires_at <= ? AND deleted = 0"


async def due_sizes(tx: Tx, mailbox_ids: Sequence[str], *, now: float) -> dict[str, int]:
    """Bytes per mailbox of messages past their expiry that the sweep has not yet taken out of
    `used` (ix_messages_due): `used` minus these is the mailbox's usage at `now`."""
    if not mailbox_ids:
        return {}
    marks = ", ".join("?" for _ in mailbox_ids)
    rows = await tx.fetch(
        f"SELECT mailbox_id, SUM(size) FROM messages WHERE mailbox_id IN ({marks}) AND {DUE} GROUP BY mailbox_id",
        *mailbox_ids,
        now,
    )
    return {str(r[0]): int(r[1]) for r in rows}


async def expire_due(tx: Tx, *, now: float, limit: int) -> int:
    """Flag messages whose retention ended and take their bytes out of `used`."""
    rows = await tx.fetch(EXPIRE_DUE, now, limit)
    if not rows:
        return 0
    await tx.executemany("UPDATE messages SET expired = 1 WHERE id = ?", [(r["id"],) for r in rows])
    await tx.executemany(
        "UPDATE mailboxes SET used = used - ? WHERE id = ?", [(r["size"], r["mailbox_id"]) for r in rows]
    )
    return len(rows)


async def purge(tx: Tx, *, expired_before: float, limit: int) -> int:
    """Remove for good up to `limit` rows: the soft-deleted ones (which let go of their source
    when deleted), then the expired ones past their grace (which let go now)."""
    deleted = await tx.fetch(PURGE_DELETED, limit)
    ids = [(r["id"],) for r in deleted]
    if len(ids) < limit:
        expired = await tx.fetch(PURGE_EXPIRED, expired_before, limit - len(ids))
        await release_sources(tx, [r["source_id"] for r in expired])
        await tx.executemany("DELETE FROM message_details WHERE message_id = ?", [(r["id"],) for r in expired])
        await tx.executemany("DELETE FROM message_checks WHERE message_id = ?", [(r["id"],) for r in expired])
        ids.extend((r["id"],) for r in expired)
    if ids:
        await tx.executemany("DELETE FROM message_tags WHERE message_id = ?", ids)
        await search.forget(tx, [i for (i,) in ids])
        await tx.executemany("DELETE FROM messages WHERE id = ?", ids)
    return len(ids)


async def mark_unread(tx: Tx, mailbox_id: str, message_id: str, *, now: float) -> int:
    return await tx.execute(
        "UPDATE messages SET is_read = 0 WHERE mailbox_id = ? AND id = ? AND is_read = 1 AND deleted = 0 "
        "AND expires_at > ?",
        mailbox_id,
        message_id,
        now,
    )


async def unread_counts(tx: Tx, mailbox_ids: Sequence[str], *, now: float) -> dict[str, int]:
    """Live unread messages per mailbox; mailboxes with none are absent."""
    if not mailbox_ids:
        return {}
    marks = ", ".join("?" for _ in mailbox_ids)
    rows = await tx.fetch(
        f"SELECT mailbox_id, COUNT(*) FROM messages WHERE mailbox_id IN ({marks}) AND is_read = 0 "
        "AND deleted = 0 AND expires_at > ? GROUP BY mailbox_id",
        *mailbox_ids,
        now,
    )
    return {str(r[0]): int(r[1]) for r in rows}


async def set_tags(tx: Tx, mailbox_id: str, message_id: str, tags: Sequence[str]) -> MessageSummary | None:
    """Replace a message's tags; the message with its new tags, or None when it is not there."""
    found = await get(tx, mailbox_id, message_id)
    if found is None:
        return None
    await tx.execute("UPDATE messages SET tags = ? WHERE id = ?", " ".join(tags), message_id)
    await tx.execute("DELETE FROM message_tags WHERE message_id = ?", message_id)
    if tags:
        await tx.executemany(INSERT_TAG, [(message_id, tag, mailbox_id, found.created_at) for tag in tags])
    return msgspec.structs.replace(found, tags=tuple(tags))
