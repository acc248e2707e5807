"""Background upkeep: expire messages past retention, purge them after the grace period (and
the soft-deleted ones), drop expired browser sessions, and flush coalesced token `last_used_at`
values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial

from inboxd.config import Settings
from inboxd.services.registry import Services
from inboxd.store import message_sweeps as message_store
from inboxd.store.db import Database
from inboxd.tasks import cancel_and_wait

log = logging.getLogger("inboxd.sweeper")
BATCH = 200


class Sweeper:
    def __init__(self, db: Database, services: Services, *, settings: Settings, clock: Callable[[], float]) -> None:
        self._db = db
        self._services = services
        self._settings = settings
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self._settings.sweep_interval, self.sweep)),
            loop.create_task(self._every(self._settings.usage_flush_interval, self._services.users.flush_last_used)),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []

    async def _every(self, interval: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background job failed; it runs again next round")

    async def sweep(self) -> None:
        """Expire then purge, in bounded batches so no transaction grows large."""
        now = self._clock()
        while await self._db.write(partial(message_store.expire_due, now=now, limit=BATCH)) == BATCH:
            pass
        cutoff = now - self._settings.expired_grace
        while await self._db.write(partial(message_store.purge, expired_before=cutoff, limit=BATCH)) == BATCH:
            pass
        # Expired browser sessions are refused when read; this only keeps the table small.
        await self._services.sessions.sweep()
        await self._services.sign_in.sweep()
