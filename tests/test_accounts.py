"""Mailboxes through the REST API: create, read, delete, reset-password, sign-in, errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Harness, simple_message
from tests.test_web_sessions import csrf_of, origin, signed_in


async def test_public_domains(harness: Harness) -> None:
    response = await harness.http.get("/api/domains")
    assert response.status_code == 200
    [domain] = response.json()["domains"]
    assert domain["domain"] == "inboxd.localhost"
    assert domain["default"] is True and domain["sort_order"] == 0 and domain["pro_only"] is False
    assert len(domain["id"]) == 36


async def test_create_read_delete_mailbox(harness: Harness) -> None:
    created = await harness.new_mailbox(local="Alice.Smith")
    assert created["address"] == "alice.smith@inboxd.localhost"
    assert created["token"]
    info = await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth())
    assert info.status_code == 200
    body = info.json()
    assert set(body) == {"id", "address", "role", "quota", "used", "created_at"}
    assert body["role"] == "user" and body["used"] == 0 and body["quota"] == 1024**3
    by_address = await harness.http.get(f"/api/accounts/{created['address']}", headers=harness.auth())
    assert by_address.json()["id"] == created["id"]
    deleted = await harness.http.delete(f"/api/accounts/{created['id']}", headers=harness.auth())
    assert deleted.status_code == 204
    gone = await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth())
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"
    # A deleted mailbox's address can be created again.
    again = await harness.http.post(
        "/api/accounts", json={"address": created["address"], "password": "another1"}, headers=harness.auth()
    )
    assert again.status_code == 201


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"address": "bad address@inboxd.localhost", "password": "secret123"}, 400, "invalid_address"),
        ({"address": "no-at-sign", "password": "secret123"}, 400, "invalid_address"),
        ({"address": ".lead@inboxd.localhost", "password": "secret123"}, 400, "invalid_address"),
        ({"address": "a..b@inboxd.localhost", "password": "secret123"}, 400, "invalid_address"),
        ({"address": "x" * 65 + "@inboxd.localhost", "password": "secret123"}, 400, "invalid_address"),
        ({"address": "ok@elsewhere.example", "password": "secret123"}, 400, "invalid_domain"),
        ({"address": "ok@inboxd.localhost", "password": "12345"}, 400, "password_too_short"),
        ({"address": "ok@inboxd.localhost"}, 400, "invalid_request"),
        ({"address": "ok@inboxd.localhost", "auth_key": "zz"}, 400, "invalid_request"),
        ({"address": 5, "password": "secret123"}, 400, "invalid_request"),
        ({"password": "secret123"}, 400, "invalid_request"),
    ],
)
async def test_create_mailbox_errors(harness: Harness, body: dict[str, object], status: int, code: str) -> None:
    response = await harness.http.post("/api/accounts", json=body, headers=harness.auth())
    assert response.status_code == status, response.text
    assert response.json()["error"] == code
    assert response.json()["message"]


async def test_address_taken_across_users(harness: Harness) -> None:
    await harness.new_mailbox(local="taken")
    other = await harness.new_user()
    response = await harness.http.post(
        "/api/accounts",
        json={"address": "TAKEN@inboxd.localhost", "password": "secret123"},
        headers=harness.auth(other),
    )
    assert response.status_code == 409 and response.json()["error"] == "address_taken"


async def test_auth_key_and_password_open_the_same_mailbox(harness: Harness) -> None:
    from inboxd.services.credentials import derive_auth_key

    created = await harness.new_mailbox(local="keyed")
    key = derive_auth_key(created["address"], "secret123")
    signed = await harness.http.post("/api/token", json={"address": created["address"], "auth_key": key})
    assert signed.status_code == 200, signed.text
    assert signed.json()["id"] == created["id"] and signed.json()["address"] == created["address"]
    by_password = await harness.http.post("/api/token", json={"address": created["address"], "password": "secret123"})
    assert by_password.status_code == 200


async def test_sign_in_failures_share_one_answer(harness: Harness) -> None:
    created = await harness.new_mailbox()
    wrong = await harness.http.post("/api/token", json={"address": created["address"], "password": "wrongpass"})
    unknown = await harness.http.post("/api/token", json={"address": "nobody@inboxd.localhost", "password": "x" * 8})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert wrong.json()["error"] == "invalid_token"


async def test_other_tokens_get_404(harness: Harness) -> None:
    created = await harness.new_mailbox()
    same_user_other_token = (
        await harness.server.services.users.create_token(
            await harness.server.services.users.user_by_email("admin@localhost"), "second"
        )
    ).value
    other_user = await harness.new_user()
    for token in (same_user_other_token, other_user):
        for method, path in [
            ("GET", f"/api/accounts/{created['id']}"),
            ("DELETE", f"/api/accounts/{created['id']}"),
            ("GET", f"/api/accounts/{created['address']}/messages"),
        ]:
            response = await harness.http.request(method, path, headers=harness.auth(token))
            assert response.status_code == 404, (method, path)
            assert response.json()["error"] == "not_found"
    # The refused DELETEs removed nothing: the mailbox is there for its token, and takes mail.
    kept = await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth())
    assert kept.status_code == 200 and kept.json()["address"] == created["address"]
    assert await harness.send(created["address"]) == {}


async def test_reset_password_invalidates_tokens(harness: Harness) -> None:
    created = await harness.new_mailbox()
    old = created["token"]
    assert (await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth(old))).status_code == 200
    reset = await harness.http.put(
        f"/api/accounts/{created['id']}/reset-password", json={"password": "newsecret"}, headers=harness.auth()
    )
    assert reset.status_code == 200 and reset.json() == {"message": "password_reset"}
    after = await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth(old))
    assert after.status_code == 401 and after.json()["error"] == "invalid_or_expired_token"
    old_login = await harness.http.post("/api/token", json={"address": created["address"], "password": "secret123"})
    assert old_login.status_code == 401
    new_login = await harness.http.post("/api/token", json={"address": created["address"], "password": "newsecret"})
    assert new_login.status_code == 200
    short = await harness.http.put(
        f"/api/accounts/{created['id']}/reset-password", json={"password": "abc"}, headers=harness.auth()
    )
    assert short.status_code == 400 and short.json()["error"] == "password_too_short"


async def test_mailbox_token_scope(harness: Harness) -> None:
    created = await harness.new_mailbox()
    other = await harness.new_mailbox()
    token = created["token"]
    assert (await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth(token))).status_code == 200
    listing = await harness.http.get(f"/api/accounts/{created['id']}/messages", headers=harness.auth(token))
    assert listing.status_code == 200
    denied = await harness.http.delete(f"/api/accounts/{created['id']}", headers=harness.auth(token))
    assert denied.status_code == 403 and denied.json()["error"] == "access_denied"
    create = await harness.http.post(
        "/api/accounts", json={"address": f"x@{harness.domain}", "password": "secret123"}, headers=harness.auth(token)
    )
    assert create.status_code == 403 and create.json()["error"] == "access_denied"
    elsewhere = await harness.http.get(f"/api/accounts/{other['id']}", headers=harness.auth(token))
    assert elsewhere.status_code == 404


async def test_mailbox_token_expires(harness: Harness) -> None:
    created = await harness.new_mailbox()
    harness.clock.advance(86400 + 1)
    response = await harness.http.get(f"/api/accounts/{created['id']}", headers=harness.auth(created["token"]))
    assert response.status_code == 401 and response.json()["error"] == "invalid_or_expired_token"


async def test_free_mailbox_cap(harness: Harness) -> None:
    free = await harness.new_user(plan="free")
    for i in range(10):
        created = await harness.http.post(
            "/api/accounts",
            json={"address": f"cap{i}@{harness.domain}", "password": "secret123"},
            headers=harness.auth(free),
        )
        assert created.status_code == 201
        assert (await harness.http.get(f"/api/accounts/{created.json()['id']}", headers=harness.auth(free))).json()[
            "quota"
        ] == 40 * 1024 * 1024
    over = await harness.http.post(
        "/api/accounts",
        json={"address": f"cap10@{harness.domain}", "password": "secret123"},
        headers=harness.auth(free),
    )
    assert over.status_code == 403 and over.json()["error"] == "account_limit_reached"


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer ibx_nope", "Basic abc", "Bearer not.a.jwt"])
async def test_bad_tokens(harness: Harness, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = await harness.http.get("/api/accounts/whatever@inboxd.localhost", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_token"


async def test_suspended_user(harness: Harness) -> None:
    token = await harness.new_user(email="sus@example.test")
    await harness.server.services.users.set_user("sus@example.test", status="suspended")
    response = await harness.http.get("/api/accounts/x@inboxd.localhost", headers=harness.auth(token))
    assert response.status_code == 401 and response.json()["error"] == "account_revoked"


async def test_suspended_owner_cannot_sign_in_to_a_mailbox(harness: Harness) -> None:
    token = await harness.new_user(email="sus2@example.test")
    box = await harness.new_mailbox(token)
    await harness.server.services.users.set_user("sus2@example.test", status="suspended")
    # The right password is told why; a wrong one still gets the one answer for every failure.
    for _ in range(12):  # and refusals for suspension are not failed tries: no 429
        signed = await harness.http.post("/api/token", json={"address": box["address"], "password": "secret123"})
        assert signed.status_code == 401 and signed.json()["error"] == "account_revoked"
    wrong = await harness.http.post("/api/token", json={"address": box["address"], "password": "wrongpass"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_token"
    await harness.server.services.users.set_user("sus2@example.test", status="active")
    again = await harness.http.post("/api/token", json={"address": box["address"], "password": "secret123"})
    assert again.status_code == 200


async def dashboard_mailbox(h: Harness, local: str, email: str = "admin@localhost") -> dict[str, Any]:
    """A mailbox made in the dashboard by `email`'s signed-in browser session: the user owns it,
    no API token made it. Returns its `id` and `address` as `/api/user/accounts` lists them."""
    async with signed_in(h, email) as browser:
        form = await browser.get("/mailboxes")
        made = await browser.post(
            "/mailboxes",
            data={"local": local, "domain": h.domain, "password": "", "csrf_token": csrf_of(form.text)},
            headers=origin(h),
        )
        # POST-redirect-GET: the answer sends the browser to the new mailbox's page.
        assert made.status_code == 303 and made.headers["location"].startswith("/mailboxes/"), made.text
    user = await h.server.services.users.user_by_email(email)
    page, _ = await h.server.services.mailboxes.page_for_user(user, "", limit=1000)
    found = next(m for m in page if m.address == f"{local}@{h.domain}")
    return {"id": found.id, "address": found.address}


async def test_the_owner_learns_why_a_mailbox_answers_404(harness: Harness) -> None:
    """A mailbox of the token's user that the token did not make keeps answering 404 `not_found`
    on `/api/accounts/...` (the ownership rule), and the message says where it answers; anyone
    else gets the message of a mailbox that does not exist."""
    services = harness.server.services
    made = await dashboard_mailbox(harness, "dashboard-made")
    admin = await services.users.user_by_email("admin@localhost")
    second = (await services.users.create_token(admin, "second")).value
    by_second = await harness.new_mailbox(second)  # made with another token of the same user
    own_box_token = (await harness.new_mailbox())["token"]
    other_user = await harness.new_user()

    for box in (made, by_second):
        for method, path in [
            ("GET", f"/api/accounts/{box['id']}"),
            ("GET", f"/api/accounts/{box['address']}/messages"),
            ("DELETE", f"/api/accounts/{box['address']}"),
        ]:
            answer = await harness.http.request(method, path, headers=harness.auth())
            assert answer.status_code == 404 and answer.json()["error"] == "not_found", (method, path)
            message = answer.json()["message"]
            assert "one of your mailboxes" in message and f"/api/user/accounts/{box['id']}/messages" in message
            # (A mailbox token may not DELETE at all: 403 `access_denied`, whatever the mailbox.)
            for stranger in (other_user, own_box_token) if method == "GET" else (other_user,):
                refused = await harness.http.request(method, path, headers=harness.auth(stranger))
                assert refused.json() == {"error": "not_found", "message": "No such mailbox."}, (method, path)
        listed = await harness.http.get(f"/api/user/accounts/{box['id']}/messages", headers=harness.auth())
        assert listed.status_code == 200
        # Every route the hint names answers for a message of that mailbox.
        mail = simple_message(subject="Hinted")
        mail.add_attachment(b"a,b\n", maintype="text", subtype="csv", filename="rows.csv")
        await harness.send(box["address"], mail)
        listed = await harness.http.get(f"/api/user/accounts/{box['id']}/messages", headers=harness.auth())
        message_id = listed.json()["messages"][0]["id"]
        hinted = f"/api/user/accounts/{box['id']}/messages/{message_id}"
        for suffix in ("", "/source", "/attachments/0", "/checks", "/render.png"):
            token_path = f"/api/accounts/{box['id']}/messages/{message_id}{suffix}"
            refused = await harness.http.get(token_path, headers=harness.auth())
            said = refused.json()["message"]
            assert refused.status_code == 404 and f"/api/user/accounts/{box['id']}/messages/{{id}}" in said
            assert suffix.split("/0")[0] in said, (suffix, said)
            answered = await harness.http.get(hinted + suffix, headers=harness.auth())
            # render.png answers 501 where the render extra or Chromium is missing: never 404.
            expected = (200, 501) if suffix == "/render.png" else (200,)
            assert answered.status_code in expected, (suffix, answered.status_code, answered.text[:200])
        source = await harness.http.get(hinted + "/source", headers=harness.auth())
        assert b"Subject: Hinted" in source.content
        attachment = await harness.http.get(hinted + "/attachments/0", headers=harness.auth())
        assert attachment.content == b"a,b\n"

    sandbox = (await harness.http.get("/api/user/sandbox", headers=harness.auth())).json()
    to_sandbox = await harness.http.get(f"/api/accounts/{sandbox['account_id']}/messages", headers=harness.auth())
    assert to_sandbox.status_code == 404 and "/api/user/sandbox/messages" in to_sandbox.json()["message"]

    # A free user's token: the user's routes need Pro, and the message says so.
    free = await services.users.create_user("free@example.test", plan="free")
    free_token = (await services.users.create_token(free, "t")).value
    free_box = await dashboard_mailbox(harness, "free-made", email="free@example.test")
    answer = await harness.http.get(f"/api/accounts/{free_box['id']}", headers=harness.auth(free_token))
    assert answer.status_code == 404 and "needs Pro" in answer.json()["message"]
