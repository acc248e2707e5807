"""The limits' counters in Redis, shared by every inboxd process that uses the same Redis and prefix.

One admission is one `EVALSHA` round trip: a Lua script refills and takes from the user's
bucket, checks the mailbox-creation interval, and increments the month's operation counter,
atomically. Time comes from the caller's clock as an argument (never Redis's `TIME`), so every
process and every test agrees on it; Redis expiry only collects idle keys.

Keys, under `settings.redis_prefix` (the user id in braces keeps one user's keys in one cluster slot):

    limits:{<user>}:bucket        hash t (tokens), ts (last refill)
    limits:{<user>}:created       last admitted mailbox creation
    limits:{<user>}:ops:<YYYY-MM> the month's operations (INCR)
    limits:public:<client>        hash, per-client bucket of the public paths
    limits:login:<realm>:pair|client|addr:<key>  sorted sets of failed sign-in times
    limits:wait:{<user>}:…        sorted set of held places (open waits), scored by their expiry

The month counter is seeded from the database when missing (a new month, or Redis restarted): the
script answers "seed" without changing anything, the limiter reads `ops_usage` plus what this
process has not flushed yet, and calls again with that seed (two round trips, once per user and
month). After a Redis restart, operations other processes had not flushed yet are missing from
the seed until the month ends: at most one flush interval's worth.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from inboxd.errors import StorageError
from inboxd.services.limits_counters import Outcome, Pace, Take, Verdict


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Redis faults become our `StorageError`, answered as database faults are."""
    try:
        yield
    except RedisError as exc:
        raise StorageError() from exc


# The bucket refill both scripts begin with: KEYS[1] is the bucket, `now`, `rate` and `burst` are
# set; it leaves `tokens` (refilled, not yet taken from) and `stamp` (the refill time to store).
REFILL = """
local state = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = burst
local stamp = ARGV[1]
if state[1] then
  tokens = math.min(burst, tonumber(state[1]) + math.max(0, now - tonumber(state[2])) * rate)
  if tonumber(state[2]) > now then stamp = state[2] end
end
"""

# KEYS: bucket, created, ops. ARGV: now, rate, burst, creates (0/1), interval, ops limit, seed
# (-1: none), ops ttl. Answers {outcome, tokens, retry_after, ops_used}; floats as strings, since
# Redis turns Lua numbers into integers. 0.999999 tokens are enough, as in limits_memory.py.
TAKE = (
    """
local now = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local interval = tonumber(ARGV[5])
local used = redis.call('GET', KEYS[3])
if not used then
  local seed = tonumber(ARGV[7])
  if seed < 0 then return {4, '0', '0', 0} end
  redis.call('SET', KEYS[3], seed, 'EX', ARGV[8])
  used = seed
else
  used = tonumber(used)
end
"""
    + REFILL
    + """if tokens < 0.999999 then
  return {1, string.format('%.17g', tokens), string.format('%.17g', (1 - tokens) / rate), used}
end
if ARGV[4] == '1' and interval > 0 then
  local last = redis.call('GET', KEYS[2])
  if last then
    local wait = tonumber(last) + interval - tonumber(ARGV[1])
    if wait > 0 then return {2, string.format('%.17g', tokens), string.format('%.17g', wait), used} end
  end
end
tokens = tokens - 1
redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens), 'ts', stamp)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
if used >= tonumber(ARGV[6]) then return {3, string.format('%.17g', tokens), '0', used} end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[2], ARGV[1], 'EX', math.ceil(interval) + 60)
end
used = redis.call('INCR', KEYS[3])
return {0, string.format('%.17g', tokens), '0', used}
"""
)

# KEYS: ops. ARGV: ops limit, seed (-1: none), ops ttl. Answers {outcome, ops_used}: one more
# operation counted unless the month is at its limit; no bucket is touched.
COUNT = """
local used = redis.call('GET', KEYS[1])
if not used then
  local seed = tonumber(ARGV[2])
  if seed < 0 then return {4, 0} end
  redis.call('SET', KEYS[1], seed, 'EX', ARGV[3])
  used = seed
else
  used = tonumber(used)
end
if used >= tonumber(ARGV[1]) then return {3, used} end
return {0, redis.call('INCR', KEYS[1])}
"""

# KEYS: bucket. ARGV: now, rate, burst. Answers seconds to wait, "0" when a token was taken.
HIT = (
    """
local now = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
"""
    + REFILL
    + """if tokens < 0.999999 then return string.format('%.17g', (1 - tokens) / rate) end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', tokens - 1), 'ts', stamp)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 60)
return '0'
"""
)

# KEYS: failure logs, then (when ARGV[6] > 0) the paced log and the log that decides whether it
# applies. ARGV: now, window, limit, member, ttl, pace after (0: no pace), pace at most. Adds the
# member to every log but the deciding one when nothing asks a wait and answers '0'; else adds
# nothing and answers the seconds to wait (as `limits.pace_wait` for the paced log).
RESERVE = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local after = tonumber(ARGV[6])
local logs = #KEYS
if after > 0 then logs = #KEYS - 2 end
local wait = 0
for i = 1, logs do
  local key = KEYS[i]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    wait = math.max(wait, tonumber(oldest[2] or now) + window - now, 0.001)
  end
