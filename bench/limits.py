"""What one limit check costs: microseconds per `admit` in memory, round trips and latency with Redis.

    .venv/bin/python -m bench.limits [--users 1000] [--checks 200000] [--redis-checks 5000] [--redis URL]

Both back ends run the real `Limiter` over a throw-away SQLite database (read once per user and
month, flushed in batches like the server does). Round trips are counted at the Redis client's
socket: each `send_packed_command` is one request to Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from inboxd.config import Settings
from inboxd.model import User
from inboxd.services.limits import Limiter
from inboxd.services.limits_memory import MemoryCounters
from inboxd.services.limits_redis import RedisCounters
from inboxd.services.ops_ledger import OpsLedger
from inboxd.store.connect import open_database


class CountingConnection(Connection):
    sends = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        await super().send_packed_command(command, check_health)


def users(n: int) -> list[User]:
    return [
        User(id=str(uuid.uuid4()), email=f"u{i}@bench.test", plan="pro", role="user", status="active", created_at=0.0)
        for i in range(n)
    ]


async def warm(limiter: Limiter, people: list[User]) -> None:
    # The first check per user and month reads the stored count; measure the steady state after it.
    for user in people:
        await limiter.admit(user, creates_mailbox=False)


async def bench_memory(settings: Settings, people: list[User], checks: int) -> float:
    db = await open_database(settings)
    limiter = Limiter(MemoryCounters(), ledger=OpsLedger(db), settings=settings, clock=time.time)
    await limiter.start()
    try:
        await warm(limiter, people)
        began = time.perf_counter()
        for i in range(checks):
            await limiter.admit(people[i % len(people)], creates_mailbox=False)
        elapsed = time.perf_counter() - began
    finally:
        await limiter.stop()
        await db.close()
    return elapsed / checks * 1e6


async def bench_redis(settings: Settings, people: list[User], checks: int, url: str) -> tuple[float, list[float]]:
    db = await open_database(settings)
    pool = aioredis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    counters = RedisCounters(aioredis.Redis(connection_pool=pool), prefix=settings.redis_prefix)
    limiter = Limiter(counters, ledger=OpsLedger(db), settings=settings, clock=time.time)
    await limiter.start()
    latencies: list[float] = []
    try:
        await warm(limiter, people)
        CountingConnection.sends = 0
        for i in range(checks):
            began = time.perf_counter()
            await limiter.admit(people[i % len(people)], creates_mailbox=i % 50 == 0)
            latencies.append((time.perf_counter() - began) * 1e6)
        round_trips = CountingConnection.sends / checks
    finally:
        await limiter.stop()
        await db.close()
        cleanup = aioredis.Redis.from_url(url)
        keys = [k async for k in cleanup.scan_iter(match=f"{settings.redis_prefix}*")]
        if keys:
            await cleanup.delete(*keys)
        await cleanup.aclose()
    return round_trips, latencies


async def bench_ping(url: str, checks: int) -> list[float]:
    """A bare round trip to the same Redis, for scale."""
    client = aioredis.Redis.from_url(url)
    latencies: list[float] = []
    try:
        for _ in range(checks):
            began = time.perf_counter()
            await client.ping()
            latencies.append((time.perf_counter() - began) * 1e6)
    finally:
        await client.aclose()
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.limits")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--checks", type=int, default=200_000)
    parser.add_argument("--redis-checks", type=int, default=5_000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args(argv)
    people = users(args.users)
    with tempfile.TemporaryDirectory() as tmp:
        # Limits high enough that every check passes: the cost of the common case.
        settings = Settings(
            data_dir=Path(tmp),
            pro_rps=1e9,
            pro_ops_limit=10**12,
            pro_create_interval=0.0,
            usage_flush_interval=1.0,
            redis_prefix=f"inboxd-bench:{uuid.uuid4().hex[:8]}:",
        )
        per_check = await bench_memory(settings, people, args.checks)
        round_trips, latencies = await bench_redis(settings, people, args.redis_checks, args.redis)
        pings = await bench_ping(args.redis, args.redis_checks)
    print(f"limits: memory  {per_check:.2f} µs per admit ({args.checks} checks over {args.users} users)")
    print(
        f"limits: redis   {round_trips:.3f} round trips per admit; latency µs "
        f"mean {statistics.fmean(latencies):.0f} p50 {pct(latencies, 0.5):.0f} "
        f"p99 {pct(latencies, 0.99):.0f} ({args.redis_checks} sequential checks, every 50th a mailbox creation)"
    )
    print(f"limits: redis   PING alone, for scale: p50 {pct(pings, 0.5):.0f} µs p99 {pct(pings, 0.99):.0f} µs")
    print(f"reproduce: .venv/bin/python -m bench.limits {' '.join(argv)}".rstrip())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
