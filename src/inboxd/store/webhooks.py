"""Queries on webhooks, their delivery queue and the deliveries log."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from inboxd.model import Delivery, Webhook
from inboxd.store.db import Row, Tx


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    webhook_id: str
    event_id: str
    event_type: str
    payload: str
    event_at: float
    due_at: float


async def active_ids_for_users(tx: Tx, user_ids: Sequence[str], event_type: str) -> dict[str, list[str]]:
    """Active webhooks subscribed to `event_type`, by user. `events` is a JSON array of names.

    Webhooks are a Pro feature: a user downgraded to free keeps them listed but they stop firing;
    a suspended user's fire neither.
    """
    if not user_ids:
        return {}
    marks = ", ".join("?" for _ in user_ids)
    rows = await tx.fetch(ACTIVE_FOR_USERS.format(users=f"IN ({marks})"), *user_ids)
    return subscribed(rows, event_type)


# The webhooks that fire for the users named by `{users}` (a condition on `w.user_id`): id,
# user_id, events. Also a part of PostgreSQL's one-statement ingest (`messages.insert_charged`).
ACTIVE_FOR_USERS = (
    "SELECT w.id, w.user_id, w.events FROM webhooks w JOIN users u ON u.id = w.user_id "
    "WHERE w.status = 'active' AND u.plan = 'pro' AND u.status = 'active' AND w.user_id {users}"
)


def subscribed(rows: Sequence[Row], event_type: str) -> dict[str, list[str]]:
    """Rows of `ACTIVE_FOR_USERS` subscribed to `event_type`: their ids by user."""
    found: dict[str, list[str]] = {}
    quoted = f'"{event_type}"'
    for row in rows:
        if row["id"] is not None and quoted in row["events"]:
            found.setdefault(row["user_id"], []).append(row["id"])
    return found


async def insert_jobs(tx: Tx, jobs: Sequence[NewJob]) -> None:
    await tx.executemany(
        "INSERT INTO webhook_jobs (id, webhook_id, event_id, event_type, payload, attempt, event_at, due_at, "
        "claimed_until) VALUES (?, ?, ?, ?, ?, 0, ?, ?, 0)",
        [(j.id, j.webhook_id, j.event_id, j.event_type, j.payload, j.event_at, j.due_at) for j in jobs],
    )


# --- webhooks -------------------------------------------------------------------------------

COLUMNS = "id, user_id, url, events, secret, status, failure_count, last_triggered_at, created_at"
DELIVERY_COLUMNS = "id, webhook_id, event_type, event_id, status_code, error, attempt, duration_ms, created_at"


def webhook_from(row: Row) -> Webhook:
    return Webhook(
        id=row["id"],
        user_id=row["user_id"],
        url=row["url"],
        events=tuple(json.loads(row["events"])),
        secret=row["secret"],
        status=row["status"],
        failure_count=row["failure_count"],
        last_triggered_at=row["last_triggered_at"],
        created_at=row["created_at"],
    )


def delivery_from(row: Row) -> Delivery:
    return Delivery(
        id=row["id"],
        webhook_id=row["webhook_id"],
        event_type=row["event_type"],
        event_id=row["event_id"],
        status_code=row["status_code"],
        error=row["error"],
        attempt=row["attempt"],
        duration_ms=row["duration_ms"],
        created_at=row["created_at"],
    )


async def insert_if_below(tx: Tx, webhook: Webhook, *, limit: int) -> bool:
    """Insert unless the user already has `limit` webhooks; the count and insert share one lock."""
    if tx.dialect == "postgresql":
        # Concurrent creates of one user queue on the user row, so the cap cannot be overshot.
        await tx.execute("SELECT id FROM users WHERE id = ? FOR UPDATE", webhook.user_id)
    count = int(await tx.fetchval("SELECT COUNT(*) FROM webhooks WHERE user_id = ?", webhook.user_id))
    if count >= limit:
        return False
    await tx.execute(
        f"INSERT INTO webhooks ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        webhook.id,
        webhook.user_id,
        webhook.url,
        json.dumps(list(webhook.events)),
        webhook.secret,
        webhook.status,
        webhook.failure_count,
        webhook.last_triggered_at,
        webhook.created_at,
    )
    return True


async def list_for_user(tx: Tx, user_id: str) -> list[Webhook]:
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM webhooks WHERE user_id = ? ORDER BY created_at DESC, id DESC", user_id
    )
    return [webhook_from(r) for r in rows]


async def get_for_user(tx: Tx, webhook_id: str, user_id: str) -> Webhook | None:
    row = await tx.fetchrow(f"SELECT {COLUMNS} FROM webhooks WHERE id = ? AND user_id = ?", webhook_id, user_id)
    return None if row is None else webhook_from(row)


async def delete_for_user(tx: Tx, webhook_id: str, user_id: str) -> bool:
    """Remove the webhook with its queued jobs and its deliveries log."""
    if not await tx.execute("DELETE FROM webhooks WHERE id = ? AND user_id = ?", webhook_id, user_id):
        return False
    await tx.execute("DELETE FROM webhook_jobs WHERE webhook_id = ?", webhook_id)
    await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", webhook_id)
    return True


async def all_secrets(tx: Tx) -> list[tuple[str, str]]:
    """(id, stored secret) of every webhook: for sealing them again after a key change."""
    return [(str(r["id"]), str(r["secret"])) for r in await tx.fetch("SELECT id, secret FROM webhooks")]


async def set_secret(tx: Tx, webhook_id: str, *, secret: str) -> None:
    await tx.execute("UPDATE webhooks SET secret = ? WHERE id = ?", secret, webhook_id)


async def rotate_for_user(tx: Tx, webhook_id: str, user_id: str, *, secret: str) -> bool:
    """A new secret, and a fresh start of the failure count (a disabled webhook stays disabled)."""
    changed = await tx.execute(
        "UPDATE webhooks SET secret = ?, failure_count = 0 WHERE id = ? AND user_id = ?", secret, webhook_id, user_id
    )
    return changed > 0


async def recent_deliveries(tx: Tx, webhook_id: str, *, limit: int) -> list[Delivery]:
    rows = await tx.fetch(
        f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = ? "
        "ORDER BY created_at DESC, attempt DESC, id DESC LIMIT ?",
        webhook_id,
        limit,
    )
    return [delivery_from(r) for r in rows]


# --- the delivery queue ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A due job with what its attempt needs, read at claim time (so a rotation applies at once)."""

    id: str
    webhook_id: str
    event_id: str
    event_type: str
    payload: str
    attempt: int
    event_at: float
    url: str
    secret: str


