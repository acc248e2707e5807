"""The dashboard's SMTP-faults banner in a real browser: a mailbox with faults says so plainly,
lists its rules, and clears them with one button; the same on the sandbox page; at 1280 and 375 px."""

from __future__ import annotations

import asyncio
import re

from playwright.async_api import Page, expect

from tests.browser import StartWeb, Web, browser_test
from tests.conftest import send_mail

pytestmark = browser_test


async def api_token(web: Web, email: str) -> str:
    user = await web.services.users.user_by_email(email)
    token: str = (await web.services.users.create_token(user, "faults")).value
    return token


async def fits_the_width(page: Page) -> bool:
    return bool(await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


async def test_a_mailbox_with_faults_shows_a_banner_that_clears_them(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("fay@example.test")
    page = await web.new_page()
    await web.sign_in(page, "fay@example.test")
    # Made through the API with the token, so `/api/accounts/{mailbox}` reaches it (the token's own).
    auth = {"Authorization": f"Bearer {await api_token(web, 'fay@example.test')}"}
    address = f"fay@{web.server.settings.default_domain}"
    made = await web.http.post("/api/accounts", json={"address": address, "password": "secret123"}, headers=auth)
    assert made.status_code == 201, made.text
    await page.goto(f"/mailboxes/{made.json()['id']}")
    await expect(page.get_by_role("heading", name=address)).to_be_visible()
    await expect(page.locator(".fault-banner")).to_have_count(0)

    body = {
        "expires_in": 600,
        "rules": [
            {"stage": "rcpt", "reply": "452 4.2.2 Mailbox full", "times": 2},
            {"stage": "data_end", "delay_ms": 500},
            {"stage": "rcpt", "greylist": {"min_retry_s": 1}},
        ],
    }
    assert (await web.http.put(f"/api/accounts/{address}/faults", json=body, headers=auth)).status_code == 200
    await page.reload()
    banner = page.get_by_role("alert")
    await expect(banner.get_by_role("heading", name="SMTP faults are on")).to_be_visible()
    await expect(banner).to_contain_text("452 4.2.2 Mailbox full, the next 2 times")
    await expect(banner).to_contain_text("wait 500 ms")
    await expect(banner).to_contain_text("greylisting")
    await web.screenshot(page, "mailbox-faults")

    phone = await web.new_page(width=375)
    await web.sign_in(phone, "fay@example.test")
    await phone.goto(page.url)
    await expect(phone.get_by_role("button", name="Clear faults")).to_be_visible()
    assert await fits_the_width(phone)

    await page.get_by_role("button", name="Clear faults").click()
    await expect(page.get_by_role("status")).to_have_text(re.compile("SMTP faults were cleared"))
    await expect(page.locator(".fault-banner")).to_have_count(0)
    assert (await web.http.get(f"/api/accounts/{address}/faults", headers=auth)).json() == {"rules": []}
    await asyncio.to_thread(send_mail, web.server.smtp_port, address)  # accepted at once


async def test_the_sandbox_page_shows_and_clears_its_faults(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("sid@example.test", plan="pro")
    page = await web.new_page()
    await web.sign_in(page, "sid@example.test")
    auth = {"Authorization": f"Bearer {await api_token(web, 'sid@example.test')}"}
    body = {"rules": [{"stage": "auth", "reply": "454 4.7.0 Temporary authentication failure", "probability": 0.5}]}
    assert (await web.http.put("/api/user/sandbox/faults", json=body, headers=auth)).status_code == 200
    await page.goto("/sandbox")
    banner = page.get_by_role("alert")
    await expect(banner).to_contain_text("SMTP to the sandbox")
    await expect(banner).to_contain_text("454 4.7.0 Temporary authentication failure, with probability 0.5")
    await web.screenshot(page, "sandbox-faults")
    await page.get_by_role("button", name="Clear faults").click()
    await expect(page.locator(".fault-banner")).to_have_count(0)
    assert (await web.http.get("/api/user/sandbox/faults", headers=auth)).json() == {"rules": []}
