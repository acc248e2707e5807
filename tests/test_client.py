"""inboxd.client against a real inboxd: the async client through the whole API, the sync one in a
thread, waits, errors and the retry of 429 answers."""

from __future__ import annotations

import asyncio
import smtplib
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.client import ApiError, AsyncClient, Client, NoCodeFound, WaitTimedOut
from tests.conftest import Clock, Harness, simple_message
from tests.test_accounts import dashboard_mailbox

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def url(harness: Harness) -> str:
    return f"http://127.0.0.1:{harness.server.http_port}"


async def test_async_client_mailboxes_and_messages(harness: Harness) -> None:
    async with AsyncClient(url(harness), harness.admin_token) as client:
        assert (await client.health())["status"] == "ok"
        box = await client.create_mailbox()
        assert box.address.endswith("@" + harness.domain) and box.token
        assert (await client.mailbox(box.address)).id == box.id
        await harness.send(box.address, simple_message(subject="Welcome", body="Hello there."))
        html = '<p>Your verification code is <b>482913</b></p><a href="https://app.example/v?t=1">Verify</a>'
        message = simple_message(subject="Verify your email", body="Code: 482913")
        message.add_alternative(html, subtype="html")
        await harness.send(box.address, message)

        found = await client.wait_for(box.id, subject="verify", timeout=10)
        assert found.subject == "Verify your email"
        assert found.code == "482913" and found.codes == ("482913",)
        assert [(link.url, link.text) for link in found.links] == [("https://app.example/v?t=1", "Verify")]
        assert found.header("subject") == "Verify your email"
        assert found.to == "someone@example.test" and found.is_read is False

        listed = await client.messages(box.id)
        assert [m.subject for m in listed] == ["Verify your email", "Welcome"]
        assert [m.subject for m in await client.messages(box.id, subject="welcome")] == ["Welcome"]
        welcome = listed[1]
        with pytest.raises(NoCodeFound, match="no one-time code found in message 'Welcome'"):
            _ = (await client.message(box.id, welcome.id)).code
        assert b"Subject: Welcome" in await client.source(box.id, welcome.id)
        await client.mark_read(box.id, welcome.id)
        assert [m.subject for m in await client.messages(box.id, unread=True)] == ["Verify your email"]
        assert await client.mark_all_read(box.id) == 1
        await client.delete_message(box.id, welcome.id)
        with pytest.raises(ApiError) as gone:
            await client.message(box.id, welcome.id)
        assert (gone.value.status, gone.value.code) == (404, "not_found")
        await client.delete_mailbox(box.id)
        with pytest.raises(ApiError, match="404 not_found"):
            await client.mailbox(box.id)


async def test_wait_answers_the_moment_mail_arrives_and_times_out(harness: Harness) -> None:
    async with AsyncClient(url(harness), harness.admin_token) as client:
        box = await client.create_mailbox()
        since = datetime.now(UTC) - timedelta(seconds=1)
        waiting = asyncio.ensure_future(client.wait_for(box.id, subject="later", since=since, timeout=20))
        await asyncio.wait_for(harness.server.services.waits.registered(1), 10)
        assert not waiting.done()
        await harness.send(box.address, simple_message(subject="Sent later", body="Your code is 551177."))
        found = await asyncio.wait_for(waiting, 15)
        assert found.code == "551177"
        started = asyncio.get_running_loop().time()
        with pytest.raises(WaitTimedOut) as timed_out:
            await client.wait_for(box.id, subject="never", timeout=0.5)
        assert timed_out.value.status == 408 and timed_out.value.code == "timeout"
        assert asyncio.get_running_loop().time() - started < 10
        with pytest.raises(ValueError, match="timezone-aware"):
            await client.messages(box.id, since=datetime(2026, 1, 1))


@sqlite_only
async def test_pro_operations_and_the_sandbox(harness: Harness) -> None:
    token = await harness.new_user("pro")
    async with AsyncClient(url(harness), token) as client:
        assert (await client.me())["plan"] == "pro"
        box = await client.create_mailbox()
        assert [a["address"] for a in (await client.accounts())["accounts"]] == [box.address]
        await harness.send(box.address, simple_message(subject="For the account", body="PIN: 4410"))
        assert (await client.wait_for_account(box.id, timeout=10)).code == "4410"
        assert [m.subject for m in await client.account_messages(box.id)] == ["For the account"]
        created = await client.create_token("ci")
        assert sorted(t["name"] for t in (await client.tokens())["tokens"]) == ["ci", "test"]
        await client.revoke_token(created["id"])
        assert (await client.user_domains())["domains"] == []
        hook = await client.create_webhook("https://hooks.example.com/in", ["email.received"])
        assert [w["id"] for w in (await client.webhooks())["webhooks"]] == [hook["id"]]
        await client.delete_webhook(hook["id"])

        sandbox = await client.sandbox()
        assert sandbox.smtp_port == harness.server.submission_port

        def submit() -> None:
            with smtplib.SMTP("127.0.0.1", sandbox.smtp_port, timeout=30) as smtp:
                smtp.login(sandbox.username, token)
                smtp.send_message(simple_message(subject="From the app", body="Your code is 880011"))

        await asyncio.to_thread(submit)
        captured = await client.wait_for_sandbox(subject="from the app", timeout=10)
        assert captured.code == "880011" and captured.recipients == ("someone@example.test",)
        assert (captured.to, captured.cc) == ("someone@example.test", "")  # one type, as in `Message`
        assert [m.subject for m in await client.sandbox_messages()] == ["From the app"]
        assert (await client.sandbox_message(captured.id)).id == captured.id
        assert await client.purge_sandbox() == 1
        await client.delete_account(box.id)


