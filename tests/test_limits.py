"""The limiter's rules on both back ends (memory, the Redis on this machine), on a frozen clock.

Storage is a real database (SQLite and PostgreSQL); time is a clock the test sets, so no rule depends on timing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
import redis.asyncio as aioredis

from inboxd.config import Settings, replace
from inboxd.errors import RateLimited
from inboxd.model import User
from inboxd.services.limits import Limiter, client_key
from inboxd.services.limits_memory import MemoryCounters
from inboxd.services.limits_redis import RedisCounters
from inboxd.services.ops_ledger import OpsLedger
from inboxd.store import ops_usage
from inboxd.store.connect import open_database
from inboxd.store.db import Database
from tests.conftest import REDIS_URL

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)

# The spec's values, stated here so the generous test defaults of conftest never apply.
REAL = {
    "free_rps": 1.0,
    "pro_rps": 10.0,
    "free_create_interval": 8.0,
    "pro_create_interval": 1.0,
    "free_ops_limit": 500,
    "pro_ops_limit": 100000,
    "public_rps": 20.0,
    "login_max_failures": 10,
    "login_failure_window": 600.0,
}
NOV_30_LATE = datetime(2026, 11, 30, 23, 59, 0, tzinfo=UTC).timestamp()


class FrozenClock:
    def __init__(self, t: float = NOV_30_LATE - 86400) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def a_user(plan: str = "free") -> User:
    return User(id=str(uuid.uuid4()), email="u@example.test", plan=plan, role="user", status="active", created_at=0.0)


MakeLimiter = Callable[..., Awaitable[Limiter]]


@pytest.fixture(params=["memory", "redis"])
async def limiter_factory(
    request: pytest.FixtureRequest, make_settings: Any
) -> AsyncIterator[tuple[MakeLimiter, FrozenClock, Database]]:
    """Builds limiters on one database (and one Redis prefix), as separate processes would."""
    clock = FrozenClock()
    settings: Settings = make_settings(**REAL)
    db = await open_database(settings)
    built: list[Limiter] = []

    async def make(**overrides: Any) -> Limiter:
        s = replace(settings, **overrides)
        counters: Any = (
            RedisCounters.from_url(REDIS_URL, prefix=s.redis_prefix) if request.param == "redis" else MemoryCounters()
        )
        limiter = Limiter(counters, ledger=OpsLedger(db), settings=s, clock=clock)
        await limiter.start()
        built.append(limiter)
        return limiter

    try:
        yield make, clock, db
    finally:
        # Bounded: under uvloop pytest-timeout's signal cannot break a loop that waits forever.
        for limiter in built:
            await asyncio.wait_for(limiter.stop(), 30)
        await asyncio.wait_for(db.close(), 30)


async def refused(limiter: Limiter, user: User, *, creates_mailbox: bool = False) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await limiter.admit(user, creates_mailbox=creates_mailbox)
    return caught.value


async def test_free_rate_is_one_per_second(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(), a_user("free")
    allowed = await limiter.admit(user, creates_mailbox=False)
    assert allowed.headers["RateLimit-Limit"] == "1"
    assert allowed.headers["RateLimit-Remaining"] == "0"
    assert allowed.headers["RateLimit-Reset"] == "1"
    error = await refused(limiter, user)
    assert error.code == "rate_limit_exceeded"
    assert error.retry_after == pytest.approx(1.0)
    assert error.headers["RateLimit-Remaining"] == "0"
    clock.advance(0.5)
    assert (await refused(limiter, user)).retry_after == pytest.approx(0.5)
    clock.advance(0.5)
    await limiter.admit(user, creates_mailbox=False)
    # The refused requests took nothing and counted nothing.
    assert await limiter.usage(user) == (2, 500)


async def test_pro_rate_is_ten_per_second_with_burst_ten(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(), a_user("pro")
    for n in range(10):
        allowed = await limiter.admit(user, creates_mailbox=False)
        assert allowed.headers["RateLimit-Remaining"] == str(9 - n)
    assert allowed.headers["RateLimit-Limit"] == "10"
    assert allowed.headers["RateLimit-Reset"] == "1"
    assert (await refused(limiter, user)).retry_after == pytest.approx(0.1)
    clock.advance(0.1)
    await limiter.admit(user, creates_mailbox=False)
    await refused(limiter, user)
    # Another user has a bucket of its own.
    await limiter.admit(a_user("pro"), creates_mailbox=False)


async def test_float_rate(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(free_rps=2.5), a_user("free")
    await limiter.admit(user, creates_mailbox=False)
    await limiter.admit(user, creates_mailbox=False)
    assert (await refused(limiter, user)).retry_after == pytest.approx(0.2)
    clock.advance(0.2)
    await limiter.admit(user, creates_mailbox=False)


@pytest.mark.parametrize(("plan", "interval"), [("free", 8.0), ("pro", 1.0)])
async def test_mailbox_creation_interval(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database], plan: str, interval: float
) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(), a_user(plan)
    await limiter.admit(user, creates_mailbox=True)
    clock.advance(interval / 2)
    error = await refused(limiter, user, creates_mailbox=True)
    assert error.code == "rate_limit_exceeded"
    assert error.retry_after == pytest.approx(interval / 2)
    # Other requests go on meanwhile.
    await limiter.admit(user, creates_mailbox=False)
    clock.advance(interval / 2)
    await limiter.admit(user, creates_mailbox=True)


async def test_quota_runs_out_and_resets_at_the_month_boundary(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(free_ops_limit=3, free_rps=1000.0), a_user("free")
    clock.t = NOV_30_LATE  # 23:59:00 UTC on the month's last day
    for n in range(3):
        allowed = await limiter.admit(user, creates_mailbox=False)
        assert allowed.headers["X-Ops-Used"] == str(n + 1)
        assert allowed.headers["X-Ops-Limit"] == "3"
    error = await refused(limiter, user)
    assert error.code == "ops_quota_exceeded"
    assert "3 operations" in error.message
    assert error.retry_after == pytest.approx(60.0)
    assert error.headers["X-Ops-Used"] == "3"
    # A refused request is not counted.
    await refused(limiter, user)
    assert await limiter.usage(user) == (3, 3)
    clock.advance(61)  # December, UTC
    assert await limiter.usage(user) == (0, 3)
    allowed = await limiter.admit(user, creates_mailbox=False)
    assert allowed.headers["X-Ops-Used"] == "1"
    assert await limiter.usage(user) == (1, 3)


async def test_counts_are_batched_and_flushed_at_stop(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, _, db = limiter_factory
    limiter, user = await make(free_rps=1000.0, usage_flush_interval=3600.0), a_user("free")
    month = "2026-11"
    for _ in range(5):
        await limiter.admit(user, creates_mailbox=False)
    assert await limiter.usage(user) == (5, 500)
    # Nothing written per request...
    assert await db.read(partial(ops_usage.get_count, user_id=user.id, month=month)) == 0
    await limiter.stop()
    # ...and nothing lost at a clean stop.
    assert await db.read(partial(ops_usage.get_count, user_id=user.id, month=month)) == 5


async def test_flush_interval_writes_batches(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, _, db = limiter_factory
    limiter, user = await make(free_rps=1000.0, usage_flush_interval=0.05), a_user("free")
    for _ in range(4):
        await limiter.admit(user, creates_mailbox=False)
    for _ in range(200):
        if await db.read(partial(ops_usage.get_count, user_id=user.id, month="2026-11")) == 4:
            break
        await asyncio.sleep(0.02)
    assert await db.read(partial(ops_usage.get_count, user_id=user.id, month="2026-11")) == 4


async def test_stored_count_is_read_at_first_use(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, _, db = limiter_factory
    user = a_user("free")
    await db.write(partial(ops_usage.add_counts, deltas={(user.id, "2026-11"): 498}))
    limiter = await make(free_rps=1000.0)
    assert await limiter.usage(user) == (498, 500)
    await limiter.admit(user, creates_mailbox=False)
    await limiter.admit(user, creates_mailbox=False)
    assert (await refused(limiter, user)).code == "ops_quota_exceeded"
    await limiter.stop()
    assert await db.read(partial(ops_usage.get_count, user_id=user.id, month="2026-11")) == 500


async def test_two_limiters_on_one_store(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    """On Redis two limiters (two processes) share one budget; in memory each has its own bucket."""
    make, _, db = limiter_factory
    first, second = await make(), await make()
    user = a_user("free")
    await first.admit(user, creates_mailbox=False)
    if isinstance(first._counters, RedisCounters):
        assert (await refused(second, user)).code == "rate_limit_exceeded"
        assert await second.usage(user) == (1, 500)
    else:
        await second.admit(user, creates_mailbox=False)
    await first.stop()
    await second.stop()
    stored = await db.read(partial(ops_usage.get_count, user_id=user.id, month="2026-11"))
    assert stored == (1 if isinstance(first._counters, RedisCounters) else 2)


async def test_failed_sign_ins_per_address_and_client(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, clock, _ = limiter_factory
    limiter = await make()
    for _ in range(10):
        await limiter.reserve_sign_in("Box@x.test", client="10.0.0.1")  # left in: a wrong secret
        clock.advance(1)
    with pytest.raises(RateLimited) as caught:
        await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.retry_after == pytest.approx(590.0)
    clock.advance(590)  # the first failure leaves the window
    await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")


async def test_a_stranger_cannot_lock_the_owner_out(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    # Ten wrong passwords from one client used to refuse the address to every client for 600 s.
    make, _, _ = limiter_factory
    limiter = await make()
    for _ in range(10):
        await limiter.reserve_sign_in("box@x.test", client="203.0.113.9")
    owner = await limiter.reserve_sign_in("box@x.test", client="198.51.100.1")
    await limiter.sign_in_succeeded(owner)
    # Many strangers, two tries each: the first of each is let through (it has not failed here),
    # the second waits behind the one that failed; the owner's client still gets in at once.
    refused = []
    for n in range(30):
        await limiter.reserve_sign_in("box@x.test", client=f"192.0.2.{n}")
        with pytest.raises(RateLimited) as caught:
            await limiter.reserve_sign_in("box@x.test", client=f"192.0.2.{n}")
        refused.append(caught.value.retry_after)
    assert all(wait > 0 for wait in refused), refused
    await limiter.sign_in_succeeded(await limiter.reserve_sign_in("box@x.test", client="198.51.100.1"))


async def test_failures_at_one_address_slow_the_clients_that_failed(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, clock, _ = limiter_factory
    limiter = await make()
    for n in range(10):  # ten clients, one wrong password each: under every client's own limit
        await limiter.reserve_sign_in("box@x.test", client=f"10.0.0.{n}")
    # The address has 10 failures: a client that failed on it waits 1 s after the latest try,
    # then 2 s, 4 s … (at most `login_delay_max`); one that has not failed on it does not wait.
    waits = []
    for n in range(8):
        with pytest.raises(RateLimited) as caught:
            await limiter.reserve_sign_in("box@x.test", client=f"10.0.0.{n}")
        waits.append(caught.value.retry_after)
        clock.advance(caught.value.retry_after)
        await limiter.reserve_sign_in("box@x.test", client=f"10.0.0.{n}")
    assert waits == pytest.approx([1, 2, 4, 8, 16, 32, 60, 60])
    await limiter.reserve_sign_in("box@x.test", client="10.0.9.9")
    await limiter.reserve_sign_in("other@x.test", client="10.0.0.1")


async def test_sign_in_realms_are_counted_apart(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    # One budget per client used to cover both POST /api/token and SMTP AUTH.
    make, _, _ = limiter_factory
    limiter = await make()
    for n in range(10):
        await limiter.reserve_sign_in(f"sbx_{n}", client="10.0.0.1", realm="smtp")
    with pytest.raises(RateLimited):
        await limiter.reserve_sign_in("sbx_fresh", client="10.0.0.1", realm="smtp")
    await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")


async def test_ipv6_clients_count_per_64(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, _, _ = limiter_factory
    limiter = await make()
    for n in range(10):
        await limiter.reserve_sign_in(f"box{n}@x.test", client=f"2001:db8:1:2::{n + 1:x}")
    with pytest.raises(RateLimited):
        await limiter.reserve_sign_in("fresh@x.test", client="2001:db8:1:2:ffff::1")
    await limiter.reserve_sign_in("fresh@x.test", client="2001:db8:1:3::1")
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_key("::ffff:192.0.2.1") == client_key("192.0.2.1") == "192.0.2.1"


async def test_failed_sign_ins_per_ip(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, clock, _ = limiter_factory
    limiter = await make()
    attempts = [await limiter.reserve_sign_in(f"box{n}@x.test", client="10.0.0.1") for n in range(9)]
    last = await limiter.reserve_sign_in("box9@x.test", client="10.0.0.1")
    with pytest.raises(RateLimited):
        await limiter.reserve_sign_in("fresh@x.test", client="10.0.0.1")
    await limiter.reserve_sign_in("fresh@x.test", client="10.0.0.2")
    # A success takes back its own attempt and clears the address's failures, not the IP's.
    await limiter.sign_in_succeeded(last)
    await limiter.reserve_sign_in("box0@x.test", client="10.0.0.1")
    with pytest.raises(RateLimited):
        await limiter.reserve_sign_in("box0@x.test", client="10.0.0.1")
    # An attempt taken back (not a wrong secret) frees its place.
    await limiter.release_sign_in(attempts[0])
    await limiter.reserve_sign_in("fresh@x.test", client="10.0.0.1")
    clock.advance(600)
    await limiter.reserve_sign_in("fresh@x.test", client="10.0.0.1")


async def test_success_clears_its_own_clients_failures(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, _, _ = limiter_factory
    limiter = await make(login_delay_max=0.0)
    for _ in range(9):
        await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")
    await limiter.sign_in_succeeded(await limiter.reserve_sign_in("box@x.test", client="10.0.0.1"))
    # The pair starts again; the client's own log keeps its 9 failures at this address.
    await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")
    with pytest.raises(RateLimited):
        await limiter.reserve_sign_in("box@x.test", client="10.0.0.1")


async def test_concurrent_sign_ins_reserve_atomically(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, _, _ = limiter_factory
    first, second = await make(), await make()  # two processes on one back end (memory: each its own)
    results = await asyncio.gather(
        *(limiter.reserve_sign_in("box@x.test", client="10.0.0.1") for limiter in [first] * 50 + [second] * 50),
        return_exceptions=True,
    )
    passed = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, RateLimited)]
    shared = isinstance(first._counters, RedisCounters)
    assert len(passed) == (10 if shared else 20) and len(passed) + len(refused) == 100


async def test_a_refused_creation_gives_its_interval_back(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    make, clock, _ = limiter_factory
    limiter, user = await make(free_rps=1000.0), a_user("free")
    refused = await limiter.admit(user, creates_mailbox=True)
    assert refused.creation is not None
    await limiter.creation_failed(user, refused)
    created = await limiter.admit(user, creates_mailbox=True)
    with pytest.raises(RateLimited):
        await limiter.admit(user, creates_mailbox=True)
    clock.advance(8)
    later = await limiter.admit(user, creates_mailbox=True)
    # Giving back a stamp that was replaced since leaves the newer one alone.
    await limiter.creation_failed(user, created)
    with pytest.raises(RateLimited):
        await limiter.admit(user, creates_mailbox=True)
    await limiter.creation_failed(user, later)
    await limiter.admit(user, creates_mailbox=True)
    assert (await limiter.admit(user, creates_mailbox=False)).creation is None


async def test_public_reads_per_ip(limiter_factory: tuple[MakeLimiter, FrozenClock, Database]) -> None:
    make, clock, _ = limiter_factory
    limiter = await make()
    for _ in range(40):  # burst: twice the rate of 20/s
        await limiter.admit_public(client="10.0.0.1")
    with pytest.raises(RateLimited) as caught:
        await limiter.admit_public(client="10.0.0.1")
    assert caught.value.retry_after == pytest.approx(0.05)
    await limiter.admit_public(client="10.0.0.2")
    clock.advance(0.05)
    await limiter.admit_public(client="10.0.0.1")


@pytest.mark.parametrize("limiter_factory", ["redis"], indirect=True)
async def test_redis_counts_survive_a_redis_restart(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database], make_settings: Any
) -> None:
    make, _, _ = limiter_factory
    limiter, user = await make(free_rps=1000.0), a_user("free")
    for _ in range(3):
        await limiter.admit(user, creates_mailbox=False)
    await limiter._ledger.flush()
    # Redis loses everything (a restart without persistence): the count comes back from the database.
    client = aioredis.Redis.from_url(REDIS_URL)
    prefix = limiter._settings.redis_prefix
    keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
    assert keys
    await client.delete(*keys)
    await client.aclose()
    allowed = await limiter.admit(user, creates_mailbox=False)
    assert allowed.headers["X-Ops-Used"] == "4"
    assert await limiter.usage(user) == (4, 500)


async def test_redis_down_is_a_storage_error(make_settings: Any) -> None:
    from inboxd.errors import StorageError

    settings: Settings = make_settings(**REAL)
    db = await open_database(settings)
    counters = RedisCounters.from_url("redis://127.0.0.1:1/0", prefix="x:")
    limiter = Limiter(counters, ledger=OpsLedger(db), settings=settings, clock=FrozenClock())
    try:
        with pytest.raises(StorageError) as caught:
            await limiter.admit(a_user(), creates_mailbox=False)
        assert caught.value.__cause__ is not None
    finally:
        await limiter.stop()
        await db.close()


async def test_counted_operations_take_no_rate_and_stop_at_the_quota(
    limiter_factory: tuple[MakeLimiter, FrozenClock, Database],
) -> None:
    """`count` (a message the SMTP sandbox captured): seeded from the store, no bucket, capped."""
    make, clock, db = limiter_factory
    user = a_user("free")
    await db.write(partial(ops_usage.add_counts, deltas={(user.id, "2026-11"): 495}))
    limiter = await make(free_rps=1.0, usage_flush_interval=3600.0)
    await limiter.admit(user, creates_mailbox=False)
    for _ in range(10):  # far above the request rate, and past the quota
        await limiter.count(user)
    assert await limiter.usage(user) == (500, 500)
    clock.advance(1)  # the bucket refilled: the refusal is the quota's
    assert (await refused(limiter, user)).code == "ops_quota_exceeded"
    await limiter.stop()
    assert await db.read(partial(ops_usage.get_count, user_id=user.id, month="2026-11")) == 500
