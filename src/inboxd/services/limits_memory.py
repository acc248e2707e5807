"""The limits' counters in this process's memory: buckets, creation stamps, month counts, failure logs.

Every method finishes without awaiting anything, so on one event loop each is atomic. Idle
state is pruned by the limiter's flush loop: full buckets, old stamps, past months.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from inboxd.services.limits_counters import Outcome, Pace, Take, Verdict, pace_wait

# Clock readings near 1.7e9 keep only about 1e-7 s of precision: a bucket refilled to within a
# millionth of a token is full enough, or exact advances of the clock would fall short.
ENOUGH = 1.0 - 1e-6


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    rate: float
    burst: float

    def refill(self, now: float, *, rate: float, burst: float) -> float:
        self.rate, self.burst = rate, burst
        self.tokens = min(burst, self.tokens + max(0.0, now - self.at) * rate)
        self.at = max(self.at, now)
        return self.tokens


class MemoryCounters:
    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._created: dict[str, tuple[float, float]] = {}  # user id → (last admitted creation, interval)
        self._ops: dict[tuple[str, str], int] = {}  # (user id, month) → count
        self._failures: dict[str, tuple[deque[tuple[float, str]], float]] = {}  # key → ((time, member)…, window)
        # key → members holding a place; one process gives back every place it takes, so no expiry.
        self._held: dict[str, set[str]] = {}

    def _bucket(self, key: str, *, now: float, rate: float, burst: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=burst, at=now, rate=rate, burst=burst)
        bucket.refill(now, rate=rate, burst=burst)
        return bucket

    async def take(self, take: Take) -> Verdict:
        ops_key = (take.user_id, take.month)
        used = self._ops.get(ops_key)
        if used is None:
            if take.seed is None:
                return Verdict(Outcome.SEED, tokens=0.0, retry_after=0.0, ops_used=0)
            used = self._ops[ops_key] = take.seed
        rule, now = take.rule, take.now
        bucket = self._bucket(f"user:{take.user_id}", now=now, rate=rule.rate, burst=rule.burst)
        if bucket.tokens < ENOUGH:
            return Verdict(
                Outcome.RATE, tokens=bucket.tokens, retry_after=(1.0 - bucket.tokens) / rule.rate, ops_used=used
            )
        if take.creates_mailbox and rule.create_interval > 0 and take.user_id in self._created:
            wait = self._created[take.user_id][0] + rule.create_interval - now
            if wait > 0:
                return Verdict(Outcome.CREATE, tokens=bucket.tokens, retry_after=wait, ops_used=used)
        bucket.tokens -= 1.0
        if used >= rule.ops_limit:
            return Verdict(Outcome.QUOTA, tokens=bucket.tokens, retry_after=0.0, ops_used=used)
        if take.creates_mailbox:
            self._created[take.user_id] = (now, rule.create_interval)
        self._ops[ops_key] = used + 1
        return Verdict(Outcome.OK, tokens=bucket.tokens, retry_after=0.0, ops_used=used + 1)

    async def count(self, take: Take) -> Verdict:
        ops_key = (take.user_id, take.month)
        used = self._ops.get(ops_key)
        if used is None:
            if take.seed is None:
                return Verdict(Outcome.SEED, tokens=0.0, retry_after=0.0, ops_used=0)
            used = take.seed
        if used >= take.rule.ops_limit:
            self._ops[ops_key] = used
            return Verdict(Outcome.QUOTA, tokens=0.0, retry_after=0.0, ops_used=used)
        self._ops[ops_key] = used + 1
        return Verdict(Outcome.OK, tokens=0.0, retry_after=0.0, ops_used=used + 1)

    async def ops_used(self, user_id: str, month: str) -> int | None:
        return self._ops.get((user_id, month))

    async def hit(self, key: str, *, now: float, rate: float, burst: float) -> float:
        bucket = self._bucket(key, now=now, rate=rate, burst=burst)
        if bucket.tokens < ENOUGH:
            return (1.0 - bucket.tokens) / rate
        bucket.tokens -= 1.0
        return 0.0

    async def release_creation(self, user_id: str, stamp: float) -> None:
        if self._created.get(user_id, (None, 0.0))[0] == stamp:
            del self._created[user_id]

    def _log(self, key: str, *, now: float, window: float) -> deque[tuple[float, str]]:
        log = self._failures.setdefault(key, (deque(), window))[0]
        while log and log[0][0] <= now - window:
            log.popleft()
        return log

    async def reserve(
        self, keys: tuple[str, ...], *, member: str, now: float, window: float, limit: int, pace: Pace | None = None
    ) -> float:
        logs = [self._log(key, now=now, window=window) for key in keys]
        wait = max(((log[0][0] if log else now) + window - now for log in logs if len(log) >= limit), default=0.0)
        if pace is not None:
            paced = self._log(pace.key, now=now, window=window)
            if paced and self._log(pace.when_key, now=now, window=window):
                wait = max(
                    wait, pace_wait(entries=len(paced), newest=paced[-1][0], now=now, after=pace.after, most=pace.most)
                )
            logs.append(paced)
        if wait > 0:
            return wait
        for log in logs:
            log.append((now, member))
        return 0.0

    async def release(self, keys: tuple[str, ...], *, member: str) -> None:
        for key in keys:
            entry = self._failures.get(key)
            if entry is not None:
                kept = deque(item for item in entry[0] if item[1] != member)
                self._failures[key] = (kept, entry[1])

    async def clear_failures(self, key: str) -> None:
        self._failures.pop(key, None)

    async def hold(self, caps: tuple[tuple[str, int], ...], *, member: str, now: float, until: float) -> bool:
        if any(len(self._held.get(key, ())) >= cap for key, cap in caps):
            return False
        for key, _ in caps:
            self._held.setdefault(key, set()).add(member)
        return True

    async def let_go(self, keys: tuple[str, ...], *, member: str) -> None:
        for key in keys:
            members = self._held.get(key)
            if members is not None:
                members.discard(member)
                if not members:
                    del self._held[key]

    def prune(self, *, now: float, month: str) -> None:
        # The ledger holds what is not yet written, so a dropped month count is re-read if needed.
        self._buckets = {k: b for k, b in self._buckets.items() if b.tokens + max(0.0, now - b.at) * b.rate < b.burst}
        self._created = {k: v for k, v in self._created.items() if v[0] + v[1] > now}
        self._ops = {k: v for k, v in self._ops.items() if k[1] == month}
        self._failures = {k: (log, w) for k, (log, w) in self._failures.items() if log and log[-1][0] > now - w}

    async def close(self) -> None:
        return None
