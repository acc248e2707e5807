"""`/api/user/tokens`: create (shown once), list (never the value, `last_used_at` coalesced and
flushed), revoke (effective on the very next request, pipelined ones included)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from inboxd.app import Inboxd
from tests.conftest import Clock, Harness

TOKEN_FIELDS = {"id", "name", "last_used_at", "created_at", "revoked_at"}


async def create(h: Harness, name: object, token: str | None = None) -> httpx.Response:
    return await h.http.post("/api/user/tokens", json={"name": name}, headers=h.auth(token))


async def test_create_list_and_use_a_token(harness: Harness) -> None:
    response = await create(harness, "  CI runner ")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "name", "token"}
    assert body["name"] == "CI runner"
    assert body["token"].startswith("ibx_") and len(body["token"]) == 47
    me = await harness.http.get("/api/user/me", headers=harness.auth(body["token"]))
    assert me.status_code == 200 and me.json()["role"] == "admin"

    listed = await harness.http.get("/api/user/tokens", headers=harness.auth())
    assert listed.status_code == 200
    assert body["token"] not in listed.text
    tokens = listed.json()["tokens"]
    assert [t["name"] for t in tokens] == ["CI runner", "bootstrap"]  # newest first
    for item in tokens:
        assert set(item) == TOKEN_FIELDS
        assert item["revoked_at"] is None and item["created_at"].endswith("Z")
    # Both were used just now: the listing shows it before any flush.
    assert tokens[0]["last_used_at"] is not None and tokens[1]["last_used_at"] is not None
    assert tokens[0]["last_used_at"] >= tokens[0]["created_at"]


async def test_unused_token_has_no_last_use(harness: Harness) -> None:
    fresh = (await create(harness, "idle")).json()
    [item] = [
        t
        for t in (await harness.http.get("/api/user/tokens", headers=harness.auth())).json()["tokens"]
        if t["id"] == fresh["id"]
    ]
    assert item["last_used_at"] is None


async def test_bad_token_names(harness: Harness) -> None:
    for name in ("", "   ", "x" * 101, 5, None):
        response = await create(harness, name)
        assert response.status_code == 400 and response.json()["error"] == "invalid_request", name
    for content in (b"", b"{}", b"nope"):
        response = await harness.http.post(
            "/api/user/tokens", content=content, headers={**harness.auth(), "content-type": "application/json"}
        )
        assert response.status_code == 400 and response.json()["error"] == "invalid_request", content
    assert (await create(harness, "y" * 100)).status_code == 201


async def test_revoke(harness: Harness) -> None:
    made = (await create(harness, "leaked")).json()
    box = await harness.new_mailbox(made["token"])
    revoked = await harness.http.delete(f"/api/user/tokens/{made['id']}", headers=harness.auth())
    assert revoked.status_code == 204 and revoked.content == b""
    after = await harness.http.get("/api/user/me", headers=harness.auth(made["token"]))
    assert after.status_code == 401 and after.json()["error"] == "invalid_token"
    on_mailbox = await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth(made["token"]))
    assert on_mailbox.status_code == 401
    [item] = [
        t
        for t in (await harness.http.get("/api/user/tokens", headers=harness.auth())).json()["tokens"]
        if t["id"] == made["id"]
    ]
    assert item["revoked_at"] is not None and item["revoked_at"] >= item["created_at"]
    # Revoking again is still 204; the revoked token's mailboxes stay reachable through /api/user.
    assert (await harness.http.delete(f"/api/user/tokens/{made['id']}", headers=harness.auth())).status_code == 204
    accounts = (await harness.http.get("/api/user/accounts", headers=harness.auth())).json()["accounts"]
    assert box["id"] in {a["id"] for a in accounts}


async def test_other_users_tokens_answer_404(harness: Harness) -> None:
    other = await harness.new_user("pro")
    mine = (await create(harness, "mine")).json()
    for token_id in (mine["id"], "00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        response = await harness.http.delete(f"/api/user/tokens/{token_id}", headers=harness.auth(other))
        assert response.status_code == 404 and response.json()["error"] == "not_found", token_id
    theirs = (await harness.http.get("/api/user/tokens", headers=harness.auth(other))).json()["tokens"]
    assert mine["id"] not in {t["id"] for t in theirs} and len(theirs) == 1
    assert (await harness.http.get("/api/user/me", headers=harness.auth(mine["token"]))).status_code == 200


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return status, await reader.readexactly(length)


async def test_revoke_stops_a_request_pipelined_behind_it(harness: Harness) -> None:
    made = (await create(harness, "pipelined")).json()
    value = made["token"]

    def request(method: str, path: str) -> bytes:
        return f"{method} {path} HTTP/1.1\r\nHost: inboxd\r\nAuthorization: Bearer {value}\r\n\r\n".encode()

    reader, writer = await asyncio.open_connection("127.0.0.1", harness.server.http_port)
    try:
        # The token revokes itself, and a request using it follows on the same connection at once.
        writer.write(request("DELETE", f"/api/user/tokens/{made['id']}") + request("GET", "/api/user/me"))
        await writer.drain()
        first = await asyncio.wait_for(_read_response(reader), 10)
        second = await asyncio.wait_for(_read_response(reader), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    assert first[0] == 204
    assert second[0] == 401 and b"invalid_token" in second[1]


async def test_last_used_is_flushed_to_the_database(make_settings: Any, clock: Clock) -> None:
    """A second inboxd on the same database sees `last_used_at` once the first one flushed it."""
    settings = make_settings(usage_flush_interval=0.05)
    async with Inboxd(settings, clock=clock) as first, Inboxd(settings, clock=clock) as second:
        assert first.bootstrap_token is not None
        admin = await first.services.users.user_by_email("admin@localhost")
        [before] = await second.services.users.list_tokens(admin)
        assert before.last_used_at is None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{first.http_port}", timeout=30) as http:
            headers = {"Authorization": f"Bearer {first.bootstrap_token}"}
            assert (await http.get("/api/user/me", headers=headers)).status_code == 200
        deadline = time.monotonic() + 10
        while True:
            [seen] = await second.services.users.list_tokens(admin)
            if seen.last_used_at is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        assert seen.last_used_at is not None and seen.last_used_at >= seen.created_at
