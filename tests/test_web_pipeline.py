"""The one request pipeline of both faces, seen from the dashboard over plain HTTP: its pages hold
to the same limits as the API (request rate, creation interval, caps, DNS checks), parse page
numbers as the API does, keep the SMTP sandbox Pro-only, and refuse `Origin: null` and foreign
`next=` targets."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.model import User
from tests.conftest import Clock, Harness
from tests.dns_server import DnsServerPair, FakeDns
from tests.test_web_sessions import csrf_of, origin, signed_in


@contextlib.asynccontextmanager
async def serving(make_settings: Any, clock: Clock, **overrides: Any) -> AsyncIterator[Harness]:
    server = Inboxd(make_settings(**overrides), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
    finally:
        await server.stop()


async def user_with_token(h: Harness, email: str, plan: str) -> tuple[User, str]:
    users = h.server.services.users
    user = await users.create_user(email, plan=plan)
    return user, (await users.create_token(user, "test")).value


async def form(client: httpx.AsyncClient, h: Harness, page: str, action: str, **fields: str) -> httpx.Response:
    """Submit the form of `action` as the browser would: the page's CSRF token, from our origin."""
    shown = await client.get(page)
    assert shown.status_code == 200, shown.text
    return await client.post(action, data={**fields, "csrf_token": csrf_of(shown.text)}, headers=origin(h))


def error_of(response: httpx.Response) -> str:
    found = re.search(r"<h1[^>]*>([^<]+)</h1>", response.text)
    return found.group(1).strip() if found else ""


async def test_dashboard_creations_hold_to_the_api_creation_interval(make_settings: Any, clock: Clock) -> None:
    async with serving(make_settings, clock, free_create_interval=8.0) as h:
        _, token = await user_with_token(h, "free@example.test", "free")
        async with signed_in(h, "free@example.test") as client:
            made = await form(client, h, "/mailboxes", "/mailboxes", local="one", domain=h.domain, password="secret123")
            assert made.status_code == 303, made.text  # to the new mailbox
            held = await form(client, h, "/mailboxes", "/mailboxes", local="two", domain=h.domain, password="secret123")
            assert held.status_code == 429 and int(held.headers["retry-after"]) >= 7
            assert held.headers["x-ops-used"]  # admitted and answered as the API's creation is
            # One interval for both faces: the API waits for the dashboard's creation too.
            api = await h.http.post(
                "/api/accounts", json={"address": f"three@{h.domain}", "password": "secret123"}, headers=h.auth(token)
            )
            assert api.status_code == 429
            clock.advance(8.1)
            again = await form(
                client, h, "/mailboxes", "/mailboxes", local="two", domain=h.domain, password="secret123"
            )
            assert again.status_code == 303, again.text


async def test_a_user_at_the_mailbox_cap_is_told_so_before_any_costly_work(make_settings: Any, clock: Clock) -> None:
    """The cap is checked before the creation interval and the key derivation (an Argon2id hash):
    a user at the cap gets 403 at once, even within the interval, and no 429 to wait out."""
    async with serving(make_settings, clock, free_create_interval=8.0, free_max_mailboxes=1) as h:
        _, token = await user_with_token(h, "capped@example.test", "free")
        body = {"address": f"first@{h.domain}", "password": "secret123"}
        assert (await h.http.post("/api/accounts", json=body, headers=h.auth(token))).status_code == 201
        body = {"address": f"second@{h.domain}", "password": "secret123"}
        refused = await h.http.post("/api/accounts", json=body, headers=h.auth(token))
        assert refused.status_code == 403 and refused.json()["error"] == "account_limit_reached"
        async with signed_in(h, "capped@example.test") as client:
            page = await form(
                client, h, "/mailboxes", "/mailboxes", local="third", domain=h.domain, password="secret123"
            )
            assert page.status_code == 403 and error_of(page) == "No more mailboxes on this plan"


async def test_dashboard_password_resets_pass_the_users_request_rate(make_settings: Any, clock: Clock) -> None:
    # One request per 100 s, burst 1: the second reset within it is refused before its hash.
    async with serving(make_settings, clock, free_rps=0.01) as h:
        user, _ = await user_with_token(h, "resets@example.test", "free")
        created, _ = await h.server.services.mailboxes.create_in_dashboard(
            user, local="box", domain=h.domain, password="secret123"
        )
        box = created.mailbox.id
        async with signed_in(h, "resets@example.test") as client:
            page, action = f"/mailboxes/{box}/password", f"/mailboxes/{box}/password"
            first = await form(client, h, page, action, password="another1")
            assert first.status_code == 303 and first.headers["x-ops-used"] == "1"
            second = await form(client, h, page, action, password="another2")
            assert second.status_code == 429 and error_of(second) == "Too many attempts"
            assert int(second.headers["retry-after"]) >= 1


