"""The ingest's writes of messages: the stored copies and their sources, the quota charge, and
the tag rows (also what `message_marks.set_tags` and `message_sweeps` write)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inboxd.model import MessageSummary
from inboxd.store import webhooks as webhook_store
from inboxd.store.db import Tx
from inboxd.store.messages import SUMMARY
from inboxd.store.sql import Statement, arrays, insert_rows, name_statements, rows_insert, sa, schema, values_of


def tag_rows(items: Sequence[MessageSummary]) -> list[dict[str, Any]]:
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


_SOURCE_COLUMNS = ("id", "raw", "refs", "client_ip", "helo")
_COPY_COLUMNS = (*SUMMARY, "source_id", "envelope")
_INSERT_SOURCES = rows_insert("message_sources", _SOURCE_COLUMNS)
_INSERT_COPIES = rows_insert("messages", _COPY_COLUMNS)
INSERT_TAG = Statement(lambda: sa.insert(schema.message_tags).values(values_of(schema.message_tags)))
DELETE_TAGS = Statement(
    lambda: sa.delete(schema.message_tags).where(schema.message_tags.c.message_id == sa.bindparam("id"))
)


async def insert_many(tx: Tx, items: Sequence[NewMessage]) -> None:
    """Insert stored copies (their sizes are charged by `charge`), each source once: SQLite's
    (PostgreSQL's ingest is `insert_charged`'s one statement)."""
    refs: dict[str, int] = {}
    firsts: dict[str, NewMessage] = {}
    for m in items:
        refs[m.source_id] = refs.get(m.source_id, 0) + 1
        firsts.setdefault(m.source_id, m)
    await insert_rows(
        tx,
        _INSERT_SOURCES,
        _SOURCE_COLUMNS,
        [
            (source_id, firsts[source_id].raw_compressed, count, firsts[source_id].client_ip, firsts[source_id].helo)
            for source_id, count in refs.items()
        ],
    )
    await insert_rows(
        tx,
        _INSERT_COPIES,
        _COPY_COLUMNS,
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
    tagged = tag_rows([m.summary for m in items])
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
    trip; on SQLite, where a statement costs no round trip, a statement for each mailbox's
    charge, then the sources, the copies and the webhooks."""
    if tx.dialect != "postgresql":
        # Each mailbox charged once with what all its copies take: that fits exactly when each
        # copy's charge in turn would (sizes are never negative), in a statement a mailbox.
        for mailbox_id, size in _sizes(items).items():
            if not await charge(tx, mailbox_id, size):
                return None
        await insert_many(tx, items)
        return await webhook_store.active_ids_for_users(tx, hook_users, event_type)
    sizes = _sizes(items)
    refs: dict[str, int] = {}
    firsts: dict[str, NewMessage] = {}
    for m in items:
        refs[m.source_id] = refs.get(m.source_id, 0) + 1
        firsts.setdefault(m.source_id, m)
    copies = [m.summary for m in items]
    tagged = tag_rows(copies)
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


def _sizes(items: Sequence[NewMessage]) -> dict[str, int]:
    """The bytes `items` charge to each mailbox."""
    sizes: dict[str, int] = {}
    for m in items:
        sizes[m.summary.mailbox_id] = sizes.get(m.summary.mailbox_id, 0) + m.summary.size
    return sizes


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


name_statements(__name__, globals())
