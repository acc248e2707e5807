"""`/api/ws`: origin, auth message and its errors, connection cap, keep-alive, frame limits,
the `new_email` frame, revocation by password reset, slow readers and many idle clients."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Opcode

from inboxd.app import Inboxd
from inboxd.model import NewMailEvent
from tests.conftest import Clock, Harness, send_mail, simple_message
from tests.wsclient import RawClient, authed, open_ws, refused

NEW_EMAIL_FIELDS = {
    "type",
    "id",
    "sender",
    "from",
    "subject",
    "preview_text",
    "size",
    "created_at",
    "account_id",
    "address",
}
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@asynccontextmanager
async def running(make_settings: Any, clock: Clock, **overrides: Any) -> AsyncIterator[Harness]:
    """An inboxd with settings of the test's own, and a harness around it."""
    server = Inboxd(make_settings(**overrides), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
    finally:
        await server.stop()


async def next_json(ws: Any, wait: float = 10) -> Any:
    return json.loads(await asyncio.wait_for(ws.recv(), wait))


async def test_new_email_frame_after_commit(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with authed(harness.server.http_port, box["token"]) as ws:
        await harness.send(box["address"], simple_message(subject="Your code", body="Code 424242 inside."))
        frame = await next_json(ws)
        assert set(frame) == NEW_EMAIL_FIELDS
        assert frame["type"] == "new_email"
        assert frame["account_id"] == box["id"]
        assert frame["address"] == box["address"]
        assert frame["sender"] == "alice@example.org"
        assert frame["from"] == "Alice <alice@example.org>"
        assert frame["subject"] == "Your code"
        assert "424242" in frame["preview_text"]
        assert isinstance(frame["size"], int) and frame["size"] > 0
        assert frame["created_at"].endswith("Z") or "+" in frame["created_at"]
        # The frame comes after commit: the message is readable through REST at once.
        detail = await harness.http.get(
            f"/api/accounts/{box['id']}/messages/{frame['id']}", headers=harness.auth(box["token"])
        )
        assert detail.status_code == 200
        assert detail.json()["subject"] == "Your code"


async def test_only_its_own_mailbox(harness: Harness) -> None:
    mine = await harness.new_mailbox()
    other = await harness.new_mailbox()
    async with authed(harness.server.http_port, mine["token"]) as ws:
        await harness.send(other["address"])
        await harness.send(mine["address"])
        frame = await next_json(ws)
        assert frame["account_id"] == mine["id"]


async def test_token_from_sign_in(harness: Harness) -> None:
    box = await harness.new_mailbox()
    signed = await harness.http.post("/api/token", json={"address": box["address"], "password": "secret123"})
    assert signed.status_code == 200
    async with authed(harness.server.http_port, signed.json()["token"]) as ws:
        await harness.send(box["address"])
        assert (await next_json(ws))["type"] == "new_email"


@sqlite_only
async def test_origin_rule(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    port = harness.server.http_port
    with pytest.raises(InvalidStatus) as refused_handshake:
        async with open_ws(port, origin="https://evil.example"):
            pass
    response = refused_handshake.value.response
    assert response.status_code == 403
    assert json.loads(response.body)["error"] == "access_denied" and json.loads(response.body)["message"]
    # A refusal is routine: nothing at ERROR for anyone to fill the log with.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    box = await harness.new_mailbox()
    own_origin = harness.server.settings.resolved_web_origin
    async with authed(port, box["token"], origin=own_origin):
        pass
    async with authed(port, box["token"]):  # no Origin header: a server-side client
        pass


@pytest.mark.alone  # a bound on time
@sqlite_only
async def test_auth_timeout(make_settings: Any, clock: Clock) -> None:
    async with running(make_settings, clock, ws_auth_timeout=0.5) as h, open_ws(h.server.http_port) as ws:
        started = time.monotonic()
        message, code = await refused(ws)
        assert message == {"error": "auth_timeout"}
        assert code == 1008
        # The 0.5 s configured, not the default nor several times it (the bound was 5 s: 16x).
        assert 0.45 < time.monotonic() - started < 1.5


@sqlite_only
@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[]",
        json.dumps({"type": "auth"}),
        json.dumps({"token": "x"}),
        json.dumps({"type": "hello", "token": "x"}),
        json.dumps({"type": "auth", "token": 42}),
        b'{"type": "auth", "token": "x"}',
        '{"type": "auth", "token": "x", "z": ' + '{"x":' * 3000 + "1" + "}" * 3001,
    ],
)
async def test_invalid_auth_message(harness: Harness, payload: str | bytes) -> None:
    async with open_ws(harness.server.http_port) as ws:
        await ws.send(payload)
        message, code = await refused(ws)
        assert message == {"error": "invalid_auth_message"}
        assert code == 1008


async def test_invalid_tokens(harness: Harness) -> None:
    box = await harness.new_mailbox()
    port = harness.server.http_port
    pro_api_token = harness.admin_token
    for token in ["garbage", pro_api_token, box["token"] + "x", ""]:
        async with open_ws(port) as ws:
            await ws.send(json.dumps({"type": "auth", "token": token}))
            assert await refused(ws) == ({"error": "invalid_token"}, 1008), token
    harness.clock.advance(86400 + 1)
    async with open_ws(port) as ws:
        await ws.send(json.dumps({"type": "auth", "token": box["token"]}))
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)