@dataclass(frozen=True, slots=True)
class Claim:
    jobs: list[ClaimedJob]
    # When the next unclaimed job falls due (None: the queue holds no unclaimed job).
    next_due: float | None


async def claim_due(tx: Tx, *, now: float, limit: int, lease: float) -> Claim:
    """Claim up to `limit` due jobs until `now + lease`.

    On PostgreSQL concurrent workers skip each other's rows (SKIP LOCKED); on SQLite the one
    writer thread runs claims one after another, so the read-then-update cannot race. A job whose
    claim lapsed (its worker died mid-attempt) is due again. Jobs whose webhook is gone or
    disabled, or whose user is suspended, are dropped here.
    """
    lock = " FOR UPDATE OF j SKIP LOCKED" if tx.dialect == "postgresql" else ""
    rows = await tx.fetch(
        "SELECT j.id, j.webhook_id, j.event_id, j.event_type, j.payload, j.attempt, j.event_at, "
        "w.url, w.secret, w.status, u.status AS user_status FROM webhook_jobs j "
        "LEFT JOIN webhooks w ON w.id = j.webhook_id LEFT JOIN users u ON u.id = w.user_id "
        f"WHERE j.due_at <= ? AND j.claimed_until <= ? ORDER BY j.due_at LIMIT ?{lock}",
        now,
        now,
        limit,
    )
    jobs: list[ClaimedJob] = []
    dead: list[str] = []
    for row in rows:
        if row["status"] != "active" or row["user_status"] != "active":
            dead.append(row["id"])
            continue
        jobs.append(
            ClaimedJob(
                id=row["id"],
                webhook_id=row["webhook_id"],
                event_id=row["event_id"],
                event_type=row["event_type"],
                payload=row["payload"],
                attempt=row["attempt"],
                event_at=row["event_at"],
                url=row["url"],
                secret=row["secret"],
            )
        )
    if dead:
        await tx.executemany("DELETE FROM webhook_jobs WHERE id = ?", [(i,) for i in dead])
    if jobs:
        await tx.executemany(
            "UPDATE webhook_jobs SET claimed_until = ? WHERE id = ?", [(now + lease, j.id) for j in jobs]
        )
    next_due = await tx.fetchval(
        "SELECT due_at FROM webhook_jobs WHERE claimed_until <= ? ORDER BY due_at LIMIT 1", now
    )
    return Claim(jobs=jobs, next_due=next_due)


