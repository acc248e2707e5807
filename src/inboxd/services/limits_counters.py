"""What a counting back end of the limits counts: the `Counters` interface that the in-process
(`limits_memory.py`) and Redis (`limits_redis.py`) back ends implement, and the values the limiter
(`limits.py`) and they exchange."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Protocol


class Outcome(Enum):
    OK = 0
    RATE = 1
    CREATE = 2
    QUOTA = 3
    SEED = 4  # the month's counter is not loaded: call again with the stored count as `seed`


class Rule(NamedTuple):
    """One plan's limits, as the back ends take them."""

    rate: float
    burst: float
    create_interval: float
    ops_limit: int


# `Verdict` and `Take` are made for every request: named tuples, immutable as frozen dataclasses
# are, cost a fraction of one to make (a frozen dataclass sets each field through
# `object.__setattr__`, the better part of the in-memory check's time).
class Verdict(NamedTuple):
    outcome: Outcome
    tokens: float  # left in the bucket after this request
    retry_after: float  # for RATE and CREATE
    ops_used: int  # after this request


class Take(NamedTuple):
    """One admission check: everything a back end needs, so Redis does it in one script call."""

    user_id: str
    month: str
    now: float
    rule: Rule
    creates_mailbox: bool
    ops_ttl: int  # seconds the month's counter is worth keeping
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Pace:
    """A log that slows, rather than stops, tries: when `when_key`'s log is not empty and `key`'s
    holds `after` or more entries within the window, the wait after its newest entry is
    2 ** (entries - after) seconds, at most `most`."""

    key: str
    when_key: str
    after: int
    most: float


def pace_wait(*, entries: int, newest: float, now: float, after: int, most: float) -> float:
    """The seconds a paced try still waits (both back ends answer the same)."""
    if entries < after:
        return 0.0
    return newest + min(2.0 ** min(entries - after, 62), most) - now


class Counters(Protocol):
    """Where the counts live. Every method is atomic with respect to other callers."""

    async def take(self, take: Take) -> Verdict: ...

    async def ops_used(self, user_id: str, month: str) -> int | None:
        """The month's count, or None when this back end has not loaded it."""
        ...

    async def count(self, take: Take) -> Verdict:
        """Add one to the month's count unless it is at `take.rule.ops_limit` (QUOTA then); no
        bucket is touched. SEED as for `take`."""
        ...

    async def hit(self, key: str, *, now: float, rate: float, burst: float) -> float:
        """Take one token from bucket `key`; 0.0 when taken, else seconds until one is there."""
        ...

    async def release_creation(self, user_id: str, stamp: float) -> None:
        """Forget the user's creation stamp if it is still `stamp` (set by `take`)."""
        ...

    async def reserve(
        self, keys: tuple[str, ...], *, member: str, now: float, window: float, limit: int, pace: Pace | None = None
    ) -> float:
        """Add `member` at `now` to every log in `keys` (and `pace.key`) if none of `keys` holds
        `limit` entries within the window and `pace` asks no wait: 0.0; else add nothing and
        answer the seconds until the attempt may come."""
        ...

    async def release(self, keys: tuple[str, ...], *, member: str) -> None: ...
    async def clear_failures(self, key: str) -> None: ...

    async def hold(self, caps: tuple[tuple[str, int], ...], *, member: str, now: float, until: float) -> bool:
        """Add `member` (lasting until `until`) to every set of `caps` if each holds fewer than its
        cap of unexpired members; else add nothing and answer False."""
        ...

    async def let_go(self, keys: tuple[str, ...], *, member: str) -> None: ...
    def prune(self, *, now: float, month: str) -> None: ...
    async def close(self) -> None: ...
