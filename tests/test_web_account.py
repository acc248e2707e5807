"""The dashboard in a real browser: one-time sign-in links, the account page and its API tokens,
signing out (here, everywhere, back button, two tabs), expired sessions."""

from __future__ import annotations

import re

from playwright.async_api import expect

from tests.browser import StartWeb, browser_test

pytestmark = browser_test


async def test_sign_in_link_account_page_and_api_tokens(start_web: StartWeb) -> None:
    web = await start_web()
    page = await web.new_page()

    await page.goto("/")
    await expect(page).to_have_url(re.compile(r"/auth/sign-in$"))
    await expect(page.get_by_role("heading", name="Sign in to inboxd")).to_be_visible()
    await web.screenshot(page, "sign-in-no-provider")

    await page.goto(await web.link_for("admin@localhost"))
    await web.screenshot(page, "sign-in-link")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(re.compile(r"/account$"))
    await expect(page.get_by_text("admin@localhost").first).to_be_visible()
    await expect(page.locator(".badge-pro")).to_have_text("Pro")

    await page.get_by_label("Name").fill("ci")
    await page.get_by_role("button", name="Create token").click()
    await expect(page.get_by_role("heading", name="Token “ci” created")).to_be_visible()
    value = await page.locator("#new-token").input_value()
    assert re.fullmatch(r"ibx_[A-Za-z0-9_-]{43}", value)
    await expect(page.get_by_role("button", name="Copy")).to_be_visible()
    await web.screenshot(page, "account-token-created")

    me = await web.http.get("/api/user/me", headers={"Authorization": f"Bearer {value}"})
    assert me.status_code == 200 and me.json()["email"] == "admin@localhost"

    await page.goto("/account")  # the value is never shown again
    assert value not in await page.content()
    row = page.get_by_role("row", name=re.compile(r"^ci "))
    await expect(row).to_contain_text(value[:8])
    await expect(row).not_to_contain_text("never")  # last used: just now
    await web.screenshot(page, "account")

    await row.get_by_role("link", name="Revoke ci").click()
    await expect(page.get_by_role("heading", name="Revoke “ci”?")).to_be_visible()
    await web.screenshot(page, "revoke-confirm")
    await page.get_by_role("button", name="Revoke token").click()
    await expect(page.get_by_role("status")).to_contain_text("revoked")
    await expect(page.get_by_role("row", name=re.compile(r"^ci "))).to_have_count(0)

    gone = await web.http.get("/api/user/me", headers={"Authorization": f"Bearer {value}"})
    assert gone.status_code == 401 and gone.json()["error"] == "invalid_token"


async def test_sign_in_link_works_once_and_expires(start_web: StartWeb) -> None:
    web = await start_web()
    link = await web.link_for("admin@localhost")
    first = await web.new_page()
    await first.goto(link)
    await first.get_by_role("button", name="Sign in").click()
    await expect(first).to_have_url(re.compile(r"/account$"))

    second = await web.new_page(width=375)
    await second.goto(link)
    await second.get_by_role("button", name="Sign in").click()
    await expect(second.get_by_role("heading", name="This sign-in link was already used")).to_be_visible()
    await web.screenshot(second, "error-link-used")
    await second.goto("/account")
    await expect(second).to_have_url(re.compile(r"/auth/sign-in"))

    late = await web.link_for("admin@localhost")
    web.clock.advance(web.server.settings.sign_in_link_ttl + 1)
    await second.goto(late)
    await second.get_by_role("button", name="Sign in").click()
    await expect(second.get_by_role("heading", name="This sign-in link has expired")).to_be_visible()
    await second.get_by_role("link", name="Back to sign-in").click()
    await expect(second).to_have_url(re.compile(r"/auth/sign-in$"))