async def next_due(tx: Tx, *, now: float) -> float | None:
    """When the earliest unclaimed job falls due (None: none waits); a read, for idle polling."""
    due: float | None = await tx.fetchval(
        "SELECT due_at FROM webhook_jobs WHERE claimed_until <= ? ORDER BY due_at LIMIT 1", now
    )
    return due


async def release(tx: Tx, job_ids: Sequence[str]) -> None:
    """Give claims back (an attempt cut short by shutdown): due again at once after a restart."""
    await tx.executemany("UPDATE webhook_jobs SET claimed_until = 0 WHERE id = ?", [(i,) for i in job_ids])


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished attempt of a claimed job, and what follows from it."""

    job: ClaimedJob
    delivery: Delivery
    # For a failure: when to try again (None: that was the last attempt, drop the job).
    retry_at: float | None


async def record_attempt(tx: Tx, attempt: Attempt, *, disable_after: int, keep: int) -> str:
    """Log the attempt and apply its consequences; returns what happened to the webhook:
    "ok", "failed", "disabled" or "gone" (deleted meanwhile: nothing is logged).
    """
    job, d = attempt.job, attempt.delivery
    success = d.error is None
    if success:
        changed = await tx.execute(
            "UPDATE webhooks SET failure_count = 0, last_triggered_at = ? WHERE id = ?", d.created_at, job.webhook_id
        )
    else:
        changed = await tx.execute("UPDATE webhooks SET failure_count = failure_count + 1 WHERE id = ?", job.webhook_id)
    if not changed:
        await tx.execute("DELETE FROM webhook_jobs WHERE id = ?", job.id)
        return "gone"
    await tx.execute(
        f"INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        d.id,
        d.webhook_id,
        d.event_type,
        d.event_id,
        d.status_code,
        d.error,
        d.attempt,
        d.duration_ms,
        d.created_at,
    )
    await _prune_deliveries(tx, job.webhook_id, keep=keep)
    if success:
        await tx.execute("DELETE FROM webhook_jobs WHERE id = ?", job.id)
        return "ok"
    row = await tx.fetchrow("SELECT failure_count, status FROM webhooks WHERE id = ?", job.webhook_id)
    assert row is not None
    if row["failure_count"] >= disable_after:
        await tx.execute("UPDATE webhooks SET status = 'disabled' WHERE id = ?", job.webhook_id)
        await tx.execute("DELETE FROM webhook_jobs WHERE webhook_id = ?", job.webhook_id)
        return "disabled"
    if attempt.retry_at is None:
        await tx.execute("DELETE FROM webhook_jobs WHERE id = ?", job.id)
    else:
        await tx.execute(
            "UPDATE webhook_jobs SET attempt = ?, due_at = ?, claimed_until = 0 WHERE id = ?",
            d.attempt,
            attempt.retry_at,
            job.id,
        )
    return "failed"


async def _prune_deliveries(tx: Tx, webhook_id: str, *, keep: int) -> None:
    """Keep the log to what the API shows (the newest `keep`), so it never grows without bound."""
    cutoff = await tx.fetchval(
        "SELECT created_at FROM webhook_deliveries WHERE webhook_id = ? ORDER BY created_at DESC LIMIT 1 OFFSET ?",
        webhook_id,
        keep,
    )
    if cutoff is not None:
        await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ? AND created_at <= ?", webhook_id, cutoff)


async def queue_depth(tx: Tx) -> int:
    """Webhook jobs waiting, due now or scheduled for a retry (the metrics' queue depth)."""
    return int(await tx.fetchval("SELECT count(*) FROM webhook_jobs"))
