"""The live inbox's WebSocket token: the dashboard hands it to the page's script, and it opens that
one mailbox's `/api/ws` only (never REST), for minutes, while the browser session is signed in."""

from __future__ import annotations

import json
import re

import httpx

from tests.conftest import Harness
from tests.test_web_sessions import origin, signed_in
from tests.wsclient import authed, open_ws, refused


async def live_token(h: Harness, client: httpx.AsyncClient, mailbox_id: str) -> tuple[str, str]:
    """A token as the live inbox's script gets one, and the page's CSRF token."""
    page = await client.get(f"/mailboxes/{mailbox_id}")
    assert page.status_code == 200, page.text
    found = re.search(r'data-csrf="([^"]+)"', page.text)
    assert found
    csrf = found.group(1)
    answer = await client.post(f"/mailboxes/{mailbox_id}/live-token", data={"csrf_token": csrf}, headers=origin(h))
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    token: str = answer.json()["token"]
    return token, csrf


async def assert_ws_refuses(h: Harness, token: str) -> None:
    async with open_ws(h.server.http_port) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)


async def test_the_live_token_opens_its_mailboxs_websocket_and_no_rest_path(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with signed_in(harness) as client:
        token, _ = await live_token(harness, client, box["id"])
    async with authed(harness.server.http_port, token):
        pass
    auth = harness.auth(token)
    for method, path in [
        ("GET", f"/api/accounts/{box['id']}"),
        ("GET", f"/api/accounts/{box['id']}/messages"),
        ("GET", f"/api/accounts/{box['id']}/export.mbox"),
        ("DELETE", f"/api/accounts/{box['id']}"),
        ("GET", "/api/user/me"),
    ]:
        answer = await harness.http.request(method, path, headers=auth)
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.json()["error"] == "invalid_token"


async def test_the_live_token_lives_minutes(harness: Harness) -> None:
    box = await harness.new_mailbox()
    ttl = harness.server.settings.live_token_ttl
    assert 60 <= ttl <= 900
    async with signed_in(harness) as client:
        token, _ = await live_token(harness, client, box["id"])
        harness.clock.advance(ttl - 5)
        async with authed(harness.server.http_port, token):
            pass
        harness.clock.advance(10)
        await assert_ws_refuses(harness, token)
        # The page asks for a fresh one at each connection: that still works.
        fresh, _ = await live_token(harness, client, box["id"])
        async with authed(harness.server.http_port, fresh):
            pass


async def test_the_live_token_stops_working_when_the_session_signs_out(harness: Harness) -> None:
    box = await harness.new_mailbox()
    async with signed_in(harness) as client, signed_in(harness) as elsewhere:
        token, csrf = await live_token(harness, client, box["id"])
        other_session, _ = await live_token(harness, elsewhere, box["id"])
        async with authed(harness.server.http_port, token):
            pass
        out = await client.post("/auth/sign-out", data={"csrf_token": csrf}, headers=origin(harness))
        assert out.status_code == 303, out.text
        await assert_ws_refuses(harness, token)
        # Another browser session of the same user is not signed out by it.
        async with authed(harness.server.http_port, other_session):
            pass