async def test_sign_out_then_back_button_shows_no_account(start_web: StartWeb) -> None:
    web = await start_web()
    page = await web.new_page()
    await web.sign_in(page, "admin@localhost")
    await page.get_by_role("button", name="Sign out", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/auth/sign-in\?reason=signed-out$"))
    await expect(page.get_by_role("status")).to_have_text("You are signed out.")
    await page.go_back()
    await expect(page).to_have_url(re.compile(r"/auth/sign-in"))
    # Nothing of the account: no signed-in header, no account page (the sign-in page's operator
    # command names the bootstrap admin, admin@localhost, to anyone, as the start-up hint does).
    await expect(page.locator(".who-email")).to_have_count(0)
    await expect(page.get_by_role("heading", name="Your account")).to_have_count(0)
    assert "Sign out" not in await page.content()


async def test_two_tabs_and_sign_out_everywhere(start_web: StartWeb) -> None:
    web = await start_web()
    laptop = await web.new_page()
    await web.sign_in(laptop, "admin@localhost")
    second_tab = await laptop.context.new_page()
    await second_tab.goto("/account")
    await expect(second_tab.get_by_role("heading", name="Your account")).to_be_visible()

    # A form left open in one tab after signing out in the other: back to sign-in, nothing made.
    await second_tab.get_by_label("Name").fill("stale")
    await laptop.get_by_role("button", name="Sign out", exact=True).click()
    await second_tab.get_by_role("button", name="Create token").click()
    await expect(second_tab).to_have_url(re.compile(r"/auth/sign-in\?reason=expired$"))
    await expect(second_tab.get_by_role("status")).to_contain_text("Your session has ended")
    admin = await web.services.users.user_by_email("admin@localhost")
    assert [t.name for t in await web.services.users.list_tokens(admin)] == ["bootstrap"]

    # Signed in on two devices; "sign out everywhere" on one ends both.
    await web.sign_in(laptop, "admin@localhost")
    phone = await web.new_page(width=375)
    await web.sign_in(phone, "admin@localhost")
    await expect(phone.get_by_text("Signed in on 2 devices.")).to_be_visible()
    laptop.once("dialog", lambda dialog: dialog.accept())
    await laptop.get_by_role("button", name="Sign out everywhere").click()
    await expect(laptop).to_have_url(re.compile(r"reason=signed-out-everywhere$"))
    await phone.reload()
    await expect(phone).to_have_url(re.compile(r"/auth/sign-in"))


async def test_session_slides_and_expires(start_web: StartWeb) -> None:
    web = await start_web(session_ttl=1000.0)
    page = await web.new_page()
    await web.sign_in(page, "admin@localhost")
    web.clock.advance(700)
    await page.goto("/account")
    await expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    web.clock.advance(700)  # 1,400 s after sign-in, 700 after the last visit
    await page.goto("/account")
    await expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    web.clock.advance(1001)
    await page.goto("/account")
    await expect(page).to_have_url(re.compile(r"/auth/sign-in\?next=%2Faccount&reason=expired$"))
    await expect(page.get_by_role("status")).to_contain_text("Your session has ended")


async def test_admin_changes_plan_and_suspends_a_user(start_web: StartWeb) -> None:
    web = await start_web()
    sam = await web.user("sam@example.test", plan="free")
    sam_token = (await web.services.users.create_token(sam, "laptop")).value
    sam_page = await web.new_page(width=375)
    await web.sign_in(sam_page, "sam@example.test")
    await expect(sam_page.get_by_role("link", name="Users")).to_have_count(0)
    await sam_page.goto("/admin/users")
    await expect(sam_page.get_by_role("heading", name="Not allowed")).to_be_visible()
    assert (await web.http.get("/api/user/me", headers={"Authorization": f"Bearer {sam_token}"})).status_code == 403

    admin = await web.new_page()
    await web.sign_in(admin, "admin@localhost")
    await admin.get_by_role("link", name="Users").click()
    await admin.get_by_label("Search by email").fill("SAM@")
    await admin.get_by_role("button", name="Search").click()
    await expect(admin.get_by_role("row")).to_have_count(2)  # the header and sam
    await web.screenshot(admin, "admin-users")
    await admin.get_by_role("link", name="sam@example.test").click()
    await admin.get_by_label("Plan", exact=True).select_option("pro")
    await admin.get_by_role("button", name="Save").click()
    await expect(admin.get_by_role("status")).to_have_text("Saved.")
    me = await web.http.get("/api/user/me", headers={"Authorization": f"Bearer {sam_token}"})
    assert me.status_code == 200 and me.json()["plan"] == "pro"
    await expect(admin.get_by_text("1 device")).to_be_visible()

    admin.once("dialog", lambda dialog: dialog.accept())
    await admin.get_by_label("Status", exact=True).select_option("suspended")
    await admin.get_by_role("button", name="Save").click()
    await expect(admin.locator(".badge-suspended")).to_be_visible()
    await expect(admin.get_by_text("0 devices")).to_be_visible()
    await web.screenshot(admin, "admin-user")
    revoked = await web.http.get("/api/user/me", headers={"Authorization": f"Bearer {sam_token}"})
    assert revoked.status_code == 401 and revoked.json()["error"] == "account_revoked"
    await sam_page.goto("/account")
    await expect(sam_page).to_have_url(re.compile(r"/auth/sign-in\?next=%2Faccount&reason=expired$"))

    # An admin cannot lock themselves out.
    me_admin = await web.services.users.user_by_email("admin@localhost")
    await admin.goto(f"/admin/users/{me_admin.id}")
    await expect(admin.get_by_label("Status", exact=True)).to_be_disabled()
    own = await admin.evaluate(
        """async (id) => {
            const form = new URLSearchParams({csrf_token: document.querySelector('[name=csrf_token]').value,
                                              status: 'suspended'});
            return (await fetch('/admin/users/' + id, {method: 'POST', body: form})).status;
        }""",
        me_admin.id,
    )
    assert own == 403
    assert (await web.services.users.user_by_email("admin@localhost")).status == "active"
