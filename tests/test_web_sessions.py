"""Browser sessions and the dashboard's defences over plain HTTP: CSRF, security headers, the
sign-in link from the command line, per-IP sign-in limits, suspension ending sessions."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from inboxd.app import Inboxd
from tests.conftest import OTHER_CLIENT_IP, Clock, Harness, http_client_from
from tests.test_cli_users import cli


def origin(h: Harness) -> dict[str, str]:
    return {"Origin": h.server.settings.resolved_web_origin}


@contextlib.asynccontextmanager
async def signed_in(h: Harness, email: str = "admin@localhost") -> AsyncIterator[httpx.AsyncClient]:
    """A client holding a session cookie of `email`, signed in through a one-time link."""
    services = h.server.services
    link = await services.sign_in.issue_link(await services.users.user_by_email(email))
    async with httpx.AsyncClient(base_url=str(h.http.base_url), timeout=30) as client:
        answer = await client.post(link.split("8025", 1)[1], headers=origin(h))
        assert answer.status_code == 303 and answer.headers["location"] == "/account", answer.text
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith("inboxd_session=") and "HttpOnly" in cookie and "SameSite=lax" in cookie
        assert "Secure" not in cookie  # the base URL is http
        assert "Max-Age=1209600" in cookie
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found
    return found.group(1)


async def test_forms_need_our_origin_and_the_session_token(harness: Harness) -> None:
    async with signed_in(harness) as client:
        page = await client.get("/account")
        assert page.status_code == 200
        token = csrf_of(page.text)
        form = {"name": "x", "csrf_token": token}

        for headers, data in [
            (origin(harness), {"name": "x"}),  # no token
            (origin(harness), {"name": "x", "csrf_token": token[:-2] + "xx"}),  # a wrong one
            ({"Origin": "https://evil.example"}, form),  # another site
            ({"Origin": "null"}, form),
            ({}, form),  # neither Origin nor Referer
            ({"Referer": "https://evil.example/page"}, form),
        ]:
            refused = await client.post("/account/tokens", data=data, headers=headers)
            assert refused.status_code == 403, (headers, data)
            assert "This form has expired" in refused.text and "ibx_" not in refused.text
            assert refused.headers["content-type"].startswith("text/html")

        referer = await client.post(
            "/account/tokens", data=form, headers={"Referer": harness.server.settings.base_url + "/account"}
        )
        assert referer.status_code == 200 and re.search(r'value="ibx_[\w-]{43}"', referer.text)
        made = await client.post("/account/tokens", data={**form, "name": "y"}, headers=origin(harness))
        assert made.status_code == 200
        admin = await harness.server.services.users.user_by_email("admin@localhost")
        assert sorted(t.name for t in await harness.server.services.users.list_tokens(admin)) == [
            "bootstrap",
            "x",
            "y",
        ]
        # The sign-in link form has no session yet: the origin check alone guards it.
        link = await harness.server.services.sign_in.issue_link(admin)
        foreign = await client.post(link.split("8025", 1)[1], headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403


async def test_every_page_carries_the_security_headers(harness: Harness) -> None:
    async with signed_in(harness) as client:
        answers = [
            await client.get("/account"),
            await client.get("/auth/sign-in?reason=expired"),
            await client.get("/auth/link/not-a-real-link"),
            await client.post("/auth/link/not-a-real-link", headers=origin(harness)),
            await client.get("/static/app.css"),
            await client.get("/static/app.js"),
        ]
        for answer in answers:
            csp = answer.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "same-origin"
        assert answers[0].headers["cache-control"] == "no-store"
        lost = await client.get("/no/such/page", headers={"Accept": "text/html,*/*"})
        assert lost.status_code == 404 and "There is no page at this address." in lost.text
        assert (
            "Back to your account" in lost.text and "frame-ancestors 'none'" in lost.headers["content-security-policy"]
        )
        api = await client.get("/api/no/such", headers={"Accept": "text/html,*/*"})
        assert api.status_code == 404 and api.json()["error"] == "not_found"
        assert answers[3].status_code == 410 and "This sign-in link is not valid" in answers[3].text
        assert answers[4].headers["content-type"].startswith("text/css")


async def test_cli_prints_a_one_time_link_on_its_last_line(harness: Harness) -> None:
    made = await cli(harness, "users", "sign-in-link", "--email", "Admin@Localhost")
    assert made.returncode == 0, made.stderr
    link = made.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"http://localhost:8025/auth/link/[\w-]{43}", link)
    path = link.removeprefix("http://localhost:8025")
    shown = await harness.http.get(path)
    assert shown.status_code == 200 and "Sign in" in shown.text  # looking does not use it up
    first = await harness.http.post(path, headers=origin(harness))
    assert first.status_code == 303
    session = harness.http.cookies["inboxd_session"]
    again = await harness.http.post(path, headers=origin(harness))
    assert again.status_code == 410 and "already been used" in again.text
    assert harness.http.cookies["inboxd_session"] == session  # no new session came of it


async def test_sign_in_attempts_are_limited_per_ip(make_settings: Any, clock: Clock) -> None:
    server = Inboxd(make_settings(sign_in_rate=3.0), clock=clock)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            headers = {"Origin": server.settings.resolved_web_origin}
            codes = [(await http.post(f"/auth/link/bad{i}", headers=headers)).status_code for i in range(4)]
            assert codes == [410, 410, 410, 429]
            limited = await http.post("/auth/link/bad", headers=headers)
            assert "Too many attempts" in limited.text and int(limited.headers["retry-after"]) >= 1
            # Another IP is not held back by this one's attempts.
            async with http_client_from(OTHER_CLIENT_IP, str(http.base_url)) as other:
                assert (await other.post("/auth/link/bad", headers=headers)).status_code == 410
            clock.advance(61)
            assert (await http.post("/auth/link/bad", headers=headers)).status_code == 410
    finally:
        await server.stop()


async def test_suspending_a_user_ends_their_sessions(harness: Harness) -> None:
    users = harness.server.services.users
    user = await users.create_user("sam@example.test", plan="pro")
    async with signed_in(harness, "sam@example.test") as client:
        assert (await client.get("/account")).status_code == 200
        await users.set_user("sam@example.test", status="suspended")  # as `inboxd users set` does
        after = await client.get("/account")
        assert after.status_code == 303 and after.headers["location"] == "/auth/sign-in?next=%2Faccount&reason=expired"
        assert await harness.server.services.sessions.count(user) == 0
        link = await harness.server.services.sign_in.issue_link(user)
        refused = await client.post(link.split("8025", 1)[1], headers=origin(harness))
        assert refused.status_code == 403 and "suspended" in refused.text


async def test_expired_sessions_and_stale_links_are_swept(harness: Harness) -> None:
    services = harness.server.services
    admin = await services.users.user_by_email("admin@localhost")
    kept = await services.sessions.open(admin)
    await services.sign_in.issue_link(admin)
    harness.clock.advance(harness.server.settings.session_ttl + 1)
    fresh = await services.sessions.open(admin)
    assert await services.sessions.sweep() == 1  # the expired one; the fresh one stays
    assert await services.sessions.resolve(kept.value) is None
    assert await services.sessions.resolve(fresh.value) is not None
    assert await services.sign_in.sweep() == 2  # ours and the one printed at first start
