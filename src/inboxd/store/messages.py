"""Queries on messages: the ingest insert, list pages, detail, raw source, marks and sweeps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from inboxd.model import NO_FILTER, MessageFilter, MessageSummary
from inboxd.store import search
from inboxd.store import webhooks as webhook_store
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Shapes, Statement, arrays, name_statements, one_of, sa, schema, upsert, values_of

# The columns of a summary, in the order `summary_from` reads them by position.
SUMMARY = (
    "id",
    "mailbox_id",
    "sender",
    "from_header",
    "subject",
    "preview_text",
    "size",
    "is_read",
    "created_at",
    "expires_at",
    "tags",
)
# What an encoded list item is kept by: it changes when its read mark or tags do, nothing else.
KEYS = ("id", "is_read", "tags")
PAGE_SIZE = 30


def summary_from(row: Row) -> MessageSummary:
    # By position (the order of SUMMARY): name lookups on a row cost more than the query here.
    return MessageSummary(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9], _tags(row[10])
    )


def _tags(column: str | None) -> tuple[str, ...]:
    # Spaces separate the tags (services/tags.py: no tag holds one); most messages have none.
    return tuple(column.split()) if column else ()


def _tag_rows(items: Sequence[MessageSummary]) -> list[dict[str, Any]]:
    """The `message_tags` rows of new copies."""
    return [
        {"message_id": m.id, "tag": tag, "mailbox_id": m.mailbox_id, "created_at": m.created_at}
        for m in items
        for tag in m.tags
    ]


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


def _summary_columns(table: Any) -> list[sa.ColumnElement[Any]]:
    return [table.c[name] for name in SUMMARY]


_INSERT_SOURCES = Statement(
    lambda: sa.insert(schema.message_sources).values(
        values_of(schema.message_sources, "id", "raw", "refs", "client_ip", "helo")
    )
)
_INSERT_COPIES = Statement(
    lambda: sa.insert(schema.messages).values(values_of(schema.messages, *SUMMARY, "source_id", "envelope"))
)
INSERT_TAG = Statement(lambda: sa.insert(schema.message_tags).values(values_of(schema.message_tags)))


async def insert_many(tx: Tx, items: Sequence[NewMessage]) -> None:
    """Insert stored copies (their sizes are charged by `charge`), each source once."""
    refs: dict[str, int] = {}
    firsts: dict[str, NewMessage] = {}
    for m in items:
        refs[m.source_id] = refs.get(m.source_id, 0) + 1
        firsts.setdefault(m.source_id, m)
    await tx.executemany(
        _INSERT_SOURCES,
        [
            {
                "id": source_id,
                "raw": firsts[source_id].raw_compressed,
                "refs": count,
                "client_ip": firsts[source_id].client_ip,
                "helo": firsts[source_id].helo,
            }
            for source_id, count in refs.items()
        ],
    )
    await tx.executemany(
        _INSERT_COPIES,
        [
            {
                "id": m.summary.id,
                "mailbox_id": m.summary.mailbox_id,
                "sender": m.summary.sender,
                "from_header": m.summary.from_,
                "subject": m.summary.subject,
                "preview_text": m.summary.preview_text,
                "size": m.summary.size,
                "is_read": 0,
                "created_at": m.summary.created_at,
                "expires_at": m.summary.expires_at,
                "tags": " ".join(m.summary.tags),
                "source_id": m.source_id,
                "envelope": m.envelope,
            }
            for m in items
        ],
    )
    tagged = _tag_rows([m.summary for m in items])
    if tagged:
        await tx.executemany(INSERT_TAG, tagged)


def _insert_charged() -> sa.Select[Any]:
    """PostgreSQL's ingest in one statement (one round trip instead of four): charge each
    mailbox, insert the sources, the copies and their tags, and read the webhooks that fire.
    Data-modifying CTEs all run whether or not the final SELECT reads them; it returns one row at
    least, each with the count of mailboxes charged."""
    b: Any = schema.mailboxes.alias("b")
    size = arrays("size", id=sa.Text, size=sa.BigInteger)
    charged = (
        sa.update(b)
        .values(used=b.c.used + size.c.size)
        .where(b.c.id == size.c.id, b.c.used + size.c.size <= b.c.quota)
        .returning(b.c.id)
        .cte("charged")
    )
    src = arrays("src", id=sa.Text, raw=sa.LargeBinary, refs=sa.Integer, client_ip=sa.Text, helo=sa.Text)
    sources = (
        sa.insert(schema.message_sources)
        .from_select(["id", "raw", "refs", "client_ip", "helo"], sa.select(*src.c))
        .cte("sources")
    )
    copy_types = {
        **{c: sa.Text for c in ("id", "mailbox_id", "sender", "from_header", "subject", "preview_text")},
        "size": sa.BigInteger,
        "created_at": sa.Double,
        "expires_at": sa.Double,
        "tags": sa.Text,
        "source_id": sa.Text,
        "envelope": sa.Text,
    }
    copy = arrays("copy", **copy_types)
    copies = (
        sa.insert(schema.messages)
        .from_select(
            [*SUMMARY, "source_id", "envelope"],
            sa.select(
                *[sa.literal_column("0") if c == "is_read" else copy.c[c] for c in SUMMARY],
                copy.c.source_id,
                copy.c.envelope,
            ),
        )
        .cte("copies")
    )
    tag = arrays("tag", message_id=sa.Text, tag=sa.Text, mailbox_id=sa.Text, created_at=sa.Double)
    tagged = (
        sa.insert(schema.message_tags)
        .from_select(["message_id", "tag", "mailbox_id", "created_at"], sa.select(*tag.c))
        .cte("tagged")
    )
    hooks = webhook_store.active_hooks("hook_users").cte("hooks")
    one = sa.select(sa.literal_column("1").label("one")).subquery("one")
    return (
        sa.select(
            sa.select(sa.func.count()).select_from(charged).scalar_subquery().label("charged"),
            hooks.c.id,
            hooks.c.user_id,
            hooks.c.events,
        )
        .select_from(one.outerjoin(hooks, sa.true()))
        .add_cte(sources, copies, tagged)
    )


_INSERT_CHARGED = Statement(postgresql=_insert_charged)


async def insert_charged(
    tx: Tx, items: Sequence[NewMessage], *, hook_users: Sequence[str], event_type: str
) -> dict[str, list[str]] | None:
    """The ingest's writes: `charge` each copy's mailbox, `insert_many` the copies, and the
    webhooks of `hook_users` subscribed to `event_type` (by user, `webhooks.subscribed`); None
    (the caller rolls back) when a mailbox is full. On PostgreSQL in one statement, one round
    trip; on SQLite, where a statement costs no round trip, one by one."""
    if tx.dialect != "postgresql":
        for item in items:
            if not await charge(tx, item.summary.mailbox_id, item.summary.size):
                return None
        await insert_many(tx, items)
        return await webhook_store.active_ids_for_users(tx, hook_users, event_type)
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
        size_id=list(sizes),
        size_size=list(sizes.values()),
        src_id=list(refs),
        src_raw=[firsts[s].raw_compressed for s in refs],
        src_refs=list(refs.values()),
        src_client_ip=[firsts[s].client_ip for s in refs],
        src_helo=[firsts[s].helo for s in refs],
        copy_id=[c.id for c in copies],
        copy_mailbox_id=[c.mailbox_id for c in copies],
        copy_sender=[c.sender for c in copies],
        copy_from_header=[c.from_ for c in copies],
        copy_subject=[c.subject for c in copies],
        copy_preview_text=[c.preview_text for c in copies],
        copy_size=[c.size for c in copies],
        copy_created_at=[c.created_at for c in copies],
        copy_expires_at=[c.expires_at for c in copies],
        copy_tags=[" ".join(c.tags) for c in copies],
        copy_source_id=[m.source_id for m in items],
        copy_envelope=[m.envelope for m in items],
        tag_message_id=[t["message_id"] for t in tagged],
        tag_tag=[t["tag"] for t in tagged],
        tag_mailbox_id=[t["mailbox_id"] for t in tagged],
        tag_created_at=[t["created_at"] for t in tagged],
        hook_users=list(hook_users),
    )
    if rows[0]["charged"] != len(sizes):
        return None
    return webhook_store.subscribed(rows, event_type)


_CHARGE = Statement(
    lambda: (
        sa.update(schema.mailboxes)
        .where(
            schema.mailboxes.c.id == sa.bindparam("mailbox"),
            schema.mailboxes.c.used + sa.bindparam("size") <= schema.mailboxes.c.quota,
        )
        .values(used=schema.mailboxes.c.used + sa.bindparam("size"))
    )
)


async def charge(tx: Tx, mailbox_id: str, size: int) -> bool:
    """Add `size` to the mailbox's `used` if it stays within its quota; False when it would not."""
    return await tx.execute(_CHARGE, mailbox=mailbox_id, size=size) == 1


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


