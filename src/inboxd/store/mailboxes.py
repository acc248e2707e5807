"""Queries on mailboxes, and the recipient lookup the SMTP server makes for every RCPT."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from inboxd.model import FaultSet, Mailbox
from inboxd.store import message_sweeps, search_index
from inboxd.store.db import Row, Tx
from inboxd.store.faults import fault_set
from inboxd.store.message_sweeps import release_sources
from inboxd.store.sql import Statement, name_statements, one_of, sa, schema, values_of

# The columns of a `Mailbox`, read by name (`mailbox_from`).
MAILBOX = ("id", "user_id", "token_id", "address", "domain_id", "quota", "used", "password_gen", "created_at", "kind")


def mailbox_columns(table: Any = None) -> list[sa.ColumnElement[Any]]:
    """MAILBOX of `mailboxes` (by default) or an alias of it."""
    columns = (schema.mailboxes if table is None else table).c
    return [columns[name] for name in MAILBOX]


def mailbox_from(row: Row) -> Mailbox:
    return Mailbox(
        id=row["id"],
        user_id=row["user_id"],
        token_id=row["token_id"],
        address=row["address"],
        domain_id=row["domain_id"],
        quota=row["quota"],
        used=row["used"],
        password_gen=row["password_gen"],
        created_at=row["created_at"],
        kind=row["kind"],
    )


_INSERT = Statement(lambda: sa.insert(schema.mailboxes).values(values_of(schema.mailboxes, *MAILBOX, "auth_hash")))


async def insert(tx: Tx, mailbox: Mailbox, auth_hash: str) -> None:
    await tx.execute(
        _INSERT,
        id=mailbox.id,
        user_id=mailbox.user_id,
        token_id=mailbox.token_id,
        address=mailbox.address,
        domain_id=mailbox.domain_id,
        quota=mailbox.quota,
        used=mailbox.used,
        password_gen=mailbox.password_gen,
        created_at=mailbox.created_at,
        kind=mailbox.kind,
        auth_hash=auth_hash,
    )


_BY_ID = Statement(lambda: sa.select(*mailbox_columns()).where(schema.mailboxes.c.id == sa.bindparam("id")))
_BY_ADDRESS = Statement(
    lambda: sa.select(*mailbox_columns()).where(schema.mailboxes.c.address == sa.bindparam("address"))
)
_AUTH = Statement(
    lambda: sa.select(*mailbox_columns(), schema.mailboxes.c.auth_hash).where(
        schema.mailboxes.c.address == sa.bindparam("address")
    )
)


async def get(tx: Tx, mailbox_id: str) -> Mailbox | None:
    row = await tx.fetchrow(_BY_ID, id=mailbox_id)
    return None if row is None else mailbox_from(row)


async def get_by_address(tx: Tx, address: str) -> Mailbox | None:
    row = await tx.fetchrow(_BY_ADDRESS, address=address)
    return None if row is None else mailbox_from(row)


async def get_auth(tx: Tx, address: str) -> tuple[Mailbox, str] | None:
    row = await tx.fetchrow(_AUTH, address=address)
    return None if row is None else (mailbox_from(row), row["auth_hash"])


_COUNT_EXISTING = Statement(
    lambda: sa.select(sa.func.count()).select_from(schema.mailboxes).where(one_of(schema.mailboxes.c.id, "ids"))
)
_COUNT_FOR_USER = Statement(
    lambda: (
        sa.select(sa.func.count())
        .select_from(schema.mailboxes)
        .where(schema.mailboxes.c.user_id == sa.bindparam("user_id"), schema.mailboxes.c.kind == "mailbox")
    )
)


async def count_existing(tx: Tx, mailbox_ids: Sequence[str]) -> int:
    """How many of these mailboxes exist."""
    return int(await tx.fetchval(_COUNT_EXISTING, ids=mailbox_ids))


async def count_for_user(tx: Tx, user_id: str) -> int:
    """The user's mailboxes, not counting its SMTP sandbox."""
    return int(await tx.fetchval(_COUNT_FOR_USER, user_id=user_id))


def _list_for_user(after: bool) -> sa.Select[Any]:
    where = [schema.mailboxes.c.user_id == sa.bindparam("user_id"), schema.mailboxes.c.kind == "mailbox"]
    if after:
        before: sa.BindParameter[float] = sa.bindparam("before")
        before_id: sa.BindParameter[str] = sa.bindparam("before_id")
        where.append(
            sa.or_(
                schema.mailboxes.c.created_at < before,
                sa.and_(schema.mailboxes.c.created_at == before, schema.mailboxes.c.id < before_id),
            )
        )
    return (
        sa.select(*mailbox_columns())
        .where(*where)
        .order_by(schema.mailboxes.c.created_at.desc(), schema.mailboxes.c.id.desc())
        .limit(sa.bindparam("limit"))
    )


_FIRST_PAGE = Statement(lambda: _list_for_user(after=False))
_NEXT_PAGE = Statement(lambda: _list_for_user(after=True))


