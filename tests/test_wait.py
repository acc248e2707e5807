"""`GET …/messages/wait`: the newest matching message at once or the moment it is committed, 408 on
timeout, 400 on a bad timeout, nothing left behind by a client that leaves, across processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from inboxd.events import Fanout
from tests.conftest import Harness, send_mail, simple_message
from tests.test_events_redis import two_processes


def wait_url(box: dict[str, Any]) -> str:
    return f"/api/accounts/{box['id']}/messages/wait"


async def registered(harness: Harness, count: int = 1) -> None:
    """Until `count` waits listen: mail sent after this cannot slip past them."""
    await asyncio.wait_for(harness.server.services.waits.registered(count), 10)


@pytest.mark.alone  # a bound on time
async def test_an_existing_match_answers_at_once_with_the_detail(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Verify your account"))
    await harness.send(box["address"], simple_message(subject="Newsletter"))
    started = time.monotonic()
    answer = await harness.http.get(
        wait_url(box), params={"subject": "verify", "timeout": "30"}, headers=harness.auth()
    )
    assert answer.status_code == 200, answer.text
    assert time.monotonic() - started < 5
    body = answer.json()
    assert body["subject"] == "Verify your account"
    assert body["text_body"].startswith("Your code is 123456.")
    assert body["address"] == box["address"]
    detail = await harness.http.get(f"/api/accounts/{box['id']}/messages/{body['id']}", headers=harness.auth())
    assert detail.json() == body  # the same encoder as the detail route
    # Without filters: the newest message.
    newest = await harness.http.get(wait_url(box), headers=harness.auth())
    assert newest.json()["subject"] == "Newsletter"


@pytest.mark.alone  # a bound on time
async def test_a_later_arrival_answers_the_moment_it_is_committed(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Old verify"))
    since = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"][
        0
    ]["created_at"]
    await asyncio.sleep(0.01)
    params = {"subject": "verify", "since": since, "timeout": "20"}
    # `since` is inclusive: the old message is still there with its own timestamp as the bound...
    first = await harness.http.get(wait_url(box), params=params, headers=harness.auth())
    assert first.json()["subject"] == "Old verify"
    # ...and a bound after it waits for what comes next; a non-matching message does not end the wait.
    params["since"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(harness.clock() + 1)) + "Z"
    waiting = asyncio.ensure_future(harness.http.get(wait_url(box), params=params, headers=harness.auth()))
    await registered(harness)
    harness.clock.advance(1.5)  # what arrives next is after `since`
    await harness.send(box["address"], simple_message(subject="Unrelated"))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await harness.send(box["address"], simple_message(subject="Please verify"))
    sent = time.monotonic()
    answer = await asyncio.wait_for(waiting, 15)
    assert time.monotonic() - sent < 2
    assert answer.status_code == 200, answer.text
    assert answer.json()["subject"] == "Please verify"


async def test_full_text_waits_wake_when_the_index_catches_up(harness: Harness) -> None:
    box = await harness.new_mailbox()
    waiting = asyncio.ensure_future(
        harness.http.get(wait_url(box), params={"q": "zebra", "timeout": "20"}, headers=harness.auth())
    )
    await registered(harness)
    await harness.send(box["address"], simple_message(subject="Hi", body="A zebra crossed.\n"))
    answer = await asyncio.wait_for(waiting, 15)
    assert answer.status_code == 200, answer.text
    assert "zebra" in answer.json()["text_body"]


@pytest.mark.alone  # a bound on time
async def test_no_match_within_the_timeout_is_408(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Something else"))
    started = time.monotonic()
    answer = await harness.http.get(wait_url(box), params={"subject": "verify", "timeout": "1"}, headers=harness.auth())
    elapsed = time.monotonic() - started
    assert answer.status_code == 408
    body = answer.json()
    assert body["error"] == "timeout" and body["message"]
    assert 0.9 <= elapsed < 2  # the 1 s asked for, not several
    assert "RateLimit-Limit" in answer.headers
    instant = await harness.http.get(
        wait_url(box), params={"subject": "verify", "timeout": "0"}, headers=harness.auth()
    )
    assert instant.status_code == 408


async def test_a_timeout_out_of_range_or_a_malformed_filter_is_400(harness: Harness) -> None:
    box = await harness.new_mailbox()
    cases = [{"timeout": t} for t in ("61", "60.5", "-1", "abc", "1e3", "100000")] + [{"unread": "yes"}]
    for params in cases:
        answer = await harness.http.get(wait_url(box), params=params, headers=harness.auth())
        assert answer.status_code == 400, params
        assert answer.json()["error"] == "invalid_request"
        assert f"`{next(iter(params))}`" in answer.json()["message"]


async def test_a_client_that_leaves_ends_its_wait_and_leaves_no_listener(harness: Harness) -> None:
    box = await harness.new_mailbox()
    bus = harness.server.services.bus
    assert isinstance(bus, Fanout)
    waits = harness.server.services.waits
    baseline = bus.listener_count()
    _reader, writer = await asyncio.open_connection("127.0.0.1", harness.server.http_port)
    writer.write(
        f"GET {wait_url(box)}?q=never&timeout=60 HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {harness.admin_token}\r\n\r\n".encode()
    )
    await writer.drain()
    await asyncio.wait_for(waits.registered(1), 10)
    assert bus.listener_count() == baseline + 2  # new mail, and the index for the full text
    writer.close()
    await asyncio.wait_for(waits.settled(0), 10)
    assert bus.listener_count() == baseline == 0
    # The server is fine afterwards, and a later message wakes nobody stale.
    await harness.send(box["address"])
    listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    assert len(listed.json()["messages"]) == 1


async def test_user_route_waits_and_counts_as_one_operation(harness: Harness) -> None:
    token = await harness.new_user("pro")
    box = await harness.new_mailbox(token)
    principal = await harness.server.services.users.authenticate(token, harness.server.services.mailbox_tokens)
    admission = harness.server.services.admission
    before, _ = await admission.usage(principal.user)
    waiting = asyncio.ensure_future(
        harness.http.get(
            f"/api/user/accounts/{box['id']}/messages/wait",
            params={"from": "bob@", "timeout": "20"},
            headers=harness.auth(token),
        )
    )
    await registered(harness)
    for _ in range(3):  # wakes the wait without ending it
        await harness.send(box["address"], simple_message(sender="alice@example.org"))
    await harness.send(box["address"], simple_message(subject="From Bob", sender="bob@example.org"))
    answer = await asyncio.wait_for(waiting, 15)
    assert answer.status_code == 200, answer.text
    assert answer.json()["subject"] == "From Bob"
    after, _ = await admission.usage(principal.user)
    assert after - before == 1
    # A mailbox token may not use the /api/user route.
    refused = await harness.http.get(
        f"/api/user/accounts/{box['id']}/messages/wait", params={"timeout": "0"}, headers=harness.auth(box["token"])
    )
    assert refused.status_code == 403


@pytest.mark.alone  # a bound on time
async def test_stopping_the_server_ends_open_waits(make_settings: Any, clock: Any) -> None:
    from inboxd.app import Inboxd

    server = Inboxd(make_settings(), clock=clock)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
            created = await http.post(
                "/api/accounts",
                json={"address": f"stop@{server.settings.default_domain}", "password": "secret123"},
                headers=auth,
            )
            box = created.json()
            waiting = asyncio.ensure_future(http.get(wait_url(box), params={"timeout": "60"}, headers=auth))
            await asyncio.wait_for(server.services.waits.registered(1), 10)
            started = time.monotonic()
            await server.stop()
            answer = await asyncio.wait_for(waiting, 10)
            assert answer.status_code == 503
            assert time.monotonic() - started < 4
    finally:
        await server.stop()


@pytest.mark.alone  # a bound on time
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.timeout(180)
async def test_mail_accepted_by_another_process_ends_the_wait(make_settings: Any, tmp_path: Path) -> None:
    async with two_processes(make_settings, tmp_path) as (a, b):
        assert a.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{a.http_port}", timeout=30) as http:
            auth = {"Authorization": f"Bearer {a.bootstrap_token}"}
            created = await http.post(
                "/api/accounts", json={"address": "waiter@inboxd.localhost", "password": "secret123"}, headers=auth
            )
            assert created.status_code == 201, created.text
            box = created.json()
            for params in ({"subject": "cross", "timeout": "30"}, {"q": "crossing*", "timeout": "30"}):
                waiting = asyncio.ensure_future(http.get(wait_url(box), params=params, headers=auth))
                await asyncio.sleep(0.5)  # a child process: its waits cannot be counted from here
                assert not waiting.done()
                subject = "Cross process" if "subject" in params else "Other"
                message = simple_message(subject=subject, body="crossingsign\n" if "q" in params else "plain\n")
                await asyncio.to_thread(send_mail, b.smtp_port, box["address"], message)
                sent = time.monotonic()
                answer = await asyncio.wait_for(waiting, 20)
                assert answer.status_code == 200, answer.text
                assert answer.json()["subject"] == subject
                assert time.monotonic() - sent < 3


async def test_the_sandbox_lists_by_filter_and_waits(harness: Harness) -> None:
    from tests.test_submission import open_sandbox

    sandbox = await open_sandbox(harness.http, await harness.new_user("pro"), harness.server.submission_port)
    url = "/api/user/sandbox/messages"
    waiting = asyncio.ensure_future(
        harness.http.get(f"{url}/wait", params={"to": "dave@", "timeout": "20"}, headers=sandbox.auth())
    )
    await registered(harness)
    await asyncio.to_thread(sandbox.send, ["ann@example.org"], simple_message(subject="To Ann").as_bytes())
    # Dave only in the envelope (a Bcc): `to` finds him there.
    await asyncio.to_thread(
        sandbox.send, ["ann@example.org", "dave@example.org"], simple_message(subject="Bcc Dave").as_bytes()
    )
    answer = await asyncio.wait_for(waiting, 15)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["subject"] == "Bcc Dave" and body["recipients"] == ["ann@example.org", "dave@example.org"]
    listed = await harness.http.get(url, params={"subject": "ann"}, headers=sandbox.auth())
    assert [m["subject"] for m in listed.json()["messages"]] == ["To Ann"]
    async with asyncio.timeout(10):
        while True:
            found = await harness.http.get(url, params={"to": "dave"}, headers=sandbox.auth())
            if found.json()["messages"]:
                break
            await asyncio.sleep(0.05)
    assert [m["subject"] for m in found.json()["messages"]] == ["Bcc Dave"]
    timeout = await harness.http.get(
        f"{url}/wait", params={"subject": "nothing", "timeout": "0"}, headers=sandbox.auth()
    )
    assert timeout.status_code == 408 and timeout.json()["error"] == "timeout"
    bad = await harness.http.get(url, params={"has_attachments": "maybe"}, headers=sandbox.auth())
    assert bad.status_code == 400 and "`has_attachments`" in bad.json()["message"]