def _page_select(shape: search.Shape, size: int, envelope: bool, keys_only: bool) -> sa.Select[Any]:
    """The SELECT of a page of SUMMARY (and the envelope after it, when asked), or of KEYS alone,
    for a filter's shape."""
    source, where, order = search.page_parts(shape)
    m = search.listed()
    columns: list[sa.ColumnElement[Any]]
    if keys_only:
        columns = [m.c[name] for name in KEYS]
    else:
        columns = [*_summary_columns(m), *([m.c.envelope] if envelope else [])]
    return (
        sa.select(*columns)
        .select_from(source)
        .where(
            *where, m.c.mailbox_id == sa.bindparam("mailbox"), m.c.deleted == 0, m.c.expires_at > sa.bindparam("now")
        )
        .order_by(*order)
        .limit(size)
        .offset(sa.bindparam("offset"))
    )


def _page(key: tuple[search.Shape, int, bool, bool]) -> Statement:
    return Statement(lambda: _page_select(*key), replan=search.replans(key[0]))


def _common_pages() -> list[tuple[search.Shape, int, bool, bool]]:
    """The pages precompiled: the list (30 a page, its keys alone or whole rows; 1 for a
    mailbox's newest message; with the envelope for the sandbox) unfiltered, by full text, by
    tag, by time, and by the common row-reading filters alone, bounded or not. Any other
    combination compiles at its first use (which loads SQLAlchemy)."""
    shapes = [
        search.Shape(),
        search.Shape(words="fts5"),
        search.Shape(words="hits"),
        search.Shape(words="walk"),
        search.Shape(tag="driven"),
        search.Shape(since=True),
        search.Shape(until=True),
        search.Shape(since=True, until=True),
    ]
    folds: tuple[search.Fold, ...] = ("like", "ilike", "lower")
    for floor in (False, True):
        for fold in folds:
            shapes += [
                search.Shape(from_=fold, floor=floor),
                search.Shape(subject=fold, floor=floor),
                search.Shape(subject=fold, unread=True, floor=floor),
            ]
        shapes += [
            search.Shape(unread=True, floor=floor),
            search.Shape(to=True, floor=floor),
            search.Shape(has_attachments=True, floor=floor),
        ]
    return [
        (shape, size, envelope, keys_only)
        for shape in shapes
        for size, envelope, keys_only in (
            (PAGE_SIZE, False, True),
            (PAGE_SIZE, False, False),
            (1, False, False),
            (PAGE_SIZE, True, False),
        )
    ]


