"""Security rules that no other test held down: each case is what one user must not reach of
another's, or what the server must refuse, checked over real SMTP and HTTP.

- the SMTP sandbox: one user's username with another user's token; another user's message ids;
- the REST API: another user's mailbox export; Pro-only public domains;
- the dashboard: an administrator's form posted by a user; the cookie under an https base URL;
  attachments that a browser could render (HTML, SVG) always downloaded, never shown.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import smtplib
from collections.abc import AsyncIterator
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.model import User
from tests.conftest import Clock, Harness, simple_message
from tests.test_smtp import RawSmtp

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def plain(username: str, password: str) -> str:
    return base64.b64encode(f"\0{username}\0{password}".encode()).decode()


async def sandbox_username(h: Harness, token: str) -> str:
    info = await h.http.get("/api/user/sandbox", headers=h.auth(token))
    assert info.status_code == 200, info.text
    username: str = info.json()["username"]
    return username


def with_attachments(*parts: tuple[bytes, str, str, str]) -> EmailMessage:
    """A plain message carrying `(data, maintype, subtype, filename)` attachments."""
    msg = simple_message(subject="With parts")
    for data, maintype, subtype, filename in parts:
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return msg


# --- the SMTP sandbox -----------------------------------------------------------------------


@sqlite_only
async def test_sandbox_username_with_another_users_token_is_refused(harness: Harness) -> None:
    alice_token, bob_token = await harness.new_user("pro"), await harness.new_user("pro")
    alice, bob = await sandbox_username(harness, alice_token), await sandbox_username(harness, bob_token)
    port = harness.server.submission_port
    refused = "535 5.7.8 Authentication credentials invalid"
    client = await RawSmtp.connect(port)
    await client.cmd("EHLO app")
    # Bob's live token does not open Alice's sandbox, over PLAIN or LOGIN, and the reverse.
    assert await client.cmd(f"AUTH PLAIN {plain(alice, bob_token)}") == refused
    assert await client.cmd(f"AUTH PLAIN {plain(bob, alice_token)}") == refused
    assert (await client.cmd("AUTH LOGIN"))[:3] == "334"
    assert (await client.cmd(base64.b64encode(alice.encode()).decode()))[:3] == "334"
    assert await client.cmd(base64.b64encode(bob_token.encode()).decode()) == refused
    assert (await client.cmd("MAIL FROM:<app@example.com>")).startswith("530 5.7.0")
    # Each token opens its own user's sandbox: the refusals were about the pairing.
    assert (await client.cmd(f"AUTH PLAIN {plain(bob, bob_token)}"))[:3] == "235"
    await client.close()
    await asyncio.to_thread(_submit, port, alice, alice_token, simple_message().as_bytes())
    listed = await harness.http.get("/api/user/sandbox/messages", headers=harness.auth(bob_token))
    assert listed.json()["messages"] == []  # nothing of Alice's landed with Bob


@sqlite_only
async def test_another_pro_users_sandbox_message_ids_are_not_found(harness: Harness) -> None:
    alice_token, bob_token = await harness.new_user("pro"), await harness.new_user("pro")
    alice = await sandbox_username(harness, alice_token)
    await sandbox_username(harness, bob_token)  # Bob has a sandbox of his own too
    raw = with_attachments((b"secret,data\n", "text", "csv", "data.csv")).as_bytes()
    await asyncio.to_thread(_submit, harness.server.submission_port, alice, alice_token, raw)
    mine = await harness.http.get("/api/user/sandbox/messages", headers=harness.auth(alice_token))
    [item] = mine.json()["messages"]
    base = f"/api/user/sandbox/messages/{item['id']}"
    for method, path in [
        ("GET", base),
        ("GET", f"{base}/source"),
        ("GET", f"{base}/attachments/0"),
        ("DELETE", base),
        ("GET", f"/api/user/sandbox/messages/{item['id'].upper()}"),  # ids in any case name one message
    ]:
        answer = await harness.http.request(method, path, headers=harness.auth(bob_token))
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"] == "not_found" and b"secret" not in answer.content
    # Bob's purge empties his sandbox only; Alice's message is whole and still hers.
    assert (await harness.http.delete("/api/user/sandbox/messages", headers=harness.auth(bob_token))).status_code in (
        200,
        204,
    )
    kept = await harness.http.get(f"{base}/attachments/0", headers=harness.auth(alice_token))
    assert kept.status_code == 200 and kept.content == b"secret,data\n"


def _submit(port: int, username: str, token: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.login(username, token)
        smtp.sendmail("app@example.com", ["someone@example.org"], raw)


# --- the REST API ---------------------------------------------------------------------------


@sqlite_only
async def test_export_of_another_users_existing_mailbox_is_not_found(harness: Harness) -> None:
    alice_token, bob_token = await harness.new_user("pro"), await harness.new_user("pro")
    box = await harness.new_mailbox(alice_token)
    await harness.send(box["address"], simple_message(subject="Only for Alice", body="code 918273"))
    own = await harness.http.get(f"/api/accounts/{box['id']}/export.mbox", headers=harness.auth(alice_token))
    assert own.status_code == 200 and b"code 918273" in own.content
    for ref in (box["id"], box["address"], box["address"].upper()):
        other = await harness.http.get(f"/api/accounts/{ref}/export.mbox", headers=harness.auth(bob_token))
        assert other.status_code == 404, (ref, other.text)
        assert other.json()["error"] == "not_found" and b"918273" not in other.content
    # Nor does another mailbox's own token reach it.
    bobs_box = await harness.new_mailbox(bob_token)
    signed = await harness.http.post("/api/token", json={"address": bobs_box["address"], "password": "secret123"})
    assert signed.status_code == 200, signed.text
    crossed = await harness.http.get(
        f"/api/accounts/{box['id']}/export.mbox", headers=harness.auth(signed.json()["token"])
    )
    # decisions.md: with a mailbox token, another mailbox answers 404 `not_found`, on every path.
    assert crossed.status_code == 404 and crossed.json()["error"] == "not_found", crossed.text
    assert b"918273" not in crossed.content
    listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(signed.json()["token"]))
    assert listed.status_code == 404 and listed.json()["error"] == "not_found", listed.text


@pytest.fixture
async def start_server(make_settings: Any, clock: Clock) -> AsyncIterator[Any]:
    """`await start_server(**settings)`: a running inboxd and an HTTP client for it."""
    running: list[tuple[Inboxd, httpx.AsyncClient]] = []

    async def start(**overrides: Any) -> Harness:
        server = Inboxd(make_settings(**overrides), clock=clock)
        await server.start()
        assert server.bootstrap_token is not None
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        running.append((server, http))
        return Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)

    try:
        yield start
    finally:
        for server, http in reversed(running):
            await http.aclose()
            await server.stop()


@sqlite_only
async def test_pro_only_public_domains_refuse_free_users(start_server: Any) -> None:
    h: Harness = await start_server(
        public_domains=["inboxd.localhost", "vip.localhost"], pro_only_domains=["vip.localhost"]
    )
    listed = (await h.http.get("/api/domains")).json()["domains"]
    flags = {d["domain"]: d["pro_only"] for d in listed}
    assert flags == {"inboxd.localhost": False, "vip.localhost": True}
    free, pro = await h.new_user("free"), await h.new_user("pro")
    for address in ("one@vip.localhost", "two@VIP.localhost", "three+tag@vip.localhost"):
        refused = await h.http.post(
            "/api/accounts", json={"address": address, "password": "secret123"}, headers=h.auth(free)
        )
        assert refused.status_code == 400, (address, refused.text)
        assert refused.json()["error"] == "invalid_domain"
    assert (
        await h.http.post(
            "/api/accounts", json={"address": "free@inboxd.localhost", "password": "secret123"}, headers=h.auth(free)
        )
    ).status_code == 201
    made = await h.http.post(
        "/api/accounts", json={"address": "one@vip.localhost", "password": "secret123"}, headers=h.auth(pro)
    )
    assert made.status_code == 201, made.text
    # The dashboard's form takes the same rule: a free user's session cannot make one either.
    free_user = await h.server.services.users.create_user("free-web@example.test", plan="free")
    async with signed_in(h, free_user) as (client, headers):
        form = await client.get("/mailboxes", headers=headers)
        assert form.status_code == 200
        assert "vip.localhost" not in form.text  # not offered
        posted = await client.post(
            "/mailboxes",
            data={"local": "sneaky", "domain": "vip.localhost", "password": "", "csrf_token": csrf_of(form.text)},
            headers=headers,
        )
        assert posted.status_code in (400, 403), posted.status_code
    boxes = await h.server.services.mailboxes.domains_for(free_user)
    assert "vip.localhost" not in boxes
    taken = await h.http.get("/api/accounts/sneaky@vip.localhost", headers=h.auth())
    assert taken.status_code == 404


# --- the dashboard --------------------------------------------------------------------------


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found
    return found.group(1)


@contextlib.asynccontextmanager
async def signed_in(h: Harness, user: User) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """A client signed in as `user` through a one-time link, and the headers each request needs
    (our Origin, and the session cookie sent by hand, since under an https base URL it is `Secure`
    and a client on plain http would keep it to itself)."""
    settings = h.server.settings
    link = await h.server.services.sign_in.issue_link(user)
    origin = {"Origin": settings.resolved_web_origin}
    async with httpx.AsyncClient(base_url=str(h.http.base_url), timeout=30) as client:
        answer = await client.post(urlsplit(link).path, headers=origin)
        assert answer.status_code == 303, answer.text
        name, _, rest = answer.headers["set-cookie"].partition("=")
        value = rest.split(";", 1)[0]
        client.cookies.clear()
        yield client, {**origin, "Cookie": f"{name}={value}"}


@sqlite_only
async def test_a_user_cannot_post_the_administrators_form(harness: Harness) -> None:
    users = harness.server.services.users
    sam = await users.create_user("sam@example.test", plan="free")
    other = await users.create_user("other@example.test", plan="free")
    admin = await users.user_by_email("admin@localhost")
    async with signed_in(harness, sam) as (client, headers):
        account = await client.get("/account", headers=headers)
        assert account.status_code == 200
        token = csrf_of(account.text)  # a valid form token of Sam's own session
        for target in (other, sam, admin):
            for change in ({"plan": "pro"}, {"role": "admin"}, {"status": "suspended"}):
                answer = await client.post(
                    f"/admin/users/{target.id}", data={**change, "csrf_token": token}, headers=headers
                )
                assert answer.status_code == 403, (target.email, change, answer.status_code)
        listing = await client.get("/admin/users", headers=headers)
        assert listing.status_code == 403 and "other@example.test" not in listing.text
    for before in (sam, other, admin):
        after = await users.user_by_id(before.id)
        assert (after.plan, after.role, after.status) == (before.plan, before.role, before.status)


@sqlite_only
async def test_an_https_base_url_sets_secure_host_prefixed_cookies(start_server: Any) -> None:
    h: Harness = await start_server(
        base_url="https://mail.example.test",
        github_client_id="gh-id",
        github_client_secret="gh-secret",
    )
    users = h.server.services.users
    user = await users.create_user("tls@example.test", plan="pro")
    origin = {"Origin": "https://mail.example.test"}
    link = await h.server.services.sign_in.issue_link(user)
    answer = await h.http.post(urlsplit(link).path, headers=origin)
    assert answer.status_code == 303, answer.text
    cookie = answer.headers["set-cookie"]
    _assert_host_cookie(cookie)
    value = cookie.split(";", 1)[0].split("=", 1)[1]
    assert value
    # The session is read under that name only; the plain name opens nothing.
    h.http.cookies.clear()
    plain_name = await h.http.get("/account", headers={"Cookie": f"inboxd_session={value}"})
    assert plain_name.status_code == 303 and "/auth/sign-in" in plain_name.headers["location"]
    page = await h.http.get("/account", headers={"Cookie": f"__Host-inboxd_session={value}"})
    assert page.status_code == 200 and "tls@example.test" in page.text
    # Signing out clears it under the same name, with the same attributes.
    out = await h.http.post(
        "/auth/sign-out",
        data={"csrf_token": csrf_of(page.text)},
        headers={**origin, "Cookie": f"__Host-inboxd_session={value}"},
    )
    assert out.status_code == 303
    _assert_host_cookie(out.headers["set-cookie"])
    # A provider's sign-in opens a flow session, whose cookie follows the same rule.
    h.http.cookies.clear()
    started = await h.http.get("/auth/github/start")
    assert started.status_code == 302, started.text
    _assert_host_cookie(started.headers["set-cookie"])


def _assert_host_cookie(header: str) -> None:
    assert header.startswith("__Host-inboxd_session="), header
    attributes = [a.strip().lower() for a in header.split(";")[1:]]
    assert "secure" in attributes and "httponly" in attributes and "path=/" in attributes, header
    assert not any(a.startswith("domain=") for a in attributes), header  # __Host- forbids Domain


SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.cookie)</script></svg>'
HTML = b"<html><body><script>fetch('/account/tokens', {method: 'POST'})</script></body></html>"


@sqlite_only
async def test_html_and_svg_attachments_are_downloads_in_the_dashboard(harness: Harness) -> None:
    users = harness.server.services.users
    owner = await users.create_user("owner@example.test", plan="pro")
    token = (await users.create_token(owner, "t")).value
    box = await harness.new_mailbox(token)
    message = with_attachments(
        (HTML, "text", "html", "page.html"),
        (SVG, "image", "svg+xml", "drawing.svg"),
        (b"<p>xhtml</p>", "application", "xhtml+xml", "page.xhtml"),
    )
    await harness.send(box["address"], message)
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(token))).json()[
        "messages"
    ]
    async with signed_in(harness, owner) as (client, headers):
        for index, (data, filename) in enumerate(
            [(HTML, "page.html"), (SVG, "drawing.svg"), (b"<p>xhtml</p>", "page.xhtml")]
        ):
            path = f"/mailboxes/{box['id']}/messages/{item['id']}/attachments/{index}"
            answer = await client.get(path, headers=headers)
            assert answer.status_code == 200, (path, answer.text)
            assert answer.content == data
            assert answer.headers["content-type"] == "application/octet-stream", filename
            disposition = answer.headers["content-disposition"]
            assert disposition.startswith("attachment;") and f'filename="{filename}"' in disposition
            assert answer.headers["x-content-type-options"] == "nosniff"
        # Another signed-in user gets nothing of it.
        stranger = await users.create_user("stranger@example.test", plan="pro")
        async with signed_in(harness, stranger) as (other, other_headers):
            path = f"/mailboxes/{box['id']}/messages/{item['id']}/attachments/1"
            refused = await other.get(path, headers=other_headers)
            assert refused.status_code == 404 and SVG not in refused.content
