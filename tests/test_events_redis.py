"""The Redis event bus: two inboxd processes on one PostgreSQL and Redis share mail events and
revocations; a bus survives its Redis going away and coming back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import smtplib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.events_redis import RedisBus
from tests.conftest import PG_URL, REDIS_URL, Clock, Harness, free_port, send_mail
from tests.serverproc import ServerProcess
from tests.test_events import event
from tests.test_live_inbox_token import live_token
from tests.test_web_sessions import signed_in
from tests.wsclient import authed, open_ws, refused

postgres_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@contextlib.asynccontextmanager
async def two_processes(make_settings: Any, tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ServerProcess]]:
    settings = make_settings()  # a clean PostgreSQL schema and a Redis prefix of this test's own
    env = {
        "INBOXD_DATABASE_URL": PG_URL,
        "INBOXD_DATABASE_SCHEMA": settings.database_schema,
        "INBOXD_REDIS_URL": REDIS_URL,
        "INBOXD_REDIS_PREFIX": settings.redis_prefix,
        # Two data directories: the processes share the key through the environment instead.
        "INBOXD_SECRET_KEY": "shared-" + settings.redis_prefix,
        # RCPT answers kept for an hour: a change seen by the other process came over the bus.
        "INBOXD_RECIPIENT_CACHE_TTL": "3600",
    }
    first = await ServerProcess.start(tmp_path / "a", **env)
    try:
        second = await ServerProcess.start(tmp_path / "b", **env)
        try:
            yield first, second
        finally:
            await second.stop()
            print("".join(second.output))
    finally:
        await first.stop()
        print("".join(first.output))


@postgres_only
@pytest.mark.timeout(180)
async def test_mail_accepted_by_one_process_reaches_a_socket_on_the_other(make_settings: Any, tmp_path: Path) -> None:
    async with two_processes(make_settings, tmp_path) as (a, b):
        assert a.bootstrap_token is not None and b.bootstrap_token is None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{a.http_port}", timeout=30) as http:
            created = await http.post(
                "/api/accounts",
                json={"address": "fanout@inboxd.localhost", "password": "secret123"},
                headers={"Authorization": f"Bearer {a.bootstrap_token}"},
            )
            assert created.status_code == 201, created.text
            box = created.json()
            async with authed(b.http_port, box["token"]) as on_b, authed(a.http_port, box["token"]) as on_a:
                await asyncio.to_thread(send_mail, a.smtp_port, box["address"])
                for ws in (on_b, on_a):
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert frame["type"] == "new_email" and frame["account_id"] == box["id"]
                await asyncio.to_thread(send_mail, b.smtp_port, box["address"])
                for ws in (on_b, on_a):
                    assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "new_email"
                # Three connections per mailbox, counted across both processes.
                async with authed(a.http_port, box["token"]) as third:
                    for port in (a.http_port, b.http_port):
                        async with open_ws(port) as fourth:
                            await fourth.send(json.dumps({"type": "auth", "token": box["token"]}))
                            assert await refused(fourth) == ({"error": "too_many_connections"}, 1008)
                    await third.close()
                    async with asyncio.timeout(10):  # the slot is released asynchronously
                        while True:
                            async with open_ws(b.http_port) as replacement:
                                await replacement.send(json.dumps({"type": "auth", "token": box["token"]}))
                                if json.loads(await replacement.recv()) == {"type": "auth_ok"}:
                                    break
                # A reset made through one process cuts off the old token's socket on the other.
                reset = await http.put(
                    f"/api/accounts/{box['id']}/reset-password",
                    json={"password": "another1"},
                    headers={"Authorization": f"Bearer {a.bootstrap_token}"},
                )
                assert reset.status_code == 200
                assert await refused(on_b) == ({"error": "invalid_token"}, 1008)
                assert await refused(on_a) == ({"error": "invalid_token"}, 1008)
            # A mailbox deleted through one process is refused at RCPT by the other, whose
            # recipient cache had just accepted mail for it.
            assert await asyncio.to_thread(send_mail, b.smtp_port, box["address"]) == {}
            deleted = await http.delete(
                f"/api/accounts/{box['id']}", headers={"Authorization": f"Bearer {a.bootstrap_token}"}
            )
            assert deleted.status_code == 204
            async with asyncio.timeout(10):  # the announcement crosses Redis asynchronously
                while True:
                    try:
                        await asyncio.to_thread(send_mail, b.smtp_port, box["address"])
                    except smtplib.SMTPRecipientsRefused as exc:
                        assert exc.recipients[box["address"]][0] == 550
                        break
                    except smtplib.SMTPDataError as exc:  # not announced yet: the commit refused it
                        assert exc.smtp_code == 550 and b"5.1.1" in exc.smtp_error
                    await asyncio.sleep(0.05)


async def start_redis(port: int) -> asyncio.subprocess.Process:
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is needed (make services installs and starts it)"
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        stdout=asyncio.subprocess.DEVNULL,
    )
    async with asyncio.timeout(10):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return proc
            except OSError:
                await asyncio.sleep(0.02)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.timeout(60)
async def test_the_bus_reconnects_after_redis_comes_back(backend: str) -> None:
    port = free_port()
    redis = await start_redis(port)
    url = f"redis://127.0.0.1:{port}/0"
    publisher, subscriber = RedisBus(url, prefix="t:"), RedisBus(url, prefix="t:")
    received: asyncio.Queue[str] = asyncio.Queue()
    revoked: asyncio.Queue[int] = asyncio.Queue()
    await publisher.start()
    await subscriber.start()
    try:
        subscriber.listen("m1", received.put_nowait)
        subscriber.on_revoke("m1", revoked.put_nowait)
        subscriber.listen("m1", lambda frame: received.put_nowait(frame))  # a second listener: the same text
        await publisher.publish([event("m1", "before")])
        first, second = await asyncio.wait_for(received.get(), 5), await asyncio.wait_for(received.get(), 5)
        assert first is second and json.loads(first)["subject"] == "before"
        redis.terminate()
        await redis.wait()
        async with asyncio.timeout(10):
            while subscriber.subscribed.is_set():
                await asyncio.sleep(0.02)
        redis = await start_redis(port)
        async with asyncio.timeout(20):
            await subscriber.subscribed.wait()
        await publisher.publish([event("m1", "after")])
        await publisher.revoke("m1", 3)
        assert json.loads(await asyncio.wait_for(received.get(), 10))["subject"] == "after"
        assert await asyncio.wait_for(revoked.get(), 10) == 3
    finally:
        await publisher.stop()
        await subscriber.stop()
        redis.terminate()
        await redis.wait()


@postgres_only
@pytest.mark.timeout(90)
async def test_a_reset_missed_during_a_redis_outage_still_cuts_off(make_settings: Any, clock: Clock) -> None:
    """The reset is published while Redis is down and its publisher stops before Redis returns,
    so the revocation itself is lost; the resync after reconnecting still closes the socket."""
    port = free_port()
    redis = await start_redis(port)
    settings = make_settings(redis_url=f"redis://127.0.0.1:{port}/0")
    a, b = Inboxd(settings, clock=clock), Inboxd(settings, clock=clock)
    await a.start()
    await b.start()
    try:
        assert a.bootstrap_token is not None
        auth = {"Authorization": f"Bearer {a.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{a.http_port}", timeout=30) as http:
            created = await http.post(
                "/api/accounts", json={"address": "outage@inboxd.localhost", "password": "secret123"}, headers=auth
            )
            box = created.json()
            async with authed(b.http_port, box["token"]) as on_b:
                bus_b = b.services.bus
                assert isinstance(bus_b, RedisBus)
                redis.terminate()
                await redis.wait()
                async with asyncio.timeout(10):
                    while bus_b.subscribed.is_set():
                        await asyncio.sleep(0.02)
                # Over HTTP the request limiter would need Redis too (it answers 500 while Redis is
                # down), so the reset is made through the service the handler calls.
                admin = await a.services.users.authenticate(a.bootstrap_token, a.services.mailbox_tokens)
                await a.services.mailboxes.reset_password(admin, box["id"], password="another1", auth_key=None)
                await a.stop()
                redis = await start_redis(port)
                assert await refused(on_b) == ({"error": "invalid_token"}, 1008)
    finally:
        await a.stop()
        await b.stop()
        redis.terminate()
        await redis.wait()


@postgres_only
async def test_a_sign_out_missed_during_a_redis_outage_still_closes_live_sockets(
    make_settings: Any, clock: Clock
) -> None:
    """As above for a browser session's end: the resync checks live sockets' sessions too."""
    port = free_port()
    redis = await start_redis(port)
    settings = make_settings(redis_url=f"redis://127.0.0.1:{port}/0")
    a, b = Inboxd(settings, clock=clock), Inboxd(settings, clock=clock)
    await a.start()
    await b.start()
    try:
        assert a.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{a.http_port}", timeout=30) as http:
            h = Harness(server=a, http=http, clock=clock, admin_token=a.bootstrap_token)
            box = await h.new_mailbox()
            async with signed_in(h) as client:
                token, _ = await live_token(h, client, box["id"])
                async with authed(b.http_port, token) as on_b:
                    bus_b = b.services.bus
                    assert isinstance(bus_b, RedisBus)
                    redis.terminate()
                    await redis.wait()
                    async with asyncio.timeout(10):
                        while bus_b.subscribed.is_set():
                            await asyncio.sleep(0.02)
                    # The sign-out handler's call, made directly as above.
                    session = await a.services.sessions.resolve(client.cookies["inboxd_session"])
                    assert session is not None
                    await a.services.sessions.end(session)
                    await a.stop()
                    redis = await start_redis(port)
                    assert await refused(on_b) == ({"error": "session_ended"}, 1008)
    finally:
        await a.stop()
        await b.stop()
        redis.terminate()
        await redis.wait()
