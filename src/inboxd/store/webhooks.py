"""Queries on webhooks, their delivery queue and the deliveries log."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from inboxd.model import Delivery, Webhook
from inboxd.store import users as user_store
from inboxd.store.db import Row, Tx
from inboxd.store.sql import Statement, name_statements, one_of, param, sa, schema, values_of


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
    rows = await tx.fetch(ACTIVE_OF_USERS, users=user_ids)
    return subscribed(rows, event_type)


def active_hooks(users_param: str) -> sa.Select[Any]:
    """The webhooks that fire for the users of the list parameter `users_param`: id, user_id,
    events. Also a part of PostgreSQL's one-statement ingest (`message_ingest.insert_charged`)."""
    w, u = schema.webhooks.alias("w"), schema.users.alias("u")
    return (
        sa.select(w.c.id, w.c.user_id, w.c.events)
        .select_from(w.join(u, u.c.id == w.c.user_id))
        .where(w.c.status == "active", u.c.plan == "pro", u.c.status == "active", one_of(w.c.user_id, users_param))
    )


ACTIVE_OF_USERS = Statement(lambda: active_hooks("users"))


def subscribed(rows: Sequence[Row], event_type: str) -> dict[str, list[str]]:
    """Rows of `active_hooks` subscribed to `event_type`: their ids by user."""
    found: dict[str, list[str]] = {}
    quoted = f'"{event_type}"'
    for row in rows:
        if row["id"] is not None and quoted in row["events"]:
            found.setdefault(row["user_id"], []).append(row["id"])
    return found


INSERT_JOB = Statement(
    lambda: sa.insert(schema.webhook_jobs).values(
        {
            **values_of(
                schema.webhook_jobs, "id", "webhook_id", "event_id", "event_type", "payload", "event_at", "due_at"
            ),
            "attempt": 0,
            "claimed_until": 0,
        }
    )
)


async def insert_jobs(tx: Tx, jobs: Sequence[NewJob]) -> None:
    await tx.executemany(
        INSERT_JOB,
        [
            {
                "id": j.id,
                "webhook_id": j.webhook_id,
                "event_id": j.event_id,
                "event_type": j.event_type,
                "payload": j.payload,
                "event_at": j.event_at,
                "due_at": j.due_at,
            }
            for j in jobs
        ],
    )


# --- webhooks -------------------------------------------------------------------------------


@cache
def _w() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.webhooks.c


@cache
def _d() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.webhook_deliveries.c


@cache
def _j() -> sa.sql.base.ReadOnlyColumnCollection[str, sa.Column[Any]]:
    return schema.webhook_jobs.c


@cache
def _by_id() -> sa.ColumnElement[bool]:
    return _w().id == param(_w().id)


@cache
def _of_user() -> sa.ColumnElement[bool]:
    return _w().user_id == param(_w().user_id)


COUNT_OF_USER = Statement(lambda: sa.select(sa.func.count()).select_from(schema.webhooks).where(_of_user()))
INSERT = Statement(lambda: sa.insert(schema.webhooks).values(values_of(schema.webhooks)))
OF_USER = Statement(
    lambda: sa.select(schema.webhooks).where(_of_user()).order_by(_w().created_at.desc(), _w().id.desc())
)
ONE_OF_USER = Statement(lambda: sa.select(schema.webhooks).where(_by_id(), _of_user()))
DELETE_OF_USER = Statement(lambda: sa.delete(schema.webhooks).where(_by_id(), _of_user()))
DELETE_JOBS_OF = Statement(lambda: sa.delete(schema.webhook_jobs).where(_j().webhook_id == param(_j().webhook_id)))
DELETE_DELIVERIES_OF = Statement(
    lambda: sa.delete(schema.webhook_deliveries).where(_d().webhook_id == param(_d().webhook_id))
)
SECRETS = Statement(lambda: sa.select(_w().id, _w().secret))
SET_SECRET = Statement(lambda: sa.update(schema.webhooks).where(_by_id()).values(secret=param(_w().secret)))
ROTATE = Statement(
    lambda: sa.update(schema.webhooks).where(_by_id(), _of_user()).values(secret=param(_w().secret), failure_count=0)
)
RECENT_DELIVERIES = Statement(
    lambda: (
        sa.select(schema.webhook_deliveries)
        .where(_d().webhook_id == param(_d().webhook_id))
        .order_by(_d().created_at.desc(), _d().attempt.desc(), _d().id.desc())
        .limit(sa.bindparam("limit"))
    )
)


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
    # Concurrent creates of one user queue on the user row, so the cap cannot be overshot.
    await user_store.lock_user(tx, webhook.user_id)
    count = int(await tx.fetchval(COUNT_OF_USER, user_id=webhook.user_id))
    if count >= limit:
        return False
    await tx.execute(
        INSERT,
        id=webhook.id,
        user_id=webhook.user_id,
        url=webhook.url,
        events=json.dumps(list(webhook.events)),
        secret=webhook.secret,
        status=webhook.status,
        failure_count=webhook.failure_count,
        last_triggered_at=webhook.last_triggered_at,
        created_at=webhook.created_at,
    )
    return True