async def test_three_connections_per_mailbox(harness: Harness) -> None:
    box = await harness.new_mailbox()
    other = await harness.new_mailbox()
    port = harness.server.http_port
    async with authed(port, box["token"]) as first, authed(port, box["token"]), authed(port, box["token"]):
        async with open_ws(port) as fourth:
            await fourth.send(json.dumps({"type": "auth", "token": box["token"]}))
            assert await refused(fourth) == ({"error": "too_many_connections"}, 1008)
        async with authed(port, other["token"]):  # the cap is per mailbox
            pass
        await first.close()
        async with authed(port, box["token"]) as replacement:
            await harness.send(box["address"])
            assert (await next_json(replacement))["type"] == "new_email"


@pytest.mark.alone  # a bound on time
@sqlite_only
async def test_pings_and_pong_deadline(make_settings: Any, clock: Clock) -> None:
    async with running(make_settings, clock, ws_ping_interval=0.3) as h:
        box = await h.new_mailbox()
        port = h.server.http_port
        async with authed(port, box["token"]) as answering:  # the library answers pings
            silent = await RawClient.open(port)
            assert await silent.auth(box["token"]) == {"type": "auth_ok"}
            started = time.monotonic()
            ping = await silent.next_frame((Opcode.PING,))
            assert ping.opcode is Opcode.PING
            assert 0.2 < time.monotonic() - started < 2
            close = await silent.next_frame((Opcode.CLOSE,))
            assert close.opcode is Opcode.CLOSE and close.data[:2] == (1011).to_bytes(2, "big")
            assert time.monotonic() - started < 3
            await silent.read_until_closed()
            silent.close()
            # Well past several intervals, the client that answers is still served.
            await asyncio.sleep(1.0)
            await h.send(box["address"])
            assert (await next_json(answering))["type"] == "new_email"


@sqlite_only
async def test_frames_over_64_kib_close(harness: Harness) -> None:
    box = await harness.new_mailbox()
    port = harness.server.http_port
    async with authed(port, box["token"]) as ws:
        await ws.send("x" * 60000)  # under the limit: ignored, the connection stays
        await harness.send(box["address"])
        assert (await next_json(ws))["type"] == "new_email"
        await ws.send("x" * (64 * 1024 + 1))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1009
    async with open_ws(port) as ws:  # before auth too
        await ws.send(json.dumps({"type": "auth", "token": "y" * 70000}))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1009


@sqlite_only
async def test_compression_is_off(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with authed(harness.server.http_port, box["token"], compression="deflate") as ws:
        assert ws.response is not None
        assert "Sec-WebSocket-Extensions" not in ws.response.headers


async def test_reset_password_cuts_off_rest_and_ws(harness: Harness) -> None:
    box = await harness.new_mailbox()
    old = box["token"]
    port = harness.server.http_port
    async with authed(port, old) as ws:
        reset = await harness.http.put(
            f"/api/accounts/{box['id']}/reset-password", json={"password": "brandnew1"}, headers=harness.auth()
        )
        assert reset.status_code == 200
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)
    rest = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(old))
    assert rest.status_code == 401
    async with open_ws(port) as ws:
        await ws.send(json.dumps({"type": "auth", "token": old}))
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)
    fresh = await harness.http.post("/api/token", json={"address": box["address"], "password": "brandnew1"})
    async with authed(port, fresh.json()["token"]) as ws:
        await harness.send(box["address"])
        assert (await next_json(ws))["type"] == "new_email"