# One per filter shape, page size, with or without the envelope, keys or whole rows: a few dozen in practice.
_PAGES: Shapes[tuple[search.Shape, int, bool, bool]] = Shapes(_page, size=512, prepared=_common_pages)


async def page_rows(
    tx: Tx,
    mailbox_id: str,
    *,
    page: int,
    now: float,
    flt: MessageFilter = NO_FILTER,
    size: int = PAGE_SIZE,
    scan_rows: int = 0,
    envelope: bool = False,
    keys_only: bool = False,
) -> list[Row]:
    """`page` as rows of SUMMARY (`summary_from` makes each a summary), and the envelope after
    them when asked; with `keys_only`, of KEYS alone (what a caller holding the encoded items
    looks them up by: an item changes when its read mark or tags do, nothing else)."""
    q = await search.query(tx, mailbox_id, flt, scan_rows=scan_rows)
    rows = await tx.fetch(
        _PAGES((q.shape, size, envelope, keys_only)), **q.params, mailbox=mailbox_id, now=now, offset=(page - 1) * size
    )
    await search.check_bound(tx, mailbox_id, flt, q, found=len(rows), size=size)
    return rows


_GET = Statement(
    lambda: sa.select(*_summary_columns(schema.messages)).where(
        schema.messages.c.id == sa.bindparam("id"),
        schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
        schema.messages.c.deleted == 0,
    )
)