async def list_for_user(tx: Tx, user_id: str) -> list[Webhook]:
    rows = await tx.fetch(OF_USER, user_id=user_id)
    return [webhook_from(r) for r in rows]


async def get_for_user(tx: Tx, webhook_id: str, user_id: str) -> Webhook | None:
    row = await tx.fetchrow(ONE_OF_USER, id=webhook_id, user_id=user_id)
    return None if row is None else webhook_from(row)


async def delete_for_user(tx: Tx, webhook_id: str, user_id: str) -> bool:
    """Remove the webhook with its queued jobs and its deliveries log."""
    if not await tx.execute(DELETE_OF_USER, id=webhook_id, user_id=user_id):
        return False
    await tx.execute(DELETE_JOBS_OF, webhook_id=webhook_id)
    await tx.execute(DELETE_DELIVERIES_OF, webhook_id=webhook_id)
    return True


async def all_secrets(tx: Tx) -> list[tuple[str, str]]:
    """(id, stored secret) of every webhook: for sealing them again after a key change."""
    return [(str(r["id"]), str(r["secret"])) for r in await tx.fetch(SECRETS)]


async def set_secret(tx: Tx, webhook_id: str, *, secret: str) -> None:
    await tx.execute(SET_SECRET, secret=secret, id=webhook_id)


async def rotate_for_user(tx: Tx, webhook_id: str, user_id: str, *, secret: str) -> bool:
    """A new secret, and a fresh start of the failure count (a disabled webhook stays disabled)."""
    changed = await tx.execute(ROTATE, secret=secret, id=webhook_id, user_id=user_id)
    return changed > 0


async def recent_deliveries(tx: Tx, webhook_id: str, *, limit: int) -> list[Delivery]:
    rows = await tx.fetch(RECENT_DELIVERIES, webhook_id=webhook_id, limit=limit)
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


@cache
def _jj() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.webhook_jobs.alias("j")


@cache
def _jw() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.webhooks.alias("w")


@cache
def _ju() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.users.alias("u")


# Due jobs with what their attempt needs; PostgreSQL's workers skip each other's (SKIP LOCKED),
# SQLite's compiler writes no lock (its one writer runs claims one after another).
DUE = Statement(
    lambda: (
        sa.select(
            _jj().c.id,
            _jj().c.webhook_id,
            _jj().c.event_id,
            _jj().c.event_type,
            _jj().c.payload,
            _jj().c.attempt,
            _jj().c.event_at,
            _jw().c.url,
            _jw().c.secret,
            _jw().c.status,
            _ju().c.status.label("user_status"),
        )
        .select_from(
            _jj().outerjoin(_jw(), _jw().c.id == _jj().c.webhook_id).outerjoin(_ju(), _ju().c.id == _jw().c.user_id)
        )
        .where(_jj().c.due_at <= sa.bindparam("now"), _jj().c.claimed_until <= sa.bindparam("now"))
        .order_by(_jj().c.due_at)
        .limit(sa.bindparam("limit"))
        .with_for_update(of=_jj(), skip_locked=True)
    )
)
DELETE_JOB = Statement(lambda: sa.delete(schema.webhook_jobs).where(_j().id == param(_j().id)))
SET_CLAIM = Statement(
    lambda: (
        sa.update(schema.webhook_jobs).where(_j().id == param(_j().id)).values(claimed_until=param(_j().claimed_until))
    )
)
NEXT_DUE = Statement(
    lambda: sa.select(_j().due_at).where(_j().claimed_until <= sa.bindparam("now")).order_by(_j().due_at).limit(1)
)
RELEASE = Statement(lambda: sa.update(schema.webhook_jobs).where(_j().id == param(_j().id)).values(claimed_until=0))


async def claim_due(tx: Tx, *, now: float, limit: int, lease: float) -> Claim:
    """Claim up to `limit` due jobs until `now + lease`.

    On PostgreSQL concurrent workers skip each other's rows (SKIP LOCKED); on SQLite the one
    writer thread runs claims one after another, so the read-then-update cannot race. A job whose
    claim lapsed (its worker died mid-attempt) is due again. Jobs whose webhook is gone or
    disabled, or whose user is suspended, are dropped here.
    """
    rows = await tx.fetch(DUE, now=now, limit=limit)
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
        await tx.executemany(DELETE_JOB, [{"id": i} for i in dead])
    if jobs:
        await tx.executemany(SET_CLAIM, [{"claimed_until": now + lease, "id": j.id} for j in jobs])
    next_due = await tx.fetchval(NEXT_DUE, now=now)
    return Claim(jobs=jobs, next_due=next_due)