@sqlite_only
async def test_reset_through_the_pro_api_cuts_off_too(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with authed(harness.server.http_port, box["token"]) as ws:
        reset = await harness.http.put(
            f"/api/user/accounts/{box['id']}/reset-password", json={"password": "brandnew1"}, headers=harness.auth()
        )
        assert reset.status_code == 200, reset.text
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)


@sqlite_only
async def test_deleting_the_mailbox_closes_its_sockets(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with authed(harness.server.http_port, box["token"]) as ws:
        deleted = await harness.http.delete(f"/api/accounts/{box['id']}", headers=harness.auth())
        assert deleted.status_code == 204
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)


@pytest.mark.alone  # a bound on time
@sqlite_only
async def test_a_client_that_stops_reading_is_dropped(make_settings: Any, clock: Clock) -> None:
    """Events go straight onto the bus here (60 KB subjects, paced by the reading client), so the
    stalled client's kernel buffers fill within seconds whatever the parser keeps of a subject."""
    async with running(make_settings, clock, ws_send_queue=20) as h:
        box = await h.new_mailbox()
        port = h.server.http_port
        stalled = await RawClient.open(port, rcvbuf=4096)
        assert await stalled.auth(box["token"]) == {"type": "auth_ok"}
        bus = h.server.services.bus
        async with authed(port, box["token"], max_size=None) as reader:
            started = time.monotonic()
            for i in range(200):
                event = NewMailEvent(
                    message_id=str(uuid.uuid4()),
                    mailbox_id=box["id"],
                    user_id="u",
                    address=box["address"],
                    sender="a@example.org",
                    from_="a@example.org",
                    subject=f"{i} " + "S" * 60000,
                    preview_text="",
                    size=1,
                    created_at=time.time(),
                )
                await bus.publish([event])
                frame = await next_json(reader)
                assert frame["subject"].startswith(f"{i} ")
            elapsed = time.monotonic() - started
            # The stalled client is gone: two more fit beside the reader, a fourth does not.
            async with authed(port, box["token"]), authed(port, box["token"]), open_ws(port) as fourth:
                await fourth.send(json.dumps({"type": "auth", "token": box["token"]}))
                assert await refused(fourth) == ({"error": "too_many_connections"}, 1008)
        # Its connection was aborted, not left to drain.
        async with asyncio.timeout(10):
            await stalled.read_until_closed()
        stalled.close()
        assert elapsed < 20


@pytest.mark.alone  # a bound on time
@sqlite_only
@pytest.mark.timeout(300)
async def test_a_thousand_idle_connections(make_settings: Any, clock: Clock) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    async with running(make_settings, clock, ws_ping_interval=2.0) as h:
        boxes = []
        for i in range(334):
            address = f"idle{i}@{h.domain}"
            created = await h.http.post(
                "/api/accounts",
                json={"address": address, "auth_key": "a" * 64},
                headers=h.auth(),
            )
            assert created.status_code == 201, created.text
            boxes.append(created.json())
        port = h.server.http_port
        clients = []
        try:
            for i in range(1000):
                ws = await open_ws(port, ping_interval=None)
                await ws.send(json.dumps({"type": "auth", "token": boxes[i % len(boxes)]["token"]}))
                assert await next_json(ws) == {"type": "auth_ok"}
                clients.append(ws)
            # They hold steady through several keep-alive rounds (the library answers pings).
            await asyncio.sleep(5)
            assert all(ws.close_code is None for ws in clients)
            target = boxes[7]
            started = time.monotonic()
            await asyncio.to_thread(send_mail, h.server.smtp_port, target["address"])
            for ws in (clients[7], clients[7 + 334], clients[7 + 668]):
                frame = await next_json(ws)
                assert frame["account_id"] == target["id"]
            assert time.monotonic() - started < 2
        finally:
            await asyncio.gather(*(ws.close() for ws in clients), return_exceptions=True)