async def test_the_users_other_mailboxes_are_reached_through_the_users_routes(harness: Harness) -> None:
    """A mailbox made in the dashboard answers 404 on the token's routes; the clients list, wait,
    read, reset and delete it through the user's, and a stranger's 404 stays a 404."""
    made = await dashboard_mailbox(harness, "made-in-dashboard")
    await harness.send(made["address"], simple_message(subject="Welcome to the dashboard", body="PIN: 7213"))
    async with AsyncClient(url(harness), harness.admin_token) as client:
        assert [m.subject for m in await client.messages(made["address"])] == ["Welcome to the dashboard"]
        assert (await client.wait_for(made["id"], timeout=10)).code == "7213"
        assert [m.subject for m in await client.messages(made["id"], subject="nothing like it")] == []
        await client.reset_password(made["address"], "another-secret")
    async with AsyncClient(url(harness), harness.admin_token) as client:  # a new client: nothing remembered
        waited = await client.wait_for(made["address"], timeout=10)
        assert (await client.message(made["address"], waited.id)).text_body.startswith("PIN: 7213")
    async with AsyncClient(url(harness), harness.admin_token) as client:  # its source and checks too
        assert b"Subject: Welcome to the dashboard" in await client.source(made["address"], waited.id)
        assert (await client.checks(made["id"], waited.id)).content.verdict in ("ok", "warning", "error")

    def sync() -> list[str]:
        with Client(url(harness), harness.admin_token) as client:
            subjects = [m.subject for m in client.messages(made["address"])]
            assert client.message(made["id"], client.messages(made["id"])[0].id).code == "7213"
            assert client.wait_for(made["address"], timeout=10).code == "7213"
            client.delete_mailbox(made["address"])
            with pytest.raises(ApiError) as gone:
                client.messages(made["address"])
            assert gone.value.status == 404 and gone.value.message == "No such mailbox."
            return subjects

    assert await asyncio.to_thread(sync) == ["Welcome to the dashboard"]

    other = await dashboard_mailbox(harness, "not-yours")
    stranger = await harness.new_user()
    async with AsyncClient(url(harness), stranger) as client:
        for attempt in (client.messages(other["address"]), client.delete_mailbox(other["id"])):
            with pytest.raises(ApiError) as refused:
                await attempt
            assert (refused.value.status, refused.value.code, refused.value.message) == (
                404,
                "not_found",
                "No such mailbox.",
            )
    assert (await harness.http.get(f"/api/user/accounts/{other['id']}/messages", headers=harness.auth())).is_success


@sqlite_only
async def test_sync_client(harness: Harness) -> None:
    def run() -> tuple[str, list[str]]:
        with Client(url(harness), harness.admin_token) as client:
            box = client.create_mailbox(f"sync@{harness.domain}", "secret123")
            signed_in = client.sign_in(box.address, "secret123")
            assert signed_in.id == box.id and signed_in.token
            harness_send(box.address)
            found = client.wait_for(box.address, q="verif*", timeout=10)
            with Client(url(harness), signed_in.token) as own:
                subjects = [m.subject for m in own.messages(box.address)]
            client.delete_mailbox(box.address)
            return found.code, subjects

    def harness_send(address: str) -> None:
        with smtplib.SMTP("127.0.0.1", harness.server.smtp_port, timeout=30) as smtp:
            message = simple_message(subject="Verification", body="Your verification code: 300 201")
            smtp.send_message(message, to_addrs=[address])

    assert await asyncio.to_thread(run) == ("300201", ["Verification"])


@sqlite_only
async def test_rate_limited_requests_are_retried(make_settings: Any, clock: Clock) -> None:
    server = Inboxd(make_settings(pro_rps=2.0), clock=clock)
    await server.start()
    try:
        assert server.bootstrap_token is not None
        statuses: list[int] = []

        async def record(response: httpx.Response) -> None:
            statuses.append(response.status_code)

        base = f"http://127.0.0.1:{server.http_port}"
        http = httpx.AsyncClient(base_url=base, event_hooks={"response": [record]})
        async with AsyncClient(base, server.bootstrap_token, http=http) as client:
            for _ in range(6):
                assert (await client.me())["plan"] == "pro"
        assert 429 in statuses and statuses.count(200) == 6
    finally:
        await server.stop()
