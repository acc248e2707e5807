"""`/api/ws` against idle and stalled clients: hundreds of sockets that never authenticate are cut
at the auth timeout, and one that never reads is cut at the write timeout, while a normal client
keeps getting its frames."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.model import NewMailEvent
from tests.conftest import Clock, send_mail
from tests.wsclient import RawClient, authed

pytestmark = [pytest.mark.parametrize("backend", ["sqlite"], indirect=True), pytest.mark.alone]


async def new_mailbox(server: Inboxd, local: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        response = await http.post(
            "/api/accounts",
            json={"address": f"{local}@inboxd.localhost", "password": "secret123"},
            headers={"Authorization": f"Bearer {server.bootstrap_token}"},
        )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_idle_websockets_are_cut_at_the_auth_timeout(make_settings: Any, clock: Clock) -> None:
    # 500 idle sockets from one address: above the per-address cap of unauthenticated ones.
    settings = make_settings(ws_auth_timeout=3.0, ws_max_unauthenticated_per_ip=1000)
    async with Inboxd(settings, clock=clock) as server:
        box = await new_mailbox(server, "watched")
        port = server.http_port
        started = time.monotonic()
        idle = []
        for _ in range(10):
            idle += await asyncio.gather(*(RawClient.open(port) for _n in range(50)))
        # A normal client is served while 500 sockets sit idle.
        async with authed(port, box["token"]) as ws:
            await asyncio.to_thread(send_mail, server.smtp_port, box["address"])
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "new_email"

        async def told(client: RawClient) -> Any:
            return json.loads(bytes((await client.next_frame()).data))

        answers = await asyncio.wait_for(asyncio.gather(*(told(c) for c in idle)), 30)
        assert all(a == {"error": "auth_timeout"} for a in answers)
        assert time.monotonic() - started >= 3.0
        async with asyncio.timeout(30):
            for client in idle:
                await client.read_until_closed()
                client.close()


def _event(box: dict[str, Any], n: int) -> NewMailEvent:
    return NewMailEvent(
        message_id=str(uuid.uuid4()),
        mailbox_id=box["id"],
        user_id="u",
        address=box["address"],
        sender="a@example.org",
        from_="a@example.org",
        subject=f"{n} " + "S" * 500_000,
        preview_text="",
        size=1,
        created_at=time.time(),
    )


async def test_a_websocket_that_never_reads_is_cut_at_the_write_timeout(make_settings: Any, clock: Clock) -> None:
    # A queue long enough that only the write timeout can cut the client, and pings too rare to.
    settings = make_settings(ws_send_queue=100_000, ws_ping_interval=600.0, ws_write_timeout=2.0)
    async with Inboxd(settings, clock=clock) as server:
        box = await new_mailbox(server, "stalled")
        port = server.http_port
        stalled = await RawClient.open(port, rcvbuf=4096)
        assert await stalled.auth(box["token"]) == {"type": "auth_ok"}
        async with authed(port, box["token"], max_size=None) as reader:
            # About 12 MB of frames: far more than the kernel and the server's buffer hold for it.
            for n in range(24):
                await server.services.bus.publish([_event(box, n)])
                assert json.loads(await asyncio.wait_for(reader.recv(), 10))["subject"].startswith(f"{n} ")
            await asyncio.sleep(4)
            # The stalled client was aborted: reading now gets what was in flight, then the end.
            async with asyncio.timeout(15):
                await stalled.read_until_closed()
            stalled.close()
            # The reader is still served.
            await asyncio.to_thread(send_mail, server.smtp_port, box["address"])
            assert json.loads(await asyncio.wait_for(reader.recv(), 10))["type"] == "new_email"