end
if after > 0 then
  local paced = KEYS[#KEYS - 1]
  redis.call('ZREMRANGEBYSCORE', paced, '-inf', now - window)
  redis.call('ZREMRANGEBYSCORE', KEYS[#KEYS], '-inf', now - window)
  local entries = redis.call('ZCARD', paced)
  if entries >= after and redis.call('ZCARD', KEYS[#KEYS]) > 0 then
    local newest = redis.call('ZRANGE', paced, -1, -1, 'WITHSCORES')
    local delay = math.min(2 ^ math.min(entries - after, 62), tonumber(ARGV[7]))
    wait = math.max(wait, tonumber(newest[2]) + delay - now)
  end
  logs = logs + 1
end
if wait > 0 then return string.format('%.17g', math.max(wait, 0.001)) end
for i = 1, logs do
  redis.call('ZADD', KEYS[i], now, ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[5])
end
return '0'
"""

# KEYS: held sets. ARGV: now, until, member, ttl, then each set's cap. Drops expired places, then
# adds the member (scored with its expiry) to every set when none is full: 1; else nothing: 0.
HOLD = """
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1])
  if redis.call('ZCARD', key) >= tonumber(ARGV[4 + i]) then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[2], ARGV[3])
  redis.call('EXPIRE', key, ARGV[4])
end
return 1
"""

# KEYS: created. ARGV: the stamp a take set. Forgets it only if no later take replaced it.
RELEASE_CREATION = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisCounters:
    def __init__(self, client: aioredis.Redis, *, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix + "limits:"
        self._take = client.register_script(TAKE)
        self._hit = client.register_script(HIT)
        self._reserve = client.register_script(RESERVE)
        self._release_creation = client.register_script(RELEASE_CREATION)
        self._count = client.register_script(COUNT)
        self._hold = client.register_script(HOLD)

    @classmethod
    def from_url(cls, url: str, *, prefix: str) -> RedisCounters:
        return cls(aioredis.Redis.from_url(url), prefix=prefix)

    def _user(self, user_id: str, what: str) -> str:
        return f"{self._prefix}{{{user_id}}}:{what}"

    async def take(self, take: Take) -> Verdict:
        rule = take.rule
        keys = [
            self._user(take.user_id, "bucket"),
            self._user(take.user_id, "created"),
            self._user(take.user_id, f"ops:{take.month}"),
        ]
        args: list[Any] = [
            repr(take.now),
            repr(rule.rate),
            repr(rule.burst),
            1 if take.creates_mailbox else 0,
            repr(rule.create_interval),
            rule.ops_limit,
            -1 if take.seed is None else take.seed,
            max(1, take.ops_ttl),
        ]
        with _unavailable():
            outcome, tokens, retry_after, used = await self._take(keys=keys, args=args)
        return Verdict(Outcome(int(outcome)), tokens=float(tokens), retry_after=float(retry_after), ops_used=int(used))

    async def count(self, take: Take) -> Verdict:
        key = self._user(take.user_id, f"ops:{take.month}")
        args = [take.rule.ops_limit, -1 if take.seed is None else take.seed, max(1, take.ops_ttl)]
        with _unavailable():
            outcome, used = await self._count(keys=[key], args=args)
        return Verdict(Outcome(int(outcome)), tokens=0.0, retry_after=0.0, ops_used=int(used))

    async def ops_used(self, user_id: str, month: str) -> int | None:
        with _unavailable():
            value = await self._redis.get(self._user(user_id, f"ops:{month}"))
        return None if value is None else int(value)

    async def hit(self, key: str, *, now: float, rate: float, burst: float) -> float:
        with _unavailable():
            wait = await self._hit(keys=[self._prefix + key], args=[repr(now), repr(rate), repr(burst)])
        return float(wait)

    async def release_creation(self, user_id: str, stamp: float) -> None:
        with _unavailable():
            await self._release_creation(keys=[self._user(user_id, "created")], args=[repr(stamp)])

    async def reserve(
        self, keys: tuple[str, ...], *, member: str, now: float, window: float, limit: int, pace: Pace | None = None
    ) -> float:
        names = [self._prefix + key for key in keys]
        args: list[Any] = [repr(now), repr(window), limit, member, math.ceil(window) + 60, 0, 0]
        if pace is not None:
            names += [self._prefix + pace.key, self._prefix + pace.when_key]
            args[5:] = [pace.after, repr(pace.most)]
        with _unavailable():
            wait = await self._reserve(keys=names, args=args)
        return float(wait)

    async def release(self, keys: tuple[str, ...], *, member: str) -> None:
        with _unavailable():
            async with self._redis.pipeline(transaction=True) as pipe:
                for key in keys:
                    pipe.zrem(self._prefix + key, member)
                await pipe.execute()

    async def clear_failures(self, key: str) -> None:
        with _unavailable():
            await self._redis.delete(self._prefix + key)

    async def hold(self, caps: tuple[tuple[str, int], ...], *, member: str, now: float, until: float) -> bool:
        names = [self._prefix + key for key, _ in caps]
        args: list[Any] = [repr(now), repr(until), member, math.ceil(until - now) + 60, *(cap for _, cap in caps)]
        with _unavailable():
            taken = await self._hold(keys=names, args=args)
        return bool(int(taken))

    async def let_go(self, keys: tuple[str, ...], *, member: str) -> None:
        with _unavailable():
            async with self._redis.pipeline(transaction=True) as pipe:
                for key in keys:
                    pipe.zrem(self._prefix + key, member)
                await pipe.execute()

    def prune(self, *, now: float, month: str) -> None:
        return None  # Redis expiry collects idle keys.

    async def close(self) -> None:
        await self._redis.aclose()