async def test_dashboard_pages_are_limited_per_user_and_per_ip(make_settings: Any, clock: Clock) -> None:
    async with serving(make_settings, clock, web_rps=0.01) as h:  # burst 1, then one per 100 s
        assert (await h.http.get("/auth/sign-in")).status_code == 200
        limited = await h.http.get("/auth/sign-in")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        await h.server.services.users.create_user("pages@example.test", plan="free")
        clock.advance(200)
        async with signed_in(h, "pages@example.test") as client:
            # The sign-in took the IP's token; a signed-in user has a bucket of their own.
            assert (await client.get("/mailboxes")).status_code == 200
            assert (await client.get("/mailboxes")).status_code == 429


async def test_api_tokens_are_capped_in_both_faces(make_settings: Any, clock: Clock) -> None:
    async with serving(make_settings, clock, max_tokens_per_user=2) as h:  # the bootstrap token is one
        made = await h.http.post("/api/user/tokens", json={"name": "second"}, headers=h.auth())
        assert made.status_code == 201
        refused = await h.http.post("/api/user/tokens", json={"name": "third"}, headers=h.auth())
        assert refused.status_code == 403 and refused.json()["error"] == "token_limit_reached"
        assert "revoke one" in refused.json()["message"]
        async with signed_in(h) as client:
            page = await form(client, h, "/account", "/account/tokens", name="third")
            assert page.status_code == 403 and error_of(page) == "Too many API tokens"
            assert "ibx_" not in page.text
            revoked = await h.http.delete(f"/api/user/tokens/{made.json()['id']}", headers=h.auth())
            assert revoked.status_code == 204
            again = await form(client, h, "/account", "/account/tokens", name="third")
            assert again.status_code == 200 and re.search(r'value="ibx_[\w-]{43}"', again.text)


@pytest.fixture
def dns() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_dns_checks_of_a_domain_are_throttled(make_settings: Any, clock: Clock, dns: DnsServerPair) -> None:
    async with serving(
        make_settings, clock, dns_nameservers=[dns.address], dns_timeout=0.5, domain_verify_interval=5.0
    ) as h:
        added = await h.http.post("/api/user/domains", json={"domain": "mail.example.org"}, headers=h.auth())
        assert added.status_code == 201
        domain_id = added.json()["id"]
        verify = f"/api/user/domains/{domain_id}/verify"
        assert (await h.http.post(verify, headers=h.auth())).status_code == 200
        again = await h.http.post(verify, headers=h.auth())
        assert again.status_code == 429 and 1 <= int(again.headers["retry-after"]) <= 5
        async with signed_in(h) as client:
            page = await form(client, h, "/domains", f"/domains/{domain_id}/verify")
            assert page.status_code == 429 and "checked moments ago" in page.text
            clock.advance(5.1)
            page = await form(client, h, "/domains", f"/domains/{domain_id}/verify")
            assert page.status_code == 200, page.text
        # Another domain has its own interval.
        other = await h.http.post("/api/user/domains", json={"domain": "other.example.org"}, headers=h.auth())
        assert (
            await h.http.post(f"/api/user/domains/{other.json()['id']}/verify", headers=h.auth())
        ).status_code == 200


async def test_page_numbers_are_parsed_as_the_api_parses_them(harness: Harness) -> None:
    admin = await harness.server.services.users.user_by_email("admin@localhost")
    created, _ = await harness.server.services.mailboxes.create_in_dashboard(
        admin, local="pages", domain=harness.domain, password="secret123"
    )
    box = created.mailbox.id
    async with signed_in(harness) as client:
        assert (await client.get(f"/mailboxes/{box}?page=2")).status_code == 200
        for bad in ("²", "10" * 15, "0", "-1", "1.5", "x"):
            for path in (f"/mailboxes/{box}", f"/mailboxes/{box}/rows", "/sandbox"):
                answer = await client.get(path, params={"page": bad})
                assert answer.status_code == 400, (path, bad, answer.status_code)
                assert "`page` must be an integer of at least 1." in answer.text
            api = await harness.http.get(f"/api/accounts/{box}/messages", params={"page": bad}, headers=harness.auth())
            assert api.status_code in (400, 404)  # the admin's token did not create it: 404 before the page


