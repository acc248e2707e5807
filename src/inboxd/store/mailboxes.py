"""Queries on mailboxes, and the recipient lookup the SMTP server makes for every RCPT."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from inboxd.model import FaultSet, Mailbox
from inboxd.store import messages as message_store
from inboxd.store import search
from inboxd.store.db import Row, Tx
from inboxd.store.faults import fault_set
from inboxd.store.messages import release_sources
from inboxd.store.schema import (
    custom_domains,
    mailbox_faults,
    mailboxes,
    message_checks,
    message_details,
    message_tags,
    messages,
    users,
)
from inboxd.store.sql import Statement, one_of, values_of

# The columns of a `Mailbox`, read by name (`mailbox_from`).
MAILBOX = ("id", "user_id", "token_id", "address", "domain_id", "quota", "used", "password_gen", "created_at", "kind")
# MAILBOX as SQL, for the modules whose queries are still SQL strings (store/sandboxes.py); it
# goes when they are `Statement`s.
COLUMNS = ", ".join(MAILBOX)


def mailbox_columns(table: Any = mailboxes) -> list[sa.ColumnElement[Any]]:
    """MAILBOX of `mailboxes` or an alias of it."""
    return [table.c[name] for name in MAILBOX]


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


_INSERT = Statement(sa.insert(mailboxes).values(values_of(mailboxes, *MAILBOX, "auth_hash")))


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


_BY_ID = Statement(sa.select(*mailbox_columns()).where(mailboxes.c.id == sa.bindparam("id")))
_BY_ADDRESS = Statement(sa.select(*mailbox_columns()).where(mailboxes.c.address == sa.bindparam("address")))
_AUTH = Statement(
    sa.select(*mailbox_columns(), mailboxes.c.auth_hash).where(mailboxes.c.address == sa.bindparam("address"))
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


_COUNT_EXISTING = Statement(sa.select(sa.func.count()).select_from(mailboxes).where(one_of(mailboxes.c.id, "ids")))
_COUNT_FOR_USER = Statement(
    sa.select(sa.func.count())
    .select_from(mailboxes)
    .where(mailboxes.c.user_id == sa.bindparam("user_id"), mailboxes.c.kind == "mailbox")
)


async def count_existing(tx: Tx, mailbox_ids: Sequence[str]) -> int:
    """How many of these mailboxes exist."""
    return int(await tx.fetchval(_COUNT_EXISTING, ids=mailbox_ids))


async def count_for_user(tx: Tx, user_id: str) -> int:
    """The user's mailboxes, not counting its SMTP sandbox."""
    return int(await tx.fetchval(_COUNT_FOR_USER, user_id=user_id))


def _list_for_user(after: bool) -> Statement:
    where = [mailboxes.c.user_id == sa.bindparam("user_id"), mailboxes.c.kind == "mailbox"]
    if after:
        before: sa.BindParameter[float] = sa.bindparam("before")
        before_id: sa.BindParameter[str] = sa.bindparam("before_id")
        where.append(
            sa.or_(
                mailboxes.c.created_at < before, sa.and_(mailboxes.c.created_at == before, mailboxes.c.id < before_id)
            )
        )
    return Statement(
        sa.select(*mailbox_columns())
        .where(*where)
        .order_by(mailboxes.c.created_at.desc(), mailboxes.c.id.desc())
        .limit(sa.bindparam("limit"))
    )


_FIRST_PAGE = _list_for_user(after=False)
_NEXT_PAGE = _list_for_user(after=True)


async def list_for_user(tx: Tx, user_id: str, *, limit: int, before: tuple[float, str] | None) -> list[Mailbox]:
    """Newest first, keyset-paged on (created_at, id); the SMTP sandbox is not listed."""
    if before is None:
        rows = await tx.fetch(_FIRST_PAGE, user_id=user_id, limit=limit)
    else:
        rows = await tx.fetch(_NEXT_PAGE, user_id=user_id, before=before[0], before_id=before[1], limit=limit)
    return [mailbox_from(r) for r in rows]


_HELD = Statement(
    sa.select(messages.c.source_id).where(messages.c.mailbox_id == sa.bindparam("mailbox"), messages.c.deleted == 0)
)
_IDS = sa.select(messages.c.id).where(messages.c.mailbox_id == sa.bindparam("mailbox"))
_DELETE_DETAILS = Statement(sa.delete(message_details).where(message_details.c.message_id.in_(_IDS)))
_DELETE_CHECKS = Statement(sa.delete(message_checks).where(message_checks.c.message_id.in_(_IDS)))
_DELETE_TAGS = Statement(sa.delete(message_tags).where(message_tags.c.mailbox_id == sa.bindparam("mailbox")))
_DELETE_MESSAGES = Statement(sa.delete(messages).where(messages.c.mailbox_id == sa.bindparam("mailbox")))
_DELETE = Statement(sa.delete(mailboxes).where(mailboxes.c.id == sa.bindparam("mailbox")))


async def delete(tx: Tx, mailbox_id: str) -> None:
    """Permanent: the mailbox and every message of it, with bodies and parses."""
    # Copies not yet deleted let go of their sources; a source shared with another mailbox stays.
    held = await tx.fetch(_HELD, mailbox=mailbox_id)
    await release_sources(tx, [r["source_id"] for r in held])
    await tx.execute(_DELETE_DETAILS, mailbox=mailbox_id)
    await tx.execute(_DELETE_CHECKS, mailbox=mailbox_id)
    await search.forget_mailbox(tx, mailbox_id)
    await tx.execute(_DELETE_TAGS, mailbox=mailbox_id)
    await tx.execute(_DELETE_MESSAGES, mailbox=mailbox_id)
    await tx.execute(_DELETE, mailbox=mailbox_id)


_SET_AUTH = Statement(
    sa.update(mailboxes)
    .where(mailboxes.c.id == sa.bindparam("id"))
    .values(auth_hash=sa.bindparam("auth_hash"), password_gen=mailboxes.c.password_gen + 1)
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
    m, u = mailboxes.alias("m"), users.alias("u")
    d, f, x = custom_domains.alias("d"), mailbox_faults.alias("f"), messages.alias("x")
    due = sa.select(sa.func.coalesce(sa.func.sum(x.c.size), 0)).where(x.c.mailbox_id == m.c.id, message_store.due(x))
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


_RECIPIENT = Statement(_recipient())


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