async def get(tx: Tx, mailbox_id: str, message_id: str) -> MessageSummary | None:
    """A live or expired (not yet purged) message of the mailbox; None when deleted or unknown."""
    row = await tx.fetchrow(_GET, id=message_id, mailbox=mailbox_id)
    return None if row is None else summary_from(row)


def _with_source() -> Any:
    m, s = schema.messages.alias("m"), schema.message_sources.alias("s")
    return m, s, m.join(s, s.c.id == m.c.source_id)


def _raw() -> sa.Select[Any]:
    m, s, joined = _with_source()
    return sa.select(s.c.raw).select_from(joined).where(m.c.id == sa.bindparam("id"))


_RAW = Statement(_raw)
_SOURCE_ID = Statement(lambda: sa.select(schema.messages.c.source_id).where(schema.messages.c.id == sa.bindparam("id")))


async def raw(tx: Tx, message_id: str) -> bytes | None:
    value = await tx.fetchval(_RAW, id=message_id)
    return None if value is None else bytes(value)


async def raw_large(tx: Tx, message_id: str) -> bytes | bytearray | None:
    """`raw` for a big message: the source read in pieces (`Tx.fetch_blob`)."""
    source_id = await tx.fetchval(_SOURCE_ID, id=message_id)
    return None if source_id is None else await tx.fetch_blob("message_sources", "raw", "id", source_id)


_DETAIL = Statement(
    lambda: sa.select(schema.message_details.c.detail).where(schema.message_details.c.message_id == sa.bindparam("id"))
)
_SAVE_DETAIL = upsert(lambda: schema.message_details, keys=["message_id"], update=["detail"])


async def detail_json(tx: Tx, message_id: str) -> str | None:
    value = await tx.fetchval(_DETAIL, id=message_id)
    return None if value is None else str(value)


async def save_detail(tx: Tx, message_id: str, detail: str) -> None:
    """Keep a message's parse; replaces a kept parse of an older version."""
    await tx.execute(_SAVE_DETAIL, message_id=message_id, detail=detail)


@dataclass(frozen=True, slots=True)
class ReceptionData:
    """What the SMTP session knew of a delivery: the MAIL FROM address, the client and its HELO
    (both None for mail stored before they were recorded, or not received over SMTP)."""

    mail_from: str
    client_ip: str | None
    helo: str | None


def _reception() -> sa.Select[Any]:
    m, s, joined = _with_source()
    return sa.select(m.c.sender, s.c.client_ip, s.c.helo).select_from(joined).where(m.c.id == sa.bindparam("id"))


_RECEPTION = Statement(_reception)


