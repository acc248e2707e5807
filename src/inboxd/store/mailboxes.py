"""Queries on mailboxes, and the recipient lookup the SMTP server makes for every RCPT."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from inboxd.model import FaultSet, Mailbox
from inboxd.store import messages as message_store
from inboxd.store import search
from inboxd.store.db import Row, Tx
from inboxd.store.faults import fault_set
from inboxd.store.messages import release_sources

COLUMNS = "id, user_id, token_id, address, domain_id, quota, used, password_gen, created_at, kind"


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


async def insert(tx: Tx, mailbox: Mailbox, auth_hash: str) -> None:
    await tx.execute(
        f"INSERT INTO mailboxes ({COLUMNS}, auth_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        mailbox.id,
        mailbox.user_id,
        mailbox.token_id,
        mailbox.address,
        mailbox.domain_id,
        mailbox.quota,
        mailbox.used,
        mailbox.password_gen,
        mailbox.created_at,
        mailbox.kind,
        auth_hash,
    )


async def get(tx: Tx, mailbox_id: str) -> Mailbox | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM mailboxes WHERE id = ?", mailbox_id)
    return None if row is None else mailbox_from(row)


async def get_by_address(tx: Tx, address: str) -> Mailbox | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM mailboxes WHERE address = ?", address)
    return None if row is None else mailbox_from(row)


async def get_auth(tx: Tx, address: str) -> tuple[Mailbox, str] | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS}, auth_hash FROM mailboxes WHERE address = ?", address)
    return None if row is None else (mailbox_from(row), row["auth_hash"])


async def count_existing(tx: Tx, mailbox_ids: Sequence[str]) -> int:
    """How many of these mailboxes exist."""
    marks = ", ".join("?" for _ in mailbox_ids)
    return int(await tx.fetchval(f"SELECT COUNT(*) FROM mailboxes WHERE id IN ({marks})", *mailbox_ids))


async def count_for_user(tx: Tx, user_id: str) -> int:
    """The user's mailboxes, not counting its SMTP sandbox."""
    return int(await tx.fetchval("SELECT COUNT(*) FROM mailboxes WHERE user_id = ? AND kind = 'mailbox'", user_id))


async def list_for_user(tx: Tx, user_id: str, *, limit: int, before: tuple[float, str] | None) -> list[Mailbox]:
    """Newest first, keyset-paged on (created_at, id); the SMTP sandbox is not listed."""
    if before is None:
        rows = await tx.fetch(
            f"SELECT {COLUMNS} FROM mailboxes WHERE user_id = ? AND kind = 'mailbox' "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            user_id,
            limit,
        )
    else:
        rows = await tx.fetch(
            f"SELECT {COLUMNS} FROM mailboxes WHERE user_id = ? AND kind = 'mailbox' "
            f"AND (created_at < ? OR (created_at = ? AND id < ?)) ORDER BY created_at DESC, id DESC LIMIT ?",
            user_id,
            before[0],
            before[0],
            before[1],
            limit,
        )
    return [mailbox_from(r) for r in rows]


async def delete(tx: Tx, mailbox_id: str) -> None:
    """Permanent: the mailbox and every message of it, with bodies and parses."""
    # Copies not yet deleted let go of their sources; a source shared with another mailbox stays.
    held = await tx.fetch("SELECT source_id FROM messages WHERE mailbox_id = ? AND deleted = 0", mailbox_id)
    await release_sources(tx, [r["source_id"] for r in held])
    ids = "SELECT id FROM messages WHERE mailbox_id = ?"
    await tx.execute(f"DELETE FROM message_details WHERE message_id IN ({ids})", mailbox_id)
    await tx.execute(f"DELETE FROM message_checks WHERE message_id IN ({ids})", mailbox_id)
    await search.forget_mailbox(tx, mailbox_id)
    await tx.execute("DELETE FROM message_tags WHERE mailbox_id = ?", mailbox_id)
    await tx.execute("DELETE FROM messages WHERE mailbox_id = ?", mailbox_id)
    await tx.execute("DELETE FROM mailboxes WHERE id = ?", mailbox_id)


async def set_auth(tx: Tx, mailbox_id: str, auth_hash: str) -> None:
    await tx.execute(
        "UPDATE mailboxes SET auth_hash = ?, password_gen = password_gen + 1 WHERE id = ?",
        auth_hash,
        mailbox_id,
    )


@dataclass(frozen=True, slots=True)
class RecipientRow:
    mailbox: Mailbox
    plan: str
    user_status: str
    # For a custom-domain mailbox: whether its domain is still registered and verified.
    domain_live: bool
    # Its SMTP faults, read in the same query: None (the usual case) costs RCPT nothing.
    faults: FaultSet | None = None


async def recipient(tx: Tx, address: str, *, now: float) -> RecipientRow | None:
    """The mailbox an RCPT address names, its owner's plan and status, in one query; `used` is
    the usage at `now`: bytes of messages past their expiry that the sweep has not yet taken
    out count as free (ix_messages_due)."""
    row = await tx.fetchrow(
        "SELECT m.id, m.user_id, m.token_id, m.address, m.domain_id, m.quota, m.used, m.password_gen, "
        "m.created_at, m.kind, u.plan, u.status AS user_status, d.verify_status, "
        "f.version AS fault_version, f.rules AS fault_rules, "
        f"(SELECT COALESCE(SUM(x.size), 0) FROM messages x WHERE x.mailbox_id = m.id AND {message_store.DUE}) AS due "
        "FROM mailboxes m JOIN users u ON u.id = m.user_id "
        "LEFT JOIN custom_domains d ON d.id = m.domain_id LEFT JOIN mailbox_faults f ON f.mailbox_id = m.id "
        "WHERE m.address = ? AND m.kind = 'mailbox'",
        now,
        address,
    )
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
