"""Caps on `/api/ws` connections that have not authenticated yet (`INBOXD_WS_MAX_UNAUTHENTICATED`,
`INBOXD_WS_MAX_UNAUTHENTICATED_PER_IP`): one more is refused at the handshake with HTTP 429
`too_many_connections`; a place comes back when its connection authenticates, is refused, times
out or goes away, and clients from other addresses are still admitted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.frames import Opcode

from inboxd.app import Inboxd
from tests.conftest import Clock
from tests.test_ws_hardening import new_mailbox
from tests.wsclient import RawClient

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def admitted(client: RawClient) -> bool:
    assert client.response is not None
    if client.response.status_code == 101:
        return True
    assert client.response.status_code == 429
    assert json.loads(client.response.body or b"{}")["error"] == "too_many_connections"
    client.close()
    return False


async def test_unauthenticated_sockets_are_capped_per_address_and_in_all(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(ws_max_unauthenticated_per_ip=3, ws_max_unauthenticated=5, ws_auth_timeout=30.0)
    async with Inboxd(settings, clock=clock) as server:
        box = await new_mailbox(server, "capped")
        port = server.http_port
        first = [await RawClient.open(port, source="127.0.0.1") for _ in range(3)]
        assert all(admitted(c) for c in first)
        assert not admitted(await RawClient.open(port, source="127.0.0.1"))
        # Another address has room of its own, up to the total.
        second = [await RawClient.open(port, source="127.0.0.2") for _ in range(2)]
        assert all(admitted(c) for c in second)
        assert not admitted(await RawClient.open(port, source="127.0.0.3"))
        # Authenticating gives the place back (the answer is written just before it is).
        assert await first[0].auth(box["token"]) == {"type": "auth_ok"}
        replacement = await RawClient.open(port, source="127.0.0.1")
        assert admitted(replacement)
        # So does being refused, and so does leaving.
        assert await first[1].auth("not a token") == {"error": "invalid_token"}
        assert (await first[1].next_frame((Opcode.CLOSE,))).opcode is Opcode.CLOSE
        assert admitted(await RawClient.open(port, source="127.0.0.1"))
        second[0].close()
        assert admitted(await RawClient.open(port, source="127.0.0.3"))
        for client in [*first, *second, replacement]:
            client.close()


async def test_a_socket_cut_at_the_auth_timeout_gives_its_place_back(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(ws_max_unauthenticated_per_ip=2, ws_auth_timeout=1.0)
    async with Inboxd(settings, clock=clock) as server:
        port = server.http_port
        for _ in range(3):  # rounds: a leaked place would leave the cap reached
            idle = [await RawClient.open(port) for _ in range(2)]
            assert all(admitted(c) for c in idle)
            assert not admitted(await RawClient.open(port))
            for client in idle:
                assert json.loads(bytes((await client.next_frame()).data)) == {"error": "auth_timeout"}
                # The close frame is written just before the place is given back.
                assert (await client.next_frame((Opcode.CLOSE,))).opcode is Opcode.CLOSE
                client.close()
