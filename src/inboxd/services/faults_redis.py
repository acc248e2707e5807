"""SMTP faults' counters in Redis (`INBOXD_REDIS_URL`): `times`, `rate` and greylisting count the
same across every process that shares it (`--workers N`, several hosts), as the request limits do.

Each operation is one round trip (a script, or SET NX then GET); keys expire with their rule.
"""

from __future__ import annotations

import math
import uuid

import redis.asyncio as aioredis

# Count one use; 1 while the count is within the limit.
TAKE = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if n > tonumber(ARGV[1]) then return 0 end
return 1
"""

# A sliding window of message times: drop the old ones, refuse when full, else count this one.
RATE = """
local now, per_s, messages = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - per_s)
if redis.call('ZCARD', KEYS[1]) >= messages then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('EXPIRE', KEYS[1], math.ceil(per_s) + 1)
return 1
"""


class RedisFaultCounters:
    def __init__(self, client: aioredis.Redis, *, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix + "faults:"
        self._take = client.register_script(TAKE)
        self._rate = client.register_script(RATE)

    @classmethod
    def from_url(cls, url: str, *, prefix: str) -> RedisFaultCounters:
        return cls(aioredis.Redis.from_url(url), prefix=prefix)

    async def take(self, key: str, *, limit: int, ttl: float) -> bool:
        return bool(await self._take(keys=[self._prefix + "times:" + key], args=[limit, math.ceil(ttl)]))

    async def rate(self, key: str, *, messages: int, per_s: float, now: float) -> bool:
        args: list[str | int] = [repr(now), repr(per_s), messages, uuid.uuid4().hex]
        return bool(await self._rate(keys=[self._prefix + "rate:" + key], args=args))

    async def first_seen(self, key: str, *, now: float, ttl: float) -> float:
        name = self._prefix + "seen:" + key
        await self._redis.set(name, repr(now), nx=True, ex=math.ceil(ttl))
        found = await self._redis.get(name)
        return now if found is None else float(found)

    async def close(self) -> None:
        await self._redis.aclose()