async def list_for_user(tx: Tx, user_id: str, *, limit: int, before: tuple[float, str] | None) -> list[Mailbox]:
    """Newest first, keyset-paged on (created_at, id); the SMTP sandbox is not listed."""
    if before is None:
        rows = await tx.fetch(_FIRST_PAGE, user_id=user_id, limit=limit)
    else:
        rows = await tx.fetch(_NEXT_PAGE, user_id=user_id, before=before[0], before_id=before[1], limit=limit)
    return [mailbox_from(r) for r in rows]


_HELD = Statement(
    lambda: sa.select(schema.messages.c.source_id).where(
        schema.messages.c.mailbox_id == sa.bindparam("mailbox"), schema.messages.c.deleted == 0
    )
)


@cache
def _IDS() -> sa.Select[Any]:
    return sa.select(schema.messages.c.id).where(schema.messages.c.mailbox_id == sa.bindparam("mailbox"))


_DELETE_DETAILS = Statement(
    lambda: sa.delete(schema.message_details).where(schema.message_details.c.message_id.in_(_IDS()))
)
_DELETE_CHECKS = Statement(
    lambda: sa.delete(schema.message_checks).where(schema.message_checks.c.message_id.in_(_IDS()))
)
_DELETE_TAGS = Statement(
    lambda: sa.delete(schema.message_tags).where(schema.message_tags.c.mailbox_id == sa.bindparam("mailbox"))
)
_DELETE_MESSAGES = Statement(
    lambda: sa.delete(schema.messages).where(schema.messages.c.mailbox_id == sa.bindparam("mailbox"))
)
_DELETE = Statement(lambda: sa.delete(schema.mailboxes).where(schema.mailboxes.c.id == sa.bindparam("mailbox")))


async def delete(tx: Tx, mailbox_id: str) -> None:
    """Permanent: the mailbox and every message of it, with bodies and parses."""
    # Copies not yet deleted let go of their sources; a source shared with another mailbox stays.
    held = await tx.fetch(_HELD, mailbox=mailbox_id)
    await release_sources(tx, [r["source_id"] for r in held])
    await tx.execute(_DELETE_DETAILS, mailbox=mailbox_id)
    await tx.execute(_DELETE_CHECKS, mailbox=mailbox_id)
    await search_index.forget_mailbox(tx, mailbox_id)
    await tx.execute(_DELETE_TAGS, mailbox=mailbox_id)
    await tx.execute(_DELETE_MESSAGES, mailbox=mailbox_id)
    await tx.execute(_DELETE, mailbox=mailbox_id)


_SET_AUTH = Statement(
    lambda: (
        sa.update(schema.mailboxes)
        .where(schema.mailboxes.c.id == sa.bindparam("id"))
        .values(auth_hash=sa.bindparam("auth_hash"), password_gen=schema.mailboxes.c.password_gen + 1)
    )
)


async def set_auth(tx: Tx, mailbox_id: str, auth_hash: str) -> None:
    await tx.execute(_SET_AUTH, id=mailbox_id, auth_hash=auth_hash)


@dataclass(frozen=True, slots=True)
class RecipientRow:
    mailbox: Mailbox
    plan: str
    user_status: str
    # For a custom-domain mailbox: whether its domain is still registered and verified.
    domain_live: bool
    # Its SMTP faults, read in the same query: None (the usual case) costs RCPT nothing.
    faults: FaultSet | None = None


def _recipient() -> Any:
    """The RCPT lookup: the mailbox, its owner's plan and status, its domain's state, its faults
    and the bytes of its messages past expiry, in one query."""
    m, u = schema.mailboxes.alias("m"), schema.users.alias("u")
    d, f, x = schema.custom_domains.alias("d"), schema.mailbox_faults.alias("f"), schema.messages.alias("x")
    due = sa.select(sa.func.coalesce(sa.func.sum(x.c.size), 0)).where(x.c.mailbox_id == m.c.id, message_sweeps.due(x))
    return (
        sa.select(
            *mailbox_columns(m),
            u.c.plan,
            u.c.status.label("user_status"),
            d.c.verify_status,
            f.c.version.label("fault_version"),
            f.c.rules.label("fault_rules"),
            due.scalar_subquery().label("due"),
        )
        .select_from(
            m.join(u, u.c.id == m.c.user_id)
            .outerjoin(d, d.c.id == m.c.domain_id)
            .outerjoin(f, f.c.mailbox_id == m.c.id)
        )
        .where(m.c.address == sa.bindparam("address"), m.c.kind == "mailbox")
    )


_RECIPIENT = Statement(_recipient)


async def recipient(tx: Tx, address: str, *, now: float) -> RecipientRow | None:
    """The mailbox an RCPT address names, its owner's plan and status, in one query; `used` is
    the usage at `now`: bytes of messages past their expiry that the sweep has not yet taken
    out count as free (ix_messages_due)."""
    row = await tx.fetchrow(_RECIPIENT, address=address, now=now)
    if row is None:
        return None
    mailbox = mailbox_from(row)
    if row["due"]:
        mailbox = replace(mailbox, used=max(0, mailbox.used - int(row["due"])))
    live = mailbox.domain_id is None or row["verify_status"] == "verified"
    faults = None if row["fault_rules"] is None else fault_set(mailbox.id, row["fault_version"], row["fault_rules"])
    return RecipientRow(
        mailbox=mailbox, plan=row["plan"], user_status=row["user_status"], domain_live=live, faults=faults
    )


name_statements(__name__, globals())