async def test_the_sandbox_stays_pro_only(harness: Harness) -> None:
    services = harness.server.services
    user, token = await user_with_token(harness, "sandbox@example.test", "pro")
    sandbox = (await services.sandboxes.of(user)).mailbox
    headers = harness.auth(token)

    reset = await harness.http.put(
        f"/api/user/accounts/{sandbox.id}/reset-password", json={"password": "chosen-by-me"}, headers=headers
    )
    assert reset.status_code == 403 and reset.json()["error"] == "access_denied"
    opened = await harness.http.post("/api/token", json={"address": sandbox.address, "password": "chosen-by-me"})
    assert opened.status_code == 401
    async with signed_in(harness, "sandbox@example.test") as client:
        page = f"/mailboxes/{sandbox.id}/password"
        refused = await client.post(page, data={"password": "chosen-by-me", "csrf_token": "x"}, headers=origin(harness))
        assert refused.status_code == 403  # the CSRF token is wrong, but nothing opens it anyway
        shown = await client.get("/sandbox")
        assert shown.status_code == 200
        refused = await client.post(
            page, data={"password": "chosen-by-me", "csrf_token": csrf_of(shown.text)}, headers=origin(harness)
        )
        assert refused.status_code == 403 and "no password" in refused.text
        as_mailbox = await client.get(f"/mailboxes/{sandbox.id}")
        assert as_mailbox.status_code == 303 and as_mailbox.headers["location"] == "/sandbox"  # its own place

        # A downgraded user keeps the sandbox, closed: every page of it answers as the API does.
        await services.users.update_user(user, plan="free")
        for path in ("/sandbox", "/sandbox/rows", f"/mailboxes/{sandbox.id}", f"/mailboxes/{sandbox.id}/rows"):
            answer = await client.get(path)
            assert answer.status_code == 403 and "Pro account" in answer.text, path
        live = await client.post(
            f"/mailboxes/{sandbox.id}/live-token", data={"csrf_token": csrf_of(shown.text)}, headers=origin(harness)
        )
        assert live.status_code == 403 and "token" not in live.headers.get("content-type", "")
        api = await harness.http.get("/api/user/sandbox/messages", headers=headers)
        assert api.status_code == 403 and api.json()["error"] == "pro_required"


async def test_forms_refuse_origin_null_even_with_our_referer(harness: Harness) -> None:
    async with signed_in(harness) as client:
        token = csrf_of((await client.get("/account")).text)
        ours = harness.server.settings.base_url + "/account"
        refused = await client.post(
            "/account/tokens", data={"name": "x", "csrf_token": token}, headers={"Origin": "null", "Referer": ours}
        )
        assert refused.status_code == 403 and "This form has expired" in refused.text


@pytest.mark.parametrize(
    "target",
    [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "/\x00x",
        "/\x7f",
        "/\u200b/evil.example",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "evil.example",
    ],
)
async def test_next_is_a_path_on_this_site_or_nothing(harness: Harness, target: str) -> None:
    async with signed_in(harness) as client:
        answer = await client.get("/auth/sign-in", params={"next": target})
        assert answer.status_code == 303 and answer.headers["location"] == "/account"


async def test_next_keeps_a_path_on_this_site(harness: Harness) -> None:
    async with signed_in(harness) as client:
        answer = await client.get("/auth/sign-in", params={"next": "/mailboxes?notice=deleted"})
        assert answer.status_code == 303 and answer.headers["location"] == "/mailboxes?notice=deleted"


async def test_whose_a_token_domain_or_webhook_is_one_rule_in_both_faces(harness: Harness) -> None:
    """The pages and the API ask the same service methods: another user's token, domain or webhook
    is unknown (404, the same message), the owner's own opens, and a revoked token is gone."""
    services = harness.server.services
    owner, owner_token = await user_with_token(harness, "owner@example.test", "pro")
    _, other_token = await user_with_token(harness, "other@example.test", "pro")
    domain = await services.domains.add(owner, "owned.example.com")
    hook = await services.webhooks.create(owner, url="https://hooks.example.com/in", events=["email.received"])
    kept = (await services.users.create_token(owner, "kept")).token
    pages = {
        f"/domains/{domain.id}/delete": "No such domain.",
        f"/webhooks/{hook.id}": "No such webhook.",
        f"/webhooks/{hook.id}/rotate": "No such webhook.",
        f"/account/tokens/{kept.id}/revoke": "No such token: it may have been revoked already.",
    }
    async with signed_in(harness, "other@example.test") as client:
        for path, message in pages.items():
            answer = await client.get(path)
            assert answer.status_code == 404 and message in answer.text, path
    api = {
        f"/api/user/webhooks/{hook.id}/deliveries": ("GET", "No such webhook."),
        f"/api/user/domains/{domain.id}/verify": ("POST", "No such domain."),
    }
    for path, (method, message) in api.items():
        refused = await harness.http.request(method, path, headers=harness.auth(other_token))
        assert refused.status_code == 404 and refused.json()["message"] == message, path
        mine = await harness.http.request(method, path, headers=harness.auth(owner_token))
        assert mine.status_code == 200, path
    async with signed_in(harness, "owner@example.test") as client:
        for path in pages:
            assert (await client.get(path)).status_code == 200, path
        await services.users.revoke_token(owner, kept.id)
        gone = await client.get(f"/account/tokens/{kept.id}/revoke")
        assert gone.status_code == 404 and "it may have been revoked already" in gone.text
