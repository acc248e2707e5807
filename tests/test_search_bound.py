"""The bound on filters no index answers (`INBOXD_FILTER_SCAN_ROWS`): `from`, `to`, `subject` (ASCII
and not), `unread` and `has_attachments` read at most the newest N messages within `since`/`until`;
a page they leave short while older messages remain is 422 `filter_too_broad`, on both databases.
Full text alone is not bounded, and a wait still finds new mail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import Clock, Harness
from tests.test_search import message, send_many

SCAN = 5


@pytest.fixture
async def bounded(make_settings: Any, clock: Clock) -> AsyncIterator[Harness]:
    async with Inboxd(make_settings(filter_scan_rows=SCAN), clock=clock) as server:
        assert server.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)


async def indexed(h: Harness, box: dict[str, Any], count: int) -> None:
    """Until the indexer has every message: `q` alone is not bounded."""
    async with asyncio.timeout(10):
        while len((await page(h, box, q="zebra")).json()["messages"]) < count:
            await asyncio.sleep(0.05)


async def send_apart(h: Harness, box: dict[str, Any], messages: list[Any]) -> None:
    """Each message in a millisecond of its own: the test takes stored times, shown to the millisecond,
    as bounds, and two messages stored in one millisecond would both fall inside such a bound."""
    for msg in messages:
        await asyncio.to_thread(send_many, h.server.smtp_port, box["address"], [msg])
        h.clock.advance(0.002)


async def page(h: Harness, box: dict[str, Any], **params: str) -> httpx.Response:
    return await h.http.get(f"/api/accounts/{box['id']}/messages", params=params, headers=h.auth())


async def test_a_filter_past_its_bound_is_422_and_a_narrower_range_finds_the_match(bounded: Harness) -> None:
    h = bounded
    box = await h.new_mailbox()
    old = [message("Rare notice", "zebra one", sender="rare@example.org", to="Team <team@example.test>")]
    old.append(message("Grüße aus Köln", "zebra two"))
    newer = [message(f"Newsletter {i}", "zebra more") for i in range(SCAN + 2)]
    await send_apart(h, box, old + newer)
    await indexed(h, box, len(old) + len(newer))
    everything = (await page(h, box)).json()["messages"]
    assert len(everything) == len(old) + len(newer)
    for params in ({"from": "rare@"}, {"subject": "grüße"}, {"subject": "KÖLN"}, {"to": "team@"}):
        refused = await page(h, box, **params)
        assert refused.status_code == 422, (params, refused.text)
        assert refused.json()["error"] == "filter_too_broad" and "`since`" in refused.json()["message"]
    # A range the list index answers, holding fewer than the bound: read in full.
    until = everything[-3]["created_at"]  # the third oldest: the two old messages lie before it
    for params, subject in (({"from": "rare@"}, "Rare notice"), ({"subject": "grüße"}, "Grüße aus Köln")):
        found = await page(h, box, until=until, **params)
        assert found.status_code == 200, found.text
        assert [m["subject"] for m in found.json()["messages"]] == [subject]
    # Full text alone uses its index: no bound.
    searched = await page(h, box, q="zebra one")
    assert [m["subject"] for m in searched.json()["messages"]] == ["Rare notice"]
    # Under the bound, a filter that fills no page but read every message in range answers as before.
    recent = await page(h, box, subject="newsletter", since=everything[SCAN - 1]["created_at"])
    assert recent.status_code == 200 and len(recent.json()["messages"]) == SCAN
    # Full text with a row filter is bounded the same way (FTS5 walks its rowids down to the bound's).
    since = everything[SCAN - 1]["created_at"]
    both = await page(h, box, q="zebra", subject="newsletter", since=since)
    assert [m["subject"] for m in both.json()["messages"]] == [m["subject"] for m in everything[:SCAN]]
    assert (await page(h, box, q="zebra", **{"from": "rare"})).status_code == 422


async def test_a_wait_reads_within_the_bound_and_finds_new_mail(bounded: Harness) -> None:
    h = bounded
    box = await h.new_mailbox()
    batch = [message("Old code", "x", sender="codes@example.org")]
    batch += [message(f"Filler {i}", "x") for i in range(SCAN + 1)]
    await asyncio.to_thread(send_many, h.server.smtp_port, box["address"], batch)
    url = f"/api/accounts/{box['id']}/messages/wait"
    # The old match is past the bound: a wait is for new mail, and none comes.
    missed = await h.http.get(url, params={"from": "codes@", "timeout": "0"}, headers=h.auth())
    assert missed.status_code == 408, missed.text
    waiting = asyncio.ensure_future(h.http.get(url, params={"from": "codes@", "timeout": "20"}, headers=h.auth()))
    await asyncio.wait_for(h.server.services.waits.registered(1, mailbox_id=box["id"]), 10)
    new = message("New code", "y", sender="codes@example.org")
    await asyncio.to_thread(send_many, h.server.smtp_port, box["address"], [new])
    answer = await asyncio.wait_for(waiting, 15)
    assert answer.status_code == 200, answer.text
    assert answer.json()["subject"] == "New code"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_sandbox_list_has_the_same_bound(bounded: Harness) -> None:
    from tests.test_submission import open_sandbox

    h = bounded
    sandbox = await open_sandbox(h.http, await h.new_user("pro"), h.server.submission_port)
    await asyncio.to_thread(sandbox.send, ["ann@example.org"], message("Early", "x").as_bytes())
    for i in range(SCAN + 1):
        await asyncio.to_thread(sandbox.send, ["bob@example.org"], message(f"Later {i}", "x").as_bytes())
    refused = await h.http.get("/api/user/sandbox/messages", params={"subject": "early"}, headers=sandbox.auth())
    assert refused.status_code == 422 and refused.json()["error"] == "filter_too_broad"