async def next_due(tx: Tx, *, now: float) -> float | None:
    """When the earliest unclaimed job falls due (None: none waits); a read, for idle polling."""
    due: float | None = await tx.fetchval(NEXT_DUE, now=now)
    return due


async def release(tx: Tx, job_ids: Sequence[str]) -> None:
    """Give claims back (an attempt cut short by shutdown): due again at once after a restart."""
    await tx.executemany(RELEASE, [{"id": i} for i in job_ids])


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished attempt of a claimed job, and what follows from it."""

    job: ClaimedJob
    delivery: Delivery
    # For a failure: when to try again (None: that was the last attempt, drop the job).
    retry_at: float | None


SUCCEEDED = Statement(
    lambda: (
        sa.update(schema.webhooks)
        .where(_by_id())
        .values(failure_count=0, last_triggered_at=param(_w().last_triggered_at))
    )
)
FAILED = Statement(lambda: sa.update(schema.webhooks).where(_by_id()).values(failure_count=_w().failure_count + 1))
INSERT_DELIVERY = Statement(lambda: sa.insert(schema.webhook_deliveries).values(values_of(schema.webhook_deliveries)))
FAILURES = Statement(lambda: sa.select(_w().failure_count, _w().status).where(_by_id()))
DISABLE = Statement(lambda: sa.update(schema.webhooks).where(_by_id()).values(status="disabled"))
RETRY = Statement(
    lambda: (
        sa.update(schema.webhook_jobs)
        .where(_j().id == param(_j().id))
        .values(attempt=param(_j().attempt), due_at=param(_j().due_at), claimed_until=0)
    )
)
# The `created_at` of the newest delivery past the `keep` newest: that one and older go.
PRUNE_CUTOFF = Statement(
    lambda: (
        sa.select(_d().created_at)
        .where(_d().webhook_id == param(_d().webhook_id))
        .order_by(_d().created_at.desc())
        .limit(1)
        .offset(sa.bindparam("keep"))
    )
)
PRUNE = Statement(
    lambda: sa.delete(schema.webhook_deliveries).where(
        _d().webhook_id == param(_d().webhook_id), _d().created_at <= sa.bindparam("cutoff")
    )
)
QUEUE_DEPTH = Statement(lambda: sa.select(sa.func.count()).select_from(schema.webhook_jobs))


async def record_attempt(tx: Tx, attempt: Attempt, *, disable_after: int, keep: int) -> str:
    """Log the attempt and apply its consequences; returns what happened to the webhook:
    "ok", "failed", "disabled" or "gone" (deleted meanwhile: nothing is logged).
    """
    job, d = attempt.job, attempt.delivery
    success = d.error is None
    if success:
        changed = await tx.execute(SUCCEEDED, last_triggered_at=d.created_at, id=job.webhook_id)
    else:
        changed = await tx.execute(FAILED, id=job.webhook_id)
    if not changed:
        await tx.execute(DELETE_JOB, id=job.id)
        return "gone"
    await tx.execute(
        INSERT_DELIVERY,
        id=d.id,
        webhook_id=d.webhook_id,
        event_type=d.event_type,
        event_id=d.event_id,
        status_code=d.status_code,
        error=d.error,
        attempt=d.attempt,
        duration_ms=d.duration_ms,
        created_at=d.created_at,
    )
    await _prune_deliveries(tx, job.webhook_id, keep=keep)
    if success:
        await tx.execute(DELETE_JOB, id=job.id)
        return "ok"
    row = await tx.fetchrow(FAILURES, id=job.webhook_id)
    assert row is not None
    if row["failure_count"] >= disable_after:
        await tx.execute(DISABLE, id=job.webhook_id)
        await tx.execute(DELETE_JOBS_OF, webhook_id=job.webhook_id)
        return "disabled"
    if attempt.retry_at is None:
        await tx.execute(DELETE_JOB, id=job.id)
    else:
        await tx.execute(RETRY, attempt=d.attempt, due_at=attempt.retry_at, id=job.id)
    return "failed"


async def _prune_deliveries(tx: Tx, webhook_id: str, *, keep: int) -> None:
    """Keep the log to what the API shows (the newest `keep`), so it never grows without bound."""
    cutoff = await tx.fetchval(PRUNE_CUTOFF, webhook_id=webhook_id, keep=keep)
    if cutoff is not None:
        await tx.execute(PRUNE, webhook_id=webhook_id, cutoff=cutoff)


async def queue_depth(tx: Tx) -> int:
    """Webhook jobs waiting, due now or scheduled for a retry (the metrics' queue depth)."""
    return int(await tx.fetchval(QUEUE_DEPTH))


name_statements(__name__, globals())
