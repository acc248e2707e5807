"""Reads of messages: the summary of a row, list pages, one message, its raw source, its kept
parse, reception data and check report. The ingest's writes are `message_ingest.py`, the marks
and tags `message_marks.py`, deletion, expiry and purge `message_sweeps.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inboxd.model import NO_FILTER, MessageFilter, MessageSummary
from inboxd.store import search
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Shapes, Statement, name_statements, sa, schema, upsert

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


def _summary_columns(table: Any) -> list[sa.ColumnElement[Any]]:
    return [table.c[name] for name in SUMMARY]


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


name_statements(__name__, globals())
