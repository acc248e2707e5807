"""The webhook delivery worker: claim due jobs, POST each one signed, record every attempt.

Jobs live in `webhook_jobs`, written in the same transaction as the message that caused them,
so nothing is lost between SMTP and here. The worker wakes at once when ingest queued jobs
(`IngestService.on_jobs_queued`), when an attempt finished, when the next retry falls due, and
at least every `webhook_poll_interval` (jobs queued by another process, lapsed claims).

A claim holds a job for `webhook_lease` seconds: if the process dies mid-attempt the job is due
again once the lease lapsed. At stop, attempts in flight get `webhook_shutdown_grace` seconds;
the rest are cut short and their claims given back, so a restart retries them at once.

Attempts run as their own tasks, at most `webhook_concurrency` at a time, so delivery never
holds up SMTP ingest; a failure is retried per `webhook_retry_schedule` (seconds after the
event, ±10 % jitter), with the same event id and a fresh timestamp and signature.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from inboxd.config import Settings
from inboxd.keyring import Keyring
from inboxd.metrics import Metrics
from inboxd.model import Delivery
from inboxd.store import webhooks as store
from inboxd.store.db import Database
from inboxd.tasks import cancel_and_wait

if TYPE_CHECKING:
    from inboxd.worker.sender import WebhookSender

log = logging.getLogger("inboxd.webhooks")
DELIVERIES_KEPT = 100
JITTER = 0.1
# Shortest wait when due jobs exist but were skipped (another worker holds them).
_MIN_WAIT = 0.05


class WebhookWorker:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        keyring: Keyring,
    ) -> None:
        self._db = db
        self._keyring = keyring
        self._metrics = metrics or Metrics()
        # Opened at the first attempt: a process whose users have no webhooks never imports the
        # HTTP client (aiohttp) at all.
        self._sender: WebhookSender | None = None
        self._settings = settings
        self._clock = clock
        self._random = rng or random.Random()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: dict[asyncio.Task[None], str] = {}
        # When the loop plans to look at the queue next (clock time); whether ingest queued jobs.
        self._wake_at = 0.0
        self._queued = True
        self._stopping = False
        # A claim must outlast the attempt it covers, or a second worker could take the job meanwhile.
        self._lease = max(settings.webhook_lease, settings.webhook_timeout + 1.0)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Claim due jobs now (ingest calls this after a commit that queued some)."""
        self._queued = True
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            # Let a claim under way finish (its jobs start and are handled below) rather than
            # cancel it after the database took it: those jobs would wait out their lease.
            self._stopping = True
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._task, self._settings.webhook_shutdown_grace)
            self._task = None
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self._settings.webhook_shutdown_grace)
        cut = dict(self._inflight)
        await cancel_and_wait(cut)
        if cut:
            with contextlib.suppress(Exception):
                await self._db.write(partial(store.release, job_ids=list(cut.values())))
        if self._sender is not None:
            await self._sender.close()
            self._sender = None

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            claim, self._queued = self._queued, False
            delay = self._settings.webhook_poll_interval
            try:
                delay = await self._round(claim=claim)
            except Exception:
                log.exception("claiming webhook jobs failed; trying again shortly")
            self._wake_at = self._clock() + delay
            if delay > 0 and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()

    async def _round(self, *, claim: bool) -> float:
        """Start attempts for due jobs; returns how long to wait before looking again.

        After ingest queued jobs it claims straight away; otherwise (a timer, a retry rescheduled,
        a slot freed) it first looks with a read, off the writer, so an idle queue costs the
        writer nothing.
        """
        poll = self._settings.webhook_poll_interval
        free = self._settings.webhook_concurrency - len(self._inflight)
        if free <= 0:
            return poll  # the next finishing attempt wakes the loop
        now = self._clock()
        if not claim:
            next_due = await self._db.read(partial(store.next_due, now=now))
            if next_due is None or next_due > now:
                return self._wait_for(next_due)
        found = await self._db.write(partial(store.claim_due, now=now, limit=free, lease=self._lease))
        loop = asyncio.get_running_loop()
        for job in found.jobs:
            task = loop.create_task(self._attempt(job))
            self._inflight[task] = job.id
        if found.next_due is not None and found.next_due <= self._clock() and len(found.jobs) < free:
            return _MIN_WAIT  # due jobs were skipped: another worker holds them
        return self._wait_for(found.next_due)

    def _wait_for(self, next_due: float | None) -> float:
        poll = self._settings.webhook_poll_interval
        return poll if next_due is None else max(0.0, min(poll, next_due - self._clock()))

    def _open_sender(self) -> WebhookSender:
        if self._sender is None:
            from inboxd.worker.sender import WebhookSender

            self._sender = WebhookSender(self._settings)
            self._sender.start()
        return self._sender

    async def _attempt(self, job: store.ClaimedJob) -> None:
        retry_at: float | None = None
        try:
            started_at = self._clock()
            outcome = await self._open_sender().post(
                job.url,
                event_id=job.event_id,
                body=job.payload.encode("utf-8"),
                secret=self._keyring.open(job.secret),
                timestamp=int(started_at),
            )
            number = job.attempt + 1
            delivery = Delivery(
                id=str(uuid.uuid4()),
                webhook_id=job.webhook_id,
                event_type=job.event_type,
                event_id=job.event_id,
                status_code=outcome.status_code,
                error=outcome.error,
                attempt=number,
                duration_ms=outcome.duration_ms,
                created_at=started_at,
            )
            retry_at = None if outcome.error is None else self._retry_at(job, number)
            self._observe(job, delivery, retry_at)
            result = await self._db.write(
                partial(
                    store.record_attempt,
                    attempt=store.Attempt(job=job, delivery=delivery, retry_at=retry_at),
                    disable_after=self._settings.webhook_disable_after,
                    keep=DELIVERIES_KEPT,
                )
            )
            if result == "disabled":
                log.warning(
                    "webhook %s disabled after %d failures", job.webhook_id, self._settings.webhook_disable_after
                )
        except Exception:
            # The claim lapses after the lease and the job is tried again.
            log.exception("webhook attempt for %s could not be recorded", job.event_id)
        finally:
            # Wake the loop when it waits for a free slot, or when this retry falls due before it looks.
            if len(self._inflight) >= self._settings.webhook_concurrency or (
                retry_at is not None and retry_at < self._wake_at
            ):
                self._wake.set()
            self._inflight.pop(asyncio.current_task(), None)  # type: ignore[arg-type]

    def _observe(self, job: store.ClaimedJob, delivery: Delivery, retry_at: float | None) -> None:
        """The attempt's metrics and its one log line: the URL without its query, never the secret."""
        ok = delivery.error is None
        self._metrics.webhook_deliveries.labels("ok" if ok else "failed").inc()
        self._metrics.webhook_latency.observe(delivery.duration_ms / 1000)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "webhook attempt %s",
                "ok" if ok else "failed",
                extra={
                    "fields": {
                        "webhook": job.webhook_id,
                        "event": job.event_id,
                        "url": _without_query(job.url),
                        "attempt": delivery.attempt,
                        "status": delivery.status_code,
                        "error": delivery.error or "-",
                        "ms": delivery.duration_ms,
                        "retry_in": "-" if retry_at is None else f"{max(0.0, retry_at - self._clock()):.0f}s",
                    }
                },
            )

    def _retry_at(self, job: store.ClaimedJob, attempts_made: int) -> float | None:
        """When the next attempt falls due, or None when that was the last one."""
        schedule = self._settings.webhook_retry_schedule
        if attempts_made >= len(schedule):
            return None
        delay = schedule[attempts_made] * self._random.uniform(1 - JITTER, 1 + JITTER)
        return max(job.event_at + delay, self._clock())


def _without_query(url: str) -> str:
    """`scheme://host[:port]/path`: a query or credentials could carry a receiver's secret."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
