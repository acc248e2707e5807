"""SMTP faults' counters in this process's memory, and the protocol every counter store keeps
(`FaultCounters`; Redis: `services/faults_redis.py`).

`times`, `rate` and greylisting count per mailbox: every key belongs to one mailbox, and each
mailbox holds at most `KEYS_PER_MAILBOX` keys per kind, the least recently used one forgotten
first. A flood of greylisting triplets on one tenant's mailbox therefore forgets only that
mailbox's oldest triplets (each then greylisted once more, as a restarted greylister would), and
never another tenant's counts. At most `MAILBOXES` mailboxes are tracked, the least recently used
one forgotten whole when a new one comes: only with that many mailboxes counting at once does any
counter start over.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Protocol, TypeVar

T = TypeVar("T")

# Keys per mailbox and kind (times, rate, greylisting): a `times` or `rate` key is per rule (at
# most 20), so only greylisting triplets come near it.
KEYS_PER_MAILBOX = 1_000
MAILBOXES = 10_000


class FaultCounters(Protocol):
    """Where `times`, `rate` and greylisting count: this process's memory, or Redis shared by all.
    `mailbox` is the mailbox (or sandbox) whose rule counts; `key` names the rule (and triplet)."""

    async def take(self, mailbox: str, key: str, *, limit: int, ttl: float) -> bool:
        """Count one use of `key`; False once `limit` uses were counted."""
        ...

    async def rate(self, mailbox: str, key: str, *, messages: int, per_s: float, now: float) -> bool:
        """Count one message in the sliding window of `per_s` seconds; False (not counted) when full."""
        ...

    async def first_seen(self, mailbox: str, key: str, *, now: float, ttl: float) -> float:
        """When `key` was first seen (now, if this is the first time)."""
        ...

    async def close(self) -> None: ...


class _Counts:
    """One mailbox's counters, each table bounded on its own."""

    __slots__ = ("hits", "seen", "used")

    def __init__(self) -> None:
        self.used: OrderedDict[str, int] = OrderedDict()
        self.hits: OrderedDict[str, deque[float]] = OrderedDict()
        self.seen: OrderedDict[str, float] = OrderedDict()


class MemoryFaultCounters:
    """This process's counters (the default, and with `--workers N` without Redis: per worker)."""

    def __init__(self, *, keys_per_mailbox: int = KEYS_PER_MAILBOX, mailboxes: int = MAILBOXES) -> None:
        self._keys = keys_per_mailbox
        self._limit = mailboxes
        self._boxes: OrderedDict[str, _Counts] = OrderedDict()

    def _of(self, mailbox: str) -> _Counts:
        counts = self._boxes.get(mailbox)
        if counts is None:
            if len(self._boxes) >= self._limit:
                self._boxes.popitem(last=False)  # the mailbox counted least lately, alone
            counts = self._boxes[mailbox] = _Counts()
        else:
            self._boxes.move_to_end(mailbox)
        return counts

    async def take(self, mailbox: str, key: str, *, limit: int, ttl: float) -> bool:
        used = self._of(mailbox).used
        count = used.get(key, 0)
        if count >= limit:
            return False
        _put(used, key, count + 1, self._keys)
        return True

    async def rate(self, mailbox: str, key: str, *, messages: int, per_s: float, now: float) -> bool:
        table = self._of(mailbox).hits
        hits = table.get(key)
        if hits is None:
            hits = deque()
        _put(table, key, hits, self._keys)
        while hits and hits[0] <= now - per_s:
            hits.popleft()
        if len(hits) >= messages:
            return False
        hits.append(now)
        return True

    async def first_seen(self, mailbox: str, key: str, *, now: float, ttl: float) -> float:
        seen = self._of(mailbox).seen
        first = seen.get(key, now)
        _put(seen, key, first, self._keys)
        return first

    def held(self, mailbox: str) -> int:
        """The keys `mailbox` holds in all (what the bound is on)."""
        counts = self._boxes.get(mailbox)
        return 0 if counts is None else len(counts.used) + len(counts.hits) + len(counts.seen)

    async def close(self) -> None:
        return None


def _put(table: OrderedDict[str, T], key: str, value: T, limit: int) -> None:
    """Set `key` as the most recently used; the least recently used key goes when `limit` is reached."""
    if key in table:
        table.move_to_end(key)
    elif len(table) >= limit:
        table.popitem(last=False)
    table[key] = value
