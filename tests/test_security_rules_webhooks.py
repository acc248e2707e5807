"""Webhook rules no other test held down: a host name with one public and one private address is
refused whole; a retry already queued is dropped once its webhook is deleted or its user
suspended, and never reaches the receiver."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.store.schema import webhook_jobs
from inboxd.store.sql import Statement
from tests.conftest import Clock, Harness
from tests.webhook_receiver import Receiver

Start = Callable[..., Awaitable[Harness]]
RETRY_LATER = 3600.0  # the second attempt's delay: far enough that only the test's clock reaches it
PAST_THE_RETRY = RETRY_LATER * 1.2  # past its jitter (10 %) too


@pytest.fixture
async def start(make_settings: Any, clock: Clock, receiver: Receiver) -> AsyncIterator[Start]:
    running: list[tuple[Inboxd, httpx.AsyncClient]] = []

    async def run(**overrides: Any) -> Harness:
        settings = make_settings(
            webhook_ca_file=str(receiver.ca_path),
            webhook_allow_private=True,
            webhook_poll_interval=0.05,
            webhook_retry_schedule=[0, RETRY_LATER],
            **overrides,
        )
        server = Inboxd(settings, clock=clock)
        await server.start()
        assert server.bootstrap_token is not None
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        running.append((server, http))
        return Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)

    try:
        yield run
    finally:
        for server, http in reversed(running):
            await http.aclose()
            await server.stop()


JOB_COUNT = Statement(lambda: sa.select(sa.func.count()).select_from(webhook_jobs))


async def job_count(h: Harness) -> int:
    db = h.server._db
    assert db is not None
    return int(await db.read(lambda tx: tx.fetchval(JOB_COUNT)))


async def deliveries(h: Harness, webhook_id: str, token: str) -> list[dict[str, Any]]:
    response = await h.http.get(f"/api/user/webhooks/{webhook_id}/deliveries", headers=h.auth(token))
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["deliveries"]
    return found


async def one_failed_attempt_then_a_retry_queued(
    h: Harness, receiver: Receiver, email: str
) -> tuple[str, dict[str, Any]]:
    """A Pro user whose webhook failed its first attempt; the retry waits RETRY_LATER seconds."""
    token = await h.new_user("pro", email=email)
    created = await h.http.post(
        "/api/user/webhooks", json={"url": receiver.url(), "events": ["email.received"]}, headers=h.auth(token)
    )
    assert created.status_code == 201, created.text
    hook: dict[str, Any] = created.json()
    receiver.statuses = [500]
    box = await h.new_mailbox(token)
    await h.send(box["address"])
    async with asyncio.timeout(10):
        while not await deliveries(h, hook["id"], token):
            await asyncio.sleep(0.02)
    assert len(receiver.requests) == 1 and await job_count(h) == 1  # the retry is queued
    return token, hook


async def until_no_jobs(h: Harness) -> None:
    async with asyncio.timeout(10):
        while await job_count(h):
            await asyncio.sleep(0.02)


async def test_a_queued_retry_is_dropped_when_its_webhook_is_deleted(start: Start, receiver: Receiver) -> None:
    h = await start()
    token, hook = await one_failed_attempt_then_a_retry_queued(h, receiver, "deleted@example.test")
    deleted = await h.http.delete(f"/api/user/webhooks/{hook['id']}", headers=h.auth(token))
    assert deleted.status_code == 204, deleted.text
    assert await job_count(h) == 0  # gone with the webhook, not left for the worker to trip on
    h.clock.advance(PAST_THE_RETRY)
    # A new webhook of the same user at the same URL does not inherit the old retry.
    again = await h.http.post(
        "/api/user/webhooks", json={"url": receiver.url(), "events": ["email.received"]}, headers=h.auth(token)
    )
    assert again.status_code == 201
    assert await job_count(h) == 0
    assert len(receiver.requests) == 1


async def test_a_queued_retry_is_dropped_when_its_user_is_suspended(start: Start, receiver: Receiver) -> None:
    h = await start()
    token, hook = await one_failed_attempt_then_a_retry_queued(h, receiver, "held@example.test")
    users = h.server.services.users
    await users.set_user("held@example.test", status="suspended")
    h.clock.advance(PAST_THE_RETRY)  # the retry is due: the worker claims it and must drop it
    await until_no_jobs(h)
    assert len(receiver.requests) == 1
    # Reactivated, the user finds the retry gone, not delivered late.
    await users.set_user("held@example.test", status="active")
    assert [d["attempt"] for d in await deliveries(h, hook["id"], token)] == [1]
    assert len(receiver.requests) == 1


# --- a host with one public and one private address -----------------------------------------

# Run in a child with a mount namespace of its own, whose /etc/hosts (bind-mounted over the
# machine's, which stays untouched) gives the names below the addresses the case needs.
_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from inboxd.netguard import AddressRefused, resolve_checked

    async def outcome(host, allow_private):
        try:
            target = await resolve_checked(host, 443, allow_private=allow_private)
        except AddressRefused:
            return "refused"
        return sorted(address for _, address in target.addresses)

    async def main():
        print(json.dumps({
            "mixed": await outcome("mixed.inboxd.test", False),
            "mixed_allowed": await outcome("mixed.inboxd.test", True),
            "mixed_v6": await outcome("mixed6.inboxd.test", False),
            "public": await outcome("public.inboxd.test", False),
        }))

    asyncio.run(main())
    """
)


def test_a_host_with_one_public_and_one_private_address_is_refused(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1 localhost\n"
        "1.1.1.1 mixed.inboxd.test\n"
        "10.0.0.7 mixed.inboxd.test\n"
        "2606:4700:4700::1111 mixed6.inboxd.test\n"
        "fd00::7 mixed6.inboxd.test\n"
        "1.1.1.1 public.inboxd.test\n"
        "8.8.8.8 public.inboxd.test\n"
    )
    script = f'mount --bind {hosts} /etc/hosts && exec {sys.executable} -c "$CHILD"'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script],
        env={**os.environ, "CHILD": _CHILD},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["mixed_allowed"] == ["1.1.1.1", "10.0.0.7"]  # the name has both addresses
    assert found["mixed"] == "refused"
    assert found["mixed_v6"] == "refused"
    assert found["public"] == ["1.1.1.1", "8.8.8.8"]
