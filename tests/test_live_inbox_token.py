"""The live inbox's WebSocket token: the dashboard hands it to the page's script, and it opens that
one mailbox's `/api/ws` only (never REST), for minutes, while the browser session is signed in."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import REDIS_URL, Clock, Harness
from tests.test_web_sessions import csrf_of, origin, signed_in
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


async def test_open_live_sockets_close_when_their_session_signs_out(harness: Harness) -> None:
    box = await harness.new_mailbox()
    port = harness.server.http_port
    async with signed_in(harness) as client, signed_in(harness) as elsewhere:
        token, csrf = await live_token(harness, client, box["id"])
        other_token, other_csrf = await live_token(harness, elsewhere, box["id"])
        async with (
            authed(port, token) as live,
            authed(port, other_token) as other_live,
            authed(port, box["token"]) as api_socket,
        ):
            out = await client.post("/auth/sign-out", data={"csrf_token": csrf}, headers=origin(harness))
            assert out.status_code == 303, out.text
            assert await refused(live) == ({"error": "session_ended"}, 1008)
            assert live.close_reason == "session ended"
            # The other browser session's socket, and one opened with a mailbox token, still get mail.
            await harness.send(box["address"])
            for ws in (other_live, api_socket):
                assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "new_email"
            # Signing out everywhere ends the other session too; the mailbox token's socket stays.
            out = await elsewhere.post(
                "/auth/sign-out-everywhere", data={"csrf_token": other_csrf}, headers=origin(harness)
            )
            assert out.status_code == 303, out.text
            assert await refused(other_live) == ({"error": "session_ended"}, 1008)
            await harness.send(box["address"])
            assert json.loads(await asyncio.wait_for(api_socket.recv(), 10))["type"] == "new_email"


async def test_open_live_sockets_close_when_an_admin_suspends_their_user(harness: Harness) -> None:
    email = f"suspended-{uuid.uuid4().hex[:6]}@example.test"
    box = await harness.new_mailbox(await harness.new_user(email=email))
    user = await harness.server.services.users.user_by_email(email)
    async with signed_in(harness, email) as client, signed_in(harness) as admin:
        token, _ = await live_token(harness, client, box["id"])
        async with authed(harness.server.http_port, token) as live:
            page = await admin.get(f"/admin/users/{user.id}")
            assert page.status_code == 200, page.text
            form = {"csrf_token": csrf_of(page.text), "status": "suspended"}
            answer = await admin.post(f"/admin/users/{user.id}", data=form, headers=origin(harness))
            assert answer.status_code == 303, answer.text
            assert await refused(live) == ({"error": "session_ended"}, 1008)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_sign_out_through_one_process_closes_live_sockets_on_another(make_settings: Any, clock: Clock) -> None:
    settings = make_settings(redis_url=REDIS_URL)
    a, b = Inboxd(settings, clock=clock), Inboxd(settings, clock=clock)
    await a.start()
    await b.start()
    try:
        assert a.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{a.http_port}", timeout=30) as http:
            h = Harness(server=a, http=http, clock=clock, admin_token=a.bootstrap_token)
            box = await h.new_mailbox()
            async with signed_in(h) as client:
                token, csrf = await live_token(h, client, box["id"])
                async with authed(b.http_port, token) as on_b, authed(a.http_port, token) as on_a:
                    out = await client.post("/auth/sign-out", data={"csrf_token": csrf}, headers=origin(h))
                    assert out.status_code == 303, out.text
                    assert await refused(on_b) == ({"error": "session_ended"}, 1008)
                    assert await refused(on_a) == ({"error": "session_ended"}, 1008)
    finally:
        await b.stop()
        await a.stop()


async def test_a_sign_in_that_replaces_the_session_closes_its_live_sockets(harness: Harness) -> None:
    box = await harness.new_mailbox()
    services = harness.server.services
    async with signed_in(harness) as client:
        token, _ = await live_token(harness, client, box["id"])
        async with authed(harness.server.http_port, token) as live:
            # Signing in again in the same browser ends the session the token was handed to.
            link = await services.sign_in.issue_link(await services.users.user_by_email("admin@localhost"))
            again = await client.post(link.split("8025", 1)[1], headers=origin(harness))
            assert again.status_code == 303, again.text
            assert await refused(live) == ({"error": "session_ended"}, 1008)
