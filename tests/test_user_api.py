"""`/api/user/me` and `/api/user/accounts...`: the Pro profile, every mailbox of the user over all
its tokens, and who gets 401/403/404 on the Pro table."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import Clock, Harness, simple_message

PROFILE_FIELDS = {
    "id",
    "email",
    "plan",
    "role",
    "status",
    "max_domains",
    "ops_used",
    "ops_limit",
    "domain_count",
    "created_at",
    "downgraded",
}
ANY_ID = "00000000-0000-0000-0000-000000000000"
PRO_TABLE = [
    ("GET", "/api/user/me", None),
    ("GET", "/api/user/accounts", None),
    ("GET", f"/api/user/accounts/{ANY_ID}/messages", None),
    ("GET", f"/api/user/accounts/{ANY_ID}/messages/{ANY_ID}", None),
    ("DELETE", f"/api/user/accounts/{ANY_ID}", None),
    ("PUT", f"/api/user/accounts/{ANY_ID}/reset-password", {"password": "secret123"}),
    ("GET", "/api/user/domains", None),
    ("POST", "/api/user/domains", {"domain": "example.org"}),
    ("POST", f"/api/user/domains/{ANY_ID}/verify", None),
    ("DELETE", f"/api/user/domains/{ANY_ID}", None),
    ("GET", "/api/user/tokens", None),
    ("POST", "/api/user/tokens", {"name": "ci"}),
    ("DELETE", f"/api/user/tokens/{ANY_ID}", None),
]


async def user_of(h: Harness, token: str) -> Any:
    principal = await h.server.services.users.authenticate(token, h.server.services.mailbox_tokens)
    return principal.user


async def test_profile_fields(harness: Harness) -> None:
    token = await harness.new_user("pro", email="Dev@Example.test")
    response = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert response.status_code == 200
    body = response.json()
    assert set(body) == PROFILE_FIELDS
    user = await user_of(harness, token)
    used, limit = await harness.server.services.admission.usage(user)
    assert body == {
        "id": user.id,
        "email": "dev@example.test",
        "plan": "pro",
        "role": "user",
        "status": "active",
        "max_domains": 10,
        "ops_used": used,
        "ops_limit": limit,
        "domain_count": 0,
        "created_at": body["created_at"],
        "downgraded": False,
    }
    assert body["created_at"].endswith("Z") and "T" in body["created_at"]
    admin = (await harness.http.get("/api/user/me", headers=harness.auth())).json()
    assert admin["role"] == "admin" and admin["email"] == "admin@localhost" and admin["plan"] == "pro"


async def test_free_users_get_pro_required_everywhere(harness: Harness) -> None:
    token = await harness.new_user("free")
    for method, path, body in PRO_TABLE:
        response = await harness.http.request(method, path, json=body, headers=harness.auth(token))
        assert response.status_code == 403, (method, path)
        assert response.json()["error"] == "pro_required" and response.json()["message"]


async def test_auth_failures_on_the_pro_table(harness: Harness) -> None:
    box = await harness.new_mailbox()
    suspended = await harness.new_user("pro", email="gone@example.test")
    await harness.server.services.users.set_user("gone@example.test", status="suspended")
    for method, path, body in PRO_TABLE:
        missing = await harness.http.request(method, path, json=body)
        assert missing.status_code == 401 and missing.json()["error"] == "invalid_token", path
        bogus = await harness.http.request(method, path, json=body, headers=harness.auth("ibx_" + "x" * 43))
        assert bogus.status_code == 401 and bogus.json()["error"] == "invalid_token", path
        mailbox_token = await harness.http.request(method, path, json=body, headers=harness.auth(box["token"]))
        assert mailbox_token.status_code == 403 and mailbox_token.json()["error"] == "access_denied", path
        revoked = await harness.http.request(method, path, json=body, headers=harness.auth(suspended))
        assert revoked.status_code == 401 and revoked.json()["error"] == "account_revoked", path


async def test_downgraded_user(harness: Harness) -> None:
    """Pro → free while holding a custom domain: downgraded, and /api/user/* answers pro_required."""
    token = await harness.new_user("pro", email="down@example.test")
    assert (
        await harness.http.post("/api/user/domains", json={"domain": "kept.example"}, headers=harness.auth(token))
    ).status_code == 201
    services = harness.server.services
    await services.users.set_user("down@example.test", plan="free")
    user = await user_of(harness, token)
    profile = await services.profiles.of(user, usage=(0, 0))
    assert profile.downgraded is True and profile.max_domains == 0 and profile.domain_count == 1
    me = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert me.status_code == 403 and me.json()["error"] == "pro_required"
    # Its mailboxes stay readable through the token that made them.
    box = await harness.new_mailbox(token)
    assert (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth(token))).status_code == 200
    # A free user holding nothing above the free caps is not downgraded; back on Pro neither.
    plain = await user_of(harness, await harness.new_user("free"))
    assert (await services.profiles.of(plain, usage=(0, 0))).downgraded is False
    await services.users.set_user("down@example.test", plan="pro")
    again = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert again.status_code == 200 and again.json()["downgraded"] is False and again.json()["plan"] == "pro"


async def test_accounts_cover_every_token_of_the_user(harness: Harness) -> None:
    first = await harness.new_user("pro", email="many@example.test")
    services = harness.server.services
    user = await services.users.user_by_email("many@example.test")
    second = (await services.users.create_token(user, "second")).value
    a = await harness.new_mailbox(first)
    b = await harness.new_mailbox(second)
    stranger = await harness.new_mailbox(await harness.new_user("pro"))
    response = await harness.http.get("/api/user/accounts", headers=harness.auth(first))
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"accounts", "next_cursor"} and body["next_cursor"] == ""
    assert [item["id"] for item in body["accounts"]] == [b["id"], a["id"]]  # newest first
    item = body["accounts"][0]
    assert set(item) == {"id", "address", "quota", "used", "created_at"}
    assert item["address"] == b["address"] and item["quota"] == 1024**3 and item["used"] == 0
    assert stranger["id"] not in {i["id"] for i in body["accounts"]}
    # Through /api/accounts the other token still cannot reach it; through /api/user it can.
    assert (await harness.http.get(f"/api/accounts/{a['id']}", headers=harness.auth(second))).status_code == 404
    listed = await harness.http.get(f"/api/user/accounts/{a['id']}/messages", headers=harness.auth(second))
    assert listed.status_code == 200 and listed.json() == {"messages": [], "page": 1}


async def test_accounts_pages_by_cursor(make_settings: Any, clock: Clock) -> None:
    async with Inboxd(make_settings(user_accounts_page_size=2), clock=clock) as server:
        assert server.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            h = Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
            made = [(await h.new_mailbox())["id"] for _ in range(5)]
            seen: list[str] = []
            cursor = ""
            pages = 0
            while True:
                params = {"cursor": cursor} if cursor else {}
                body = (await http.get("/api/user/accounts", params=params, headers=h.auth())).json()
                pages += 1
                assert len(body["accounts"]) <= 2
                seen += [item["id"] for item in body["accounts"]]
                cursor = body["next_cursor"]
                if not cursor:
                    break
            assert pages == 3 and seen == made[::-1]
            for bad in ("garbage!", "bm90IGpzb24", "WzEsMl0"):
                response = await http.get("/api/user/accounts", params={"cursor": bad}, headers=h.auth())
                assert response.status_code == 400 and response.json()["error"] == "invalid_request", bad


async def test_account_messages_pages(harness: Harness) -> None:
    token = await harness.new_user("pro")
    box = await harness.new_mailbox(token)
    await harness.send(box["address"])
    for ref in (box["id"], box["address"], box["address"].upper()):
        response = await harness.http.get(f"/api/user/accounts/{ref}/messages", headers=harness.auth(token))
        assert response.status_code == 200
        body = response.json()
        assert body["page"] == 1 and [m["subject"] for m in body["messages"]] == ["Hello"]
        assert set(body["messages"][0]) == {
            "id",
            "sender",
            "from",
            "subject",
            "preview_text",
            "size",
            "is_read",
            "created_at",
            "tags",
        }
    page2 = await harness.http.get(f"/api/user/accounts/{box['id']}/messages?page=2", headers=harness.auth(token))
    assert page2.json() == {"messages": [], "page": 2}
    for bad in ("0", "-1", "x", "1.5"):
        response = await harness.http.get(
            f"/api/user/accounts/{box['id']}/messages", params={"page": bad}, headers=harness.auth(token)
        )
        assert response.status_code == 400 and response.json()["error"] == "invalid_request", bad


async def test_other_users_mailboxes_answer_404(harness: Harness) -> None:
    owner, other = await harness.new_user("pro"), await harness.new_user("pro")
    box = await harness.new_mailbox(owner)
    for method, path, body in (
        ("GET", f"/api/user/accounts/{box['id']}/messages", None),
        ("GET", f"/api/user/accounts/{box['address']}/messages", None),
        ("DELETE", f"/api/user/accounts/{box['id']}", None),
        ("PUT", f"/api/user/accounts/{box['id']}/reset-password", {"password": "secret123"}),
        ("GET", f"/api/user/accounts/{ANY_ID}/messages", None),
        ("GET", f"/api/user/accounts/{box['id']}/messages/{ANY_ID}", None),
        ("DELETE", "/api/user/accounts/not-a-mailbox", None),
    ):
        response = await harness.http.request(method, path, json=body, headers=harness.auth(other))
        assert response.status_code == 404 and response.json()["error"] == "not_found", path
    assert (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth(owner))).status_code == 200


async def test_a_message_of_any_of_the_users_mailboxes(harness: Harness) -> None:
    """`GET /api/user/accounts/{mailbox}/messages/{id}` reads a message of a mailbox another token of
    the user made, as the token's own route reads it; not another user's."""
    owner = await harness.new_user("pro")
    box = await harness.new_mailbox(owner)
    await harness.send(box["address"], simple_message(subject="Any token of mine"))
    listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(owner))
    message_id = listed.json()["messages"][0]["id"]
    own = await harness.http.get(f"/api/accounts/{box['id']}/messages/{message_id}", headers=harness.auth(owner))
    user = await user_of(harness, owner)
    second = (await harness.server.services.users.create_token(user, "second")).value
    for mailbox in (box["id"], box["address"]):
        path = f"/api/user/accounts/{mailbox}/messages/{message_id}"
        answer = await harness.http.get(path, headers=harness.auth(second))
        assert answer.status_code == 200 and answer.json() == own.json()
        refused = await harness.http.get(path, headers=harness.auth(await harness.new_user("pro")))
        assert refused.status_code == 404 and refused.json()["message"] == "No such mailbox."


async def test_delete_account(harness: Harness) -> None:
    first = await harness.new_user("pro", email="del@example.test")
    user = await harness.server.services.users.user_by_email("del@example.test")
    second = (await harness.server.services.users.create_token(user, "other")).value
    box = await harness.new_mailbox(first)
    await harness.send(box["address"])
    deleted = await harness.http.delete(f"/api/user/accounts/{box['id']}", headers=harness.auth(second))
    assert deleted.status_code == 204 and deleted.content == b""
    assert (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth(first))).status_code == 404
    again = await harness.http.delete(f"/api/user/accounts/{box['id']}", headers=harness.auth(second))
    assert again.status_code == 404
    assert (await harness.http.get("/api/user/accounts", headers=harness.auth(first))).json()["accounts"] == []


async def test_reset_account_password(harness: Harness) -> None:
    token = await harness.new_user("pro")
    box = await harness.new_mailbox(token)
    path = f"/api/user/accounts/{box['address']}/reset-password"
    short = await harness.http.put(path, json={"password": "12345"}, headers=harness.auth(token))
    assert short.status_code == 400 and short.json()["error"] == "password_too_short"
    for content in (b"", b"{}", b'{"password": 5}'):
        bad = await harness.http.put(
            path, content=content, headers={**harness.auth(token), "content-type": "application/json"}
        )
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_request", content
    response = await harness.http.put(path, json={"password": "fresh-secret"}, headers=harness.auth(token))
    assert response.status_code == 200 and response.json() == {"message": "password_reset"}
    # The earlier mailbox token stops working; the new password signs in.
    old = await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth(box["token"]))
    assert old.status_code == 401 and old.json()["error"] == "invalid_or_expired_token"
    signed = await harness.http.post("/api/token", json={"address": box["address"], "password": "fresh-secret"})
    assert signed.status_code == 200


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_unknown_user_path_and_wrong_method(harness: Harness) -> None:
    unknown = await harness.http.get("/api/user/nothing", headers=harness.auth())
    assert unknown.status_code == 404 and unknown.json()["error"] == "not_found"
    wrong = await harness.http.patch("/api/user/me", headers=harness.auth())
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
