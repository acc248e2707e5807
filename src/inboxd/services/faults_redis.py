"""SMTP faults' counters in Redis (`INBOXD_REDIS_URL`): `times`, `rate` and greylisting count the
same across every process that shares it (`--workers N`, several hosts), as the request limits do.

Each operation is one round trip (a script); keys expire with their rule. Every key is a
mailbox's: `times` and `rate` keys are per rule (at most 20 a mailbox), and a mailbox's
greylisting triplets are one sorted set (member: the triplet, score: when it was first seen)
holding at most `KEYS_PER_MAILBOX` of them, the earliest seen dropped first, so one tenant's flood
of triplets forgets only its own and nothing is ever cleared for all.
"""

from __future__ import annotations

import math
import uuid

import redis.asyncio as aioredis

from inboxd.services.fault_counters import KEYS_PER_MAILBOX

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

# When a triplet was first seen, kept in its mailbox's bounded set (the set lives as long as its
# longest-lived rule: EXPIRE GT never shortens it).
SEEN = """
local first = redis.call('ZSCORE', KEYS[1], ARGV[1])
if first then return first end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1) end
if redis.call('EXPIRE', KEYS[1], ARGV[3], 'GT') == 0 and redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return ARGV[2]
"""


class RedisFaultCounters:
    def __init__(self, client: aioredis.Redis, *, prefix: str, keys_per_mailbox: int = KEYS_PER_MAILBOX) -> None:
        self._redis = client
        self._prefix = prefix + "faults:"
        self._keys = keys_per_mailbox
        self._take = client.register_script(TAKE)
        self._rate = client.register_script(RATE)
        self._seen = client.register_script(SEEN)

    @classmethod
    def from_url(cls, url: str, *, prefix: str) -> RedisFaultCounters:
        return cls(aioredis.Redis.from_url(url), prefix=prefix)

    async def take(self, mailbox: str, key: str, *, limit: int, ttl: float) -> bool:
        name = f"{self._prefix}times:{mailbox}:{key}"
        return bool(await self._take(keys=[name], args=[limit, math.ceil(ttl)]))

    async def rate(self, mailbox: str, key: str, *, messages: int, per_s: float, now: float) -> bool:
        args: list[str | int] = [repr(now), repr(per_s), messages, uuid.uuid4().hex]
        return bool(await self._rate(keys=[f"{self._prefix}rate:{mailbox}:{key}"], args=args))

    async def first_seen(self, mailbox: str, key: str, *, now: float, ttl: float) -> float:
        name = self.seen_key(mailbox)
        found = await self._seen(keys=[name], args=[key, repr(now), math.ceil(ttl), self._keys])
        return float(found)

    def seen_key(self, mailbox: str) -> str:
        """The sorted set of `mailbox`'s greylisting triplets."""
        return f"{self._prefix}seen:{mailbox}"

    async def close(self) -> None:
        await self._redis.aclose()
