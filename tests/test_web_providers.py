"""Sign-in through real identity providers: `oidc-provider` (Node) for the generic issuer and for
Google (through `INBOXD_GOOGLE_ISSUER`), a GitHub faked at its transport, and a faulty issuer whose
bad ID tokens must all be refused with a page and no session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.async_api import expect

from tests.browser import StartWeb, Web, browser_test
from tests.conftest import free_port
from tests.fake_issuer import FaultyIssuer
from tests.identity_providers import FakeGitHub, OidcClient, OidcProvider

pytestmark = browser_test


@dataclass
class Idp:
    """A real OIDC provider that knows inboxd's callbacks on `port` (every test's inboxd uses it)."""

    port: int
    oidc: OidcProvider

    def settings(self, **more: object) -> dict[str, object]:
        return {
            "port": self.port,
            "oidc_issuer": self.oidc.issuer,
            "oidc_client_id": "inboxd-oidc",
            "oidc_client_secret": "oidc-secret",
            "oidc_name": "Acme SSO",
            "google_issuer": self.oidc.issuer,
            "google_client_id": "inboxd-google",
            "google_client_secret": "google-secret",
            **more,
        }


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    clients = [
        OidcClient("inboxd-oidc", "oidc-secret", [f"{base}/auth/oidc/callback"]),
        OidcClient("inboxd-google", "google-secret", [f"{base}/auth/google/callback"]),
    ]
    accounts = {"alice": {"email": "alice@example.com", "email_verified": True, "name": "Alice"}}
    with OidcProvider(clients, accounts) as oidc:
        yield Idp(port, oidc)


async def sign_in_with(web: Web, label: str, login: str, *, width: int = 1280) -> object:
    page = await web.new_page(width=width)
    await page.goto("/auth/sign-in")
    await page.get_by_role("link", name=f"Continue with {label}").click()
    await web.at_provider(page, login)
    return page


async def test_oidc_sign_up_google_links_and_email_changes(start_web: StartWeb, idp: Idp) -> None:
    with FakeGitHub() as github:
        web = await start_web(
            **idp.settings(signup_allow="*"),
            github_client_id=github.client_id,
            github_client_secret=github.client_secret,
            github_url=github.url,
            github_api_url=github.api_url,
        )
        idp.oidc.set_account("alice", {"email": "Alice@Example.com", "email_verified": True, "name": "Alice"})
        page = await web.new_page()
        await page.goto("/")
        for label in ("GitHub", "Google", "Acme SSO"):
            await expect(page.get_by_role("link", name=f"Continue with {label}")).to_be_visible()
        await web.screenshot(page, "sign-in")

        await page.get_by_role("link", name="Continue with Acme SSO").click()
        await web.at_provider(page, "alice")
        await expect(page).to_have_url(re.compile(r"/account$"))
        await expect(page.locator(".badge-free")).to_have_text("Free")  # INBOXD_SIGNUP_PLAN's default
        user = await web.services.users.user_by_email("alice@example.com")

        # The same verified email through a second provider reaches the same user.
        other = await web.new_page(width=375)
        await other.goto("/auth/sign-in")
        await other.get_by_role("link", name="Continue with Google").click()
        await web.at_provider(other, "alice")
        await expect(other).to_have_url(re.compile(r"/account$"))
        linked = await web.services.sign_in.identities(user)
        assert sorted((i.provider, i.subject) for i in linked) == [("google", "alice"), ("oidc", "alice")]
        await expect(other.get_by_text("Acme SSO")).to_be_hidden()  # labels come from the provider key
        await expect(other.locator(".identities li")).to_have_count(2)

        # The provider changes the email: the identity (provider, subject) still reaches the user.
        idp.oidc.set_account("alice", {"email": "alice@new.example", "email_verified": True, "name": "Alice"})
        third = await web.new_page()
        await third.goto("/auth/oidc/start")
        await web.at_provider(third, "alice")
        await expect(third).to_have_url(re.compile(r"/account$"))
        await expect(third.locator(".who-email")).to_have_text("alice@example.com")
        assert len(await web.services.users.search("alice")) == 1


async def test_github_sign_in_verified_primary_email_and_sign_up_rules(start_web: StartWeb) -> None:
    with FakeGitHub() as github:
        web = await start_web(
            signup_allow="example.com",
            signup_plan="pro",
            github_client_id=github.client_id,
            github_client_secret=github.client_secret,
            github_url=github.url,
            github_api_url=github.api_url,
        )
        page = await web.new_page()
        await page.goto("/account")
        await expect(page).to_have_url(re.compile(r"/auth/sign-in\?next=%2Faccount$"))
        await page.get_by_role("link", name="Continue with GitHub").click()  # GitHub answers at once
        await expect(page).to_have_url(re.compile(r"/account$"))
        await expect(page.locator(".badge-pro")).to_have_text("Pro")
        await expect(page.locator(".who-email")).to_have_text("octocat@example.com")
        assert any(r.startswith("POST /login/oauth/access_token") for r in github.requests)

        # A primary address GitHub has not verified is refused, even for an allowed domain.
        github.user = {"id": 2, "login": "eve", "name": None}
        github.emails = [
            {"email": "eve@example.com", "primary": True, "verified": False},
            {"email": "eve@other.org", "primary": False, "verified": True},
        ]
        refused = await web.new_page(width=375)
        await refused.goto("/auth/github/start")
        await expect(refused.get_by_role("heading", name="Your email address is not verified")).to_be_visible()
        await web.screenshot(refused, "error-unverified-email")
        with pytest.raises(Exception, match="No user"):
            await web.services.users.user_by_email("eve@example.com")

        # A verified address outside INBOXD_SIGNUP_ALLOW may not sign up…
        github.user = {"id": 3, "login": "bob", "name": "Bob"}
        github.emails = [{"email": "bob@other.org", "primary": True, "verified": True}]
        await refused.goto("/auth/github/start")
        await expect(refused.get_by_role("heading", name="Sign-up is closed")).to_be_visible()
        await refused.goto("/account")
        await expect(refused).to_have_url(re.compile(r"/auth/sign-in"))
        # …but an existing user with that address signs in, and the identity is linked.
        bob = await web.user("bob@other.org", plan="free")
        await refused.goto("/auth/github/start")
        await expect(refused).to_have_url(re.compile(r"/account$"))
        assert [i.subject for i in await web.services.sign_in.identities(bob)] == ["3"]


async def test_unverified_oidc_email_is_never_linked(start_web: StartWeb, idp: Idp) -> None:
    web = await start_web(**idp.settings(signup_allow="*"))
    carol = await web.user("carol@example.com")
    idp.oidc.set_account("carol", {"email": "carol@example.com", "email_verified": False, "name": "Carol"})
    page = await web.new_page()
    await page.goto("/auth/oidc/start")
    await web.at_provider(page, "carol")
    await expect(page.get_by_role("heading", name="Your email address is not verified")).to_be_visible()
    assert await web.services.sign_in.identities(carol) == []
    await page.goto("/account")
    await expect(page).to_have_url(re.compile(r"/auth/sign-in"))


async def flow(web: Web, provider: str) -> str:
    """Start a sign-in with `web.http` (keeping its cookies) and follow the provider's redirect:
    the callback URL the provider sent the browser back to."""
    start = await web.http.get(f"/auth/{provider}/start")
    assert start.status_code == 302, start.text
    async with httpx.AsyncClient(timeout=10) as outside:
        answer = await outside.get(start.headers["location"])
    assert answer.status_code == 302, answer.text
    location: str = answer.headers["location"]
    assert location.startswith(f"{web.base}/auth/{provider}/callback?")
    return location.removeprefix(web.base)


def session_cookie(web: Web) -> str | None:
    return web.http.cookies.get("inboxd_session")


async def test_bad_answers_from_providers_get_a_page_and_no_session(start_web: StartWeb) -> None:
    faulty = FaultyIssuer()
    try:
        with FakeGitHub() as github:
            web = await start_web(
                signup_allow="*",
                sign_in_rate=1000.0,
                oidc_issuer=faulty.issuer,
                oidc_client_id=faulty.client_id,
                oidc_client_secret=faulty.client_secret,
                github_client_id=github.client_id,
                github_client_secret=github.client_secret,
                github_url=github.url,
                github_api_url=github.api_url,
            )
            for mode, expected in [
                ("audience", "did not confirm the sign-in"),
                ("audience-azp", "did not confirm the sign-in"),
                ("issuer", "did not confirm the sign-in"),
                ("signature", "did not confirm the sign-in"),
                ("expired", "did not confirm the sign-in"),
                ("nonce", "did not confirm the sign-in"),
                ("garbage", "answered in a way inboxd does not understand"),
            ]:
                faulty.mode = mode
                callback = await flow(web, "oidc")
                before = session_cookie(web)
                answer = await web.http.get(callback)
                assert answer.status_code == 502 and expected in answer.text, (mode, answer.text)
                assert answer.headers["content-type"].startswith("text/html")
                assert session_cookie(web) == before  # the flow's own session, never a signed-in one
                assert (await web.http.get("/account")).status_code == 303, mode

            faulty.mode = "ok"
            callback = await flow(web, "oidc")
            tampered = await web.http.get(re.sub(r"state=[^&]+", "state=forged", callback))
            assert tampered.status_code == 400 and "could not be matched" in tampered.text
            flow_session = session_cookie(web)
            signed_in = await web.http.get(callback)
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/account"
            assert session_cookie(web) not in (None, flow_session)  # signing in makes a new session
            assert (await web.http.get("/account")).status_code == 200
            # Replayed: the state was spent, whoever sends it again.
            replay = await web.http.get(callback)
            assert replay.status_code == 400 and "could not be matched" in replay.text
            assert (await web.http.get("/account")).status_code == 200  # a replay costs no session

            # A code replayed under a fresh state: GitHub refuses it, and we say so.
            used = await flow(web, "github")
            assert (await web.http.get(used)).status_code == 303
            fresh = await flow(web, "github")
            old_code = re.search(r"code=([^&]+)", used)
            assert old_code
            again = await web.http.get(re.sub(r"code=[^&]+", f"code={old_code.group(1)}", fresh))
            assert again.status_code == 502 and "bad_verification_code" in again.text

            github.deny = True
            denied = await web.http.get(await flow(web, "github"))
            assert denied.status_code == 502 and "cancelled at GitHub" in denied.text
            github.deny = False
            callback = await flow(web, "github")
            github.garbage = True
            garbage = await web.http.get(callback)
            assert garbage.status_code == 502 and "does not understand" in garbage.text
    finally:
        faulty.stop()


async def test_a_provider_that_is_down_gets_a_page(start_web: StartWeb) -> None:
    web = await start_web(oidc_issuer=f"http://127.0.0.1:{free_port()}", oidc_client_id="x", oidc_client_secret="y")
    page = await web.new_page()
    await page.goto("/auth/sign-in")
    await page.get_by_role("link", name="Continue with Single sign-on").click()
    await expect(page.get_by_role("heading", name="Sign-in did not complete")).to_be_visible()
    await expect(page.get_by_text("could not be reached")).to_be_visible()
    await web.screenshot(page, "error-provider-down")
    await page.get_by_role("link", name="Back to sign-in").click()
    await expect(page).to_have_url(re.compile(r"/auth/sign-in$"))
    unknown = await web.http.get("/auth/nosuch/start")
    assert unknown.status_code == 404 and "not configured" in unknown.text


async def test_admin_links_providers_from_the_account_page_and_keeps_one(start_web: StartWeb, idp: Idp) -> None:
    with FakeGitHub() as github:
        web = await start_web(
            **idp.settings(signup_allow="*"),
            github_client_id=github.client_id,
            github_client_secret=github.client_secret,
            github_url=github.url,
            github_api_url=github.api_url,
        )
        admin = await web.services.users.user_by_email("admin@localhost")
        idp.oidc.set_account("root", {"email": "admin@localhost", "email_verified": True, "name": "Root"})

        # A verified email alone never reaches an admin's account.
        page = await web.new_page()
        await page.goto("/auth/oidc/start")
        await web.at_provider(page, "root")
        await expect(page.get_by_role("heading", name="Link this provider from your account first")).to_be_visible()
        await expect(page.get_by_text("link this provider from your account page")).to_be_visible()
        await web.screenshot(page, "error-link-required")
        assert await web.services.sign_in.identities(admin) == []
        await page.goto("/account")
        await expect(page).to_have_url(re.compile(r"/auth/sign-in"))

        # Signed in, the admin links it, and a GitHub account with another email, from the account page
        # (in a browser that has not signed in at the provider yet, so it asks who is there).
        page = await web.new_page()
        await web.sign_in(page, "admin@localhost")
        await expect(page.get_by_text("No identity provider is linked yet.")).to_be_visible()
        await page.get_by_role("button", name="Link Acme SSO", exact=True).click()
        await web.at_provider(page, "root")
        await expect(page).to_have_url(re.compile(r"/account$"))  # the notice is said once (not kept in the address)
        await expect(page.get_by_role("status")).to_contain_text("The provider is linked")
        await page.get_by_role("button", name="Link GitHub", exact=True).click()  # GitHub answers at once
        await expect(page.locator(".identities li")).to_have_count(2)
        await expect(page.get_by_role("button", name="Link GitHub", exact=True)).to_have_count(0)
        await expect(page.get_by_role("button", name="Link Google", exact=True)).to_be_visible()
        linked = await web.services.sign_in.identities(admin)
        assert sorted((i.provider, i.subject, i.email) for i in linked) == [
            ("github", "583231", "octocat@example.com"),
            ("oidc", "root", "admin@localhost"),
        ]
        await web.screenshot(page, "account-providers")

        # The provider now signs the admin in.
        again = await web.new_page(width=375)
        await again.goto("/auth/oidc/start")
        await web.at_provider(again, "root")
        await expect(again).to_have_url(re.compile(r"/account$"))
        await expect(again.locator(".who-email")).to_have_text("admin@localhost")

        # A provider account linked to one user cannot be linked to another.
        bob = await web.user("bob@example.com", plan="free")
        other = await web.new_page()
        await web.sign_in(other, "bob@example.com")
        await other.get_by_role("button", name="Link GitHub", exact=True).click()
        taken = other.get_by_role("heading", name="This provider account is linked to someone else")
        await expect(taken).to_be_visible()
        assert await web.services.sign_in.identities(bob) == []

        # Unlink one; the last one left is refused, with a message, and stays.
        page.once("dialog", lambda dialog: dialog.accept())
        await page.get_by_role("button", name="Unlink GitHub (octocat@example.com)").click()
        await expect(page.get_by_role("status")).to_contain_text("no longer signs you in")
        await expect(page.locator(".identities li")).to_have_count(1)
        page.once("dialog", lambda dialog: dialog.accept())
        await page.get_by_role("button", name="Unlink Single sign-on (admin@localhost)").click()
        await expect(page.get_by_role("alert")).to_contain_text("This is the only way left to sign in")
        await expect(page.locator(".identities li")).to_have_count(1)
        assert [i.provider for i in await web.services.sign_in.identities(admin)] == ["oidc"]
        await web.screenshot(page, "account-unlink-last-refused")
