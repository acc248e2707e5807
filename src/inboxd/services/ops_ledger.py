"""The monthly operation counts' way into the database: added up in memory, written in batches.

Counting one operation is a dict update; `flush()` (every `usage_flush_interval` seconds and at
stop) adds the pending deltas to `ops_usage` in one write. Deltas are additive, so several
processes sharing one database each flush their own share. What a failed flush could not write
stays pending for the next one.
"""

from __future__ import annotations

import asyncio
from functools import partial

from inboxd.store import ops_usage as store
from inboxd.store.db import Database

Key = tuple[str, str]  # (user id, month "YYYY-MM")


class OpsLedger:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: dict[Key, int] = {}
        # Taken out of `_pending` by a flush whose commit has not returned yet.
        self._inflight: dict[Key, int] = {}
        self._flushes = 0  # flushes begun, so a read can tell whether one committed meanwhile
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, user_id: str, month: str, n: int = 1) -> None:
        key = (user_id, month)
        self._pending[key] = self._pending.get(key, 0) + n

    def pending(self, user_id: str, month: str) -> int:
        """Counted here but not yet known to be in the database."""
        key = (user_id, month)
        return self._pending.get(key, 0) + self._inflight.get(key, 0)

    async def stored(self, user_id: str, month: str) -> int:
        return await self._db.read(partial(store.get_count, user_id=user_id, month=month))

    async def total(self, user_id: str, month: str) -> int:
        """Stored plus pending, exact: the read is taken while no flush can commit under it."""
        while True:
            await self._idle.wait()
            begun = self._flushes
            stored = await self.stored(user_id, month)
            if self._flushes == begun:
                return stored + self.pending(user_id, month)

    async def flush(self) -> None:
        if not self._pending or self._inflight:
            return
        self._inflight, self._pending = self._pending, {}
        self._flushes += 1
        self._idle.clear()
        try:
            await self._db.write(partial(store.add_counts, deltas=self._inflight))
        except Exception:
            for key, n in self._inflight.items():
                self._pending[key] = self._pending.get(key, 0) + n
            raise
        finally:
            self._inflight = {}
            self._idle.set()
