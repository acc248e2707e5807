"""`TtlCache`: answers kept in memory for a few seconds and forgotten whole on `changed`.

The credential cache (`services/users.py`), the recipient cache (`services/recipients.py`) and the
sandbox's fault sets (`services/faults.py`) keep what the database answered, each for `ttl`
seconds, and drop everything when the event bus announces `changed`. The rules they share live
here:
- `clear` (the `changed` announcement) moves a generation counter on, and an answer is kept only
  if the generation its lookup started in is still current: a lookup in flight across a change
  read the world before it, and keeping its answer would bring back what the change ended (a
  reset mailbox's old token, a deleted mailbox) for `ttl` seconds;
- at most `limit` keys are kept; past it the cache starts over, so a flood of distinct keys costs
  a database read each, as it would without a cache;
- a `ttl` of 0 keeps nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# Keys kept at most by default; past it the cache starts over.
LIMIT = 10_000


class TtlCache(Generic[K, V]):
    __slots__ = ("_entries", "_generation", "_limit", "_ttl")

    def __init__(self, *, ttl: float, limit: int = LIMIT) -> None:
        self._ttl = ttl
        self._limit = limit
        self._entries: dict[K, tuple[V, float]] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        """Taken before a lookup and handed to `keep` after it."""
        return self._generation

    def get(self, key: K, now: float) -> V | None:
        """The value kept for `key` if it is younger than the TTL."""
        entry = self._entries.get(key)
        if entry is None or now - entry[1] >= self._ttl:
            return None
        return entry[0]

    def peek(self, key: K) -> V | None:
        """The value kept for `key`, however old."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def keep(self, key: K, value: V, *, at: float, generation: int) -> bool:
        """Keep `value`, read at `at` by a lookup that started in `generation`, unless the cache
        was cleared since; whether it was kept."""
        if generation != self._generation or self._ttl <= 0:
            return False
        if len(self._entries) >= self._limit:
            self._entries.clear()  # starting over forgets, but voids no lookup in flight
        self._entries[key] = (value, at)
        return True

    async def fetch(self, key: K, lookup: Callable[[], Awaitable[V]], *, now: float) -> V:
        """`lookup()`'s answer (it may raise to refuse; a refusal is not kept), kept for `key`
        unless the cache was cleared while it ran."""
        generation = self._generation
        value = await lookup()
        self.keep(key, value, at=now, generation=generation)
        return value

    async def answer(self, key: K, lookup: Callable[[], Awaitable[V]], *, now: float) -> V:
        """The value kept for `key` if younger than the TTL (None included), else `fetch`'s."""
        entry = self._entries.get(key)
        if entry is not None and now - entry[1] < self._ttl:
            return entry[0]
        return await self.fetch(key, lookup, now=now)

    def clear(self) -> None:
        """Something the cache may hold changed: forget it all, and any lookup in flight."""
        self._entries.clear()
        self._generation += 1
