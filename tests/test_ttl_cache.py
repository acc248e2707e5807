"""`TtlCache` (services/ttl_cache.py), the rules the credential, recipient and fault-set caches
share: kept for the TTL, None kept as an answer, a bound on the keys, a TTL of 0 keeps nothing, and
a lookup in flight across `clear` answers its caller but is not kept."""

from __future__ import annotations

import asyncio

from inboxd.services.ttl_cache import TtlCache


async def test_an_answer_is_kept_for_the_ttl_and_none_is_an_answer() -> None:
    cache: TtlCache[str, str | None] = TtlCache(ttl=2.0)
    lookups: list[str] = []

    async def lookup() -> str | None:
        lookups.append("read")
        return None

    assert await cache.answer("k", lookup, now=10.0) is None
    assert await cache.answer("k", lookup, now=11.9) is None
    assert lookups == ["read"]
    assert await cache.answer("k", lookup, now=12.0) is None  # as old as the TTL: read again
    assert lookups == ["read", "read"]


async def test_past_the_limit_the_cache_starts_over() -> None:
    cache: TtlCache[int, int] = TtlCache(ttl=2.0, limit=3)
    for key in range(3):
        assert cache.keep(key, key, at=0.0, generation=cache.generation)
    assert [cache.get(key, 1.0) for key in range(3)] == [0, 1, 2]
    assert cache.keep(3, 3, at=0.0, generation=cache.generation)
    assert [cache.get(key, 1.0) for key in range(4)] == [None, None, None, 3]


async def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache: TtlCache[str, int] = TtlCache(ttl=0.0)
    assert not cache.keep("k", 1, at=0.0, generation=cache.generation)
    assert cache.peek("k") is None


async def test_a_lookup_in_flight_across_a_clear_answers_but_is_not_kept() -> None:
    cache: TtlCache[str, str | None] = TtlCache(ttl=2.0)
    started, release = asyncio.Event(), asyncio.Event()

    async def slow() -> str | None:
        started.set()
        await release.wait()
        return "rules read before the change"

    task = asyncio.create_task(cache.answer("sandbox", slow, now=5.0))
    await started.wait()
    cache.clear()
    release.set()
    assert await task == "rules read before the change"
    assert cache.peek("sandbox") is None

    async def current() -> str | None:
        return None

    assert await cache.answer("sandbox", current, now=5.1) is None
    # Kept this time: the slow lookup is not asked again.
    assert await cache.answer("sandbox", slow, now=5.2) is None