async def reception(tx: Tx, message_id: str) -> ReceptionData | None:
    row = await tx.fetchrow(_RECEPTION, id=message_id)
    return None if row is None else ReceptionData(str(row[0]), row[1], row[2])


_CHECKS = Statement(
    lambda: sa.select(schema.message_checks.c.report).where(schema.message_checks.c.message_id == sa.bindparam("id"))
)
_SAVE_CHECKS = upsert(lambda: schema.message_checks, keys=["message_id"], update=["report", "checked_at"])


async def checks_json(tx: Tx, message_id: str) -> str | None:
    value = await tx.fetchval(_CHECKS, id=message_id)
    return None if value is None else str(value)


async def save_checks(tx: Tx, message_id: str, report: str, *, now: float) -> None:
    """Keep a message's check report; replaces the one kept before (a refresh)."""
    await tx.execute(_SAVE_CHECKS, message_id=message_id, report=report, checked_at=now)


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


_RELEASE = Statement(
    lambda: (
        sa.update(schema.message_sources)
        .where(schema.message_sources.c.id == sa.bindparam("id"))
        .values(refs=schema.message_sources.c.refs - 1)
    )
)
_DROP_UNHELD = Statement(
    lambda: sa.delete(schema.message_sources).where(
        schema.message_sources.c.id == sa.bindparam("id"), schema.message_sources.c.refs <= 0
    )
)


async def release_sources(tx: Tx, source_ids: Sequence[str]) -> None:
    """Each id is one copy letting go of its source (repeat an id for several copies); a source
    that no copy holds any more is removed."""
    if not source_ids:
        return
    await tx.executemany(_RELEASE, [{"id": s} for s in source_ids])
    await tx.executemany(_DROP_UNHELD, [{"id": s} for s in sorted(set(source_ids))])


_TO_DELETE = Statement(
    lambda: sa.select(schema.messages.c.size, schema.messages.c.expired, schema.messages.c.source_id).where(
        schema.messages.c.id == sa.bindparam("id"),
        schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
        schema.messages.c.deleted == 0,
    )
)
_SET_DELETED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(deleted=1)
)
_FREE = Statement(
    lambda: (
        sa.update(schema.mailboxes)
        .where(schema.mailboxes.c.id == sa.bindparam("mailbox"))
        .values(used=schema.mailboxes.c.used - sa.bindparam("size"))
    )
)
_DELETE_DETAIL = Statement(
    lambda: sa.delete(schema.message_details).where(schema.message_details.c.message_id == sa.bindparam("id"))
)
_DELETE_CHECKS = Statement(
    lambda: sa.delete(schema.message_checks).where(schema.message_checks.c.message_id == sa.bindparam("id"))
)
_DELETE_TAGS = Statement(
    lambda: sa.delete(schema.message_tags).where(schema.message_tags.c.message_id == sa.bindparam("id"))
)
_DELETE_MESSAGE = Statement(lambda: sa.delete(schema.messages).where(schema.messages.c.id == sa.bindparam("id")))


async def soft_delete(tx: Tx, mailbox_id: str, message_id: str) -> bool:
    """Delete a message; its size leaves `used` unless expiry already took it out. Its bytes go
    with it unless another copy of the same delivery still holds them."""
    row = await tx.fetchrow(_TO_DELETE, id=message_id, mailbox=mailbox_id)
    if row is None:
        return False
    await tx.execute(_SET_DELETED, id=message_id)
    if not row["expired"]:
        await tx.execute(_FREE, size=row["size"], mailbox=mailbox_id)
    await release_sources(tx, [row["source_id"]])
    await tx.execute(_DELETE_DETAIL, id=message_id)
    await tx.execute(_DELETE_CHECKS, id=message_id)
    await tx.execute(_DELETE_TAGS, id=message_id)
    await search.forget(tx, [message_id])
    return True


