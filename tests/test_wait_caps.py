"""Caps on open waits (`INBOXD_MAX_WAITS_PER_MAILBOX`, `INBOXD_MAX_WAITS_PER_USER`): one more is 429
`too_many_waits`; a wait gives its place back however it ends (a match, a timeout, the client
leaving), and with Redis two servers count one set of places."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import REDIS_URL, Clock, Harness, simple_message


@asynccontextmanager
async def serving(settings: Any, clock: Clock) -> AsyncIterator[Harness]:
    async with (
        Inboxd(settings, clock=clock) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http,
    ):
        yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token or "")


def wait_url(box: dict[str, Any]) -> str:
    return f"/api/accounts/{box['id']}/messages/wait"


def start_wait(h: Harness, box: dict[str, Any], token: str | None = None, timeout: str = "30") -> asyncio.Future[Any]:
    params = {"subject": "never", "timeout": timeout}
    return asyncio.ensure_future(h.http.get(wait_url(box), params=params, headers=h.auth(token)))


async def raw_wait(h: Harness, box: dict[str, Any]) -> asyncio.StreamWriter:
    """A wait on a socket of its own, so the test can drop the connection under it."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", h.server.http_port)
    writer.write(
        f"GET {wait_url(box)}?subject=never&timeout=60 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {h.admin_token}\r\n\r\n".encode()
    )
    await writer.drain()
    return writer


def assert_too_many(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"] == "too_many_waits" and answer.json()["message"]
    assert "Retry-After" in answer.headers


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_waits_beyond_the_caps_are_429_per_mailbox_and_per_user(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(max_waits_per_mailbox=2, max_waits_per_user=3)
    async with serving(settings, clock) as h:
        waits = h.server.services.waits
        a, b, c = [await h.new_mailbox() for _ in range(3)]
        held = [start_wait(h, a), start_wait(h, a)]
        await asyncio.wait_for(waits.registered(2, mailbox_id=a["id"]), 10)
        assert_too_many(await h.http.get(wait_url(a), params={"timeout": "0"}, headers=h.auth()))
        # Another mailbox of the same user has room, until the user's cap is reached.
        held.append(start_wait(h, b))
        await asyncio.wait_for(waits.registered(3), 10)
        assert_too_many(await h.http.get(wait_url(c), params={"timeout": "0"}, headers=h.auth()))
        # Another user is not held back by this one's waits; the /api/user route counts the same places.
        other = await h.new_user("pro")
        mine = await h.new_mailbox(other)
        own = await h.http.get(wait_url(mine), params={"timeout": "0"}, headers=h.auth(other))
        assert own.status_code == 408, own.text
        user_route = f"/api/user/accounts/{c['id']}/messages/wait"
        assert_too_many(await h.http.get(user_route, params={"timeout": "0"}, headers=h.auth()))
        # A match ends a wait and gives its place back.
        await h.send(a["address"], simple_message(subject="never mind"))
        done = await asyncio.wait_for(asyncio.gather(*held[:2]), 15)
        assert [r.status_code for r in done] == [200, 200]
        await asyncio.wait_for(waits.settled(1), 10)
        now = await h.http.get(wait_url(c), params={"timeout": "0"}, headers=h.auth())
        assert now.status_code == 408, now.text
        held[2].cancel()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_timed_out_or_abandoned_wait_leaves_no_place_taken(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(max_waits_per_mailbox=1, max_waits_per_user=1)
    async with serving(settings, clock) as h:
        waits = h.server.services.waits
        box = await h.new_mailbox()
        for _ in range(3):  # timed out, again and again: each gives its place back
            timed_out = await h.http.get(wait_url(box), params={"subject": "never", "timeout": "0.2"}, headers=h.auth())
            assert timed_out.status_code == 408, timed_out.text
        for _ in range(3):  # the client leaves while its wait is open
            writer = await raw_wait(h, box)
            await asyncio.wait_for(waits.registered(1, mailbox_id=box["id"]), 10)
            assert_too_many(await h.http.get(wait_url(box), params={"timeout": "0"}, headers=h.auth()))
            writer.close()
            await asyncio.wait_for(waits.settled(0), 10)
        last = await h.http.get(wait_url(box), params={"timeout": "0"}, headers=h.auth())
        assert last.status_code == 408, last.text


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.timeout(120)
async def test_with_redis_two_servers_count_one_set_of_places(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(
        redis_url=REDIS_URL, secret_key="shared-waits", max_waits_per_mailbox=1, max_waits_per_user=5
    )
    async with serving(settings, clock) as first, serving(settings, clock) as second:
        second.admin_token = first.admin_token
        box = await first.new_mailbox()
        writer = await raw_wait(first, box)
        await asyncio.wait_for(first.server.services.waits.registered(1), 10)
        assert_too_many(await second.http.get(wait_url(box), params={"timeout": "0"}, headers=second.auth()))
        writer.close()
        await asyncio.wait_for(first.server.services.waits.settled(0), 10)
        waiting = start_wait(second, box, timeout="20")
        await asyncio.wait_for(second.server.services.waits.registered(1), 10)
        assert_too_many(await first.http.get(wait_url(box), params={"timeout": "0"}, headers=first.auth()))
        await first.send(box["address"], simple_message(subject="never again"))
        assert (await asyncio.wait_for(waiting, 15)).status_code == 200


async def test_in_redis_a_place_whose_process_died_lapses_after_its_lifetime() -> None:
    from inboxd.services.limits_redis import RedisCounters

    counters = RedisCounters.from_url(REDIS_URL, prefix=f"inboxd-test:{uuid.uuid4().hex[:8]}:")
    try:
        caps = (("wait:{user}:all", 1),)
        # Taken by a process that then died: never given back.
        assert await counters.hold(caps, member="dead", now=1000.0, until=1090.0)
        assert not await counters.hold(caps, member="next", now=1089.0, until=1200.0)
        assert await counters.hold(caps, member="next", now=1090.5, until=1200.0)
        await counters.let_go(("wait:{user}:all",), member="next")
        assert await counters.hold(caps, member="last", now=1091.0, until=1200.0)
    finally:
        await counters.close()