# The sweep's queries, each served by an index (tests/test_purge.py checks the plans): the writer
# runs them, and every pending delivery waits behind them.
EXPIRE_DUE = Statement(
    lambda: (
        sa.select(schema.messages.c.id, schema.messages.c.mailbox_id, schema.messages.c.size)
        .where(
            schema.messages.c.expired == 0,
            schema.messages.c.deleted == 0,
            schema.messages.c.expires_at <= sa.bindparam("now"),
        )
        .limit(sa.bindparam("limit"))
    )
)
PURGE_DELETED = Statement(
    lambda: sa.select(schema.messages.c.id).where(schema.messages.c.deleted == 1).limit(sa.bindparam("limit"))
)
PURGE_EXPIRED = Statement(
    lambda: (
        sa.select(schema.messages.c.id, schema.messages.c.source_id)
        .where(
            schema.messages.c.expired == 1,
            schema.messages.c.expires_at <= sa.bindparam("before"),
            schema.messages.c.deleted == 0,
        )
        .limit(sa.bindparam("limit"))
    )
)


def due(table: Any) -> sa.ColumnElement[bool]:
    """A message of `table` (`messages` or an alias) past its expiry that the sweep has not yet
    taken out of `used` (the parameter `now`): its bytes count as free already
    (ix_messages_due). Here and in `mailboxes.recipient`."""
    return sa.and_(table.c.expired == 0, table.c.expires_at <= sa.bindparam("now"), table.c.deleted == 0)


_DUE_SIZES = Statement(
    lambda: (
        sa.select(schema.messages.c.mailbox_id, sa.func.sum(schema.messages.c.size))
        .where(one_of(schema.messages.c.mailbox_id, "mailboxes"), due(schema.messages))
        .group_by(schema.messages.c.mailbox_id)
    )
)


async def due_sizes(tx: Tx, mailbox_ids: Sequence[str], *, now: float) -> dict[str, int]:
    """Bytes per mailbox of messages past their expiry that the sweep has not yet taken out of
    `used` (ix_messages_due): `used` minus these is the mailbox's usage at `now`."""
    if not mailbox_ids:
        return {}
    rows = await tx.fetch(_DUE_SIZES, mailboxes=mailbox_ids, now=now)
    return {str(r[0]): int(r[1]) for r in rows}


_SET_EXPIRED = Statement(
    lambda: sa.update(schema.messages).where(schema.messages.c.id == sa.bindparam("id")).values(expired=1)
)


async def expire_due(tx: Tx, *, now: float, limit: int) -> int:
    """Flag messages whose retention ended and take their bytes out of `used`."""
    rows = await tx.fetch(EXPIRE_DUE, now=now, limit=limit)
    if not rows:
        return 0
    await tx.executemany(_SET_EXPIRED, [{"id": r["id"]} for r in rows])
    await tx.executemany(_FREE, [{"size": r["size"], "mailbox": r["mailbox_id"]} for r in rows])
    return len(rows)


async def purge(tx: Tx, *, expired_before: float, limit: int) -> int:
    """Remove for good up to `limit` rows: the soft-deleted ones (which let go of their source
    when deleted), then the expired ones past their grace (which let go now)."""
    deleted = await tx.fetch(PURGE_DELETED, limit=limit)
    ids = [{"id": r["id"]} for r in deleted]
    if len(ids) < limit:
        expired = await tx.fetch(PURGE_EXPIRED, before=expired_before, limit=limit - len(ids))
        await release_sources(tx, [r["source_id"] for r in expired])
        await tx.executemany(_DELETE_DETAIL, [{"id": r["id"]} for r in expired])
        await tx.executemany(_DELETE_CHECKS, [{"id": r["id"]} for r in expired])
        ids.extend({"id": r["id"]} for r in expired)
    if ids:
        await tx.executemany(_DELETE_TAGS, ids)
        await search.forget(tx, [i["id"] for i in ids])
        await tx.executemany(_DELETE_MESSAGE, ids)
    return len(ids)


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
    await tx.execute(_DELETE_TAGS, id=message_id)
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
