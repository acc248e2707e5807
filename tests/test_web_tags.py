"""Tags in the dashboard, in a real browser: the list rows and the message view show a message's
tags, and a tag links to the list filtered by it; at 1280 and 375 px."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage

from playwright.async_api import expect

from tests.browser import StartWeb, browser_test
from tests.conftest import send_mail, simple_message

pytestmark = browser_test


def tagged(subject: str, tags: str) -> EmailMessage:
    msg = simple_message(subject=subject)
    msg["X-Tags"] = tags
    return msg


async def test_tags_show_in_rows_and_message_and_filter_the_list(start_web: StartWeb) -> None:
    web = await start_web()
    user = await web.user("tia@example.test")
    page = await web.new_page()
    await web.sign_in(page, "tia@example.test")
    token = (await web.services.users.create_token(user, "tags")).value
    auth = {"Authorization": f"Bearer {token}"}
    address = f"tia@{web.server.settings.default_domain}"
    made = await web.http.post("/api/accounts", json={"address": address, "password": "secret123"}, headers=auth)
    assert made.status_code == 201, made.text
    port = web.server.smtp_port
    await asyncio.to_thread(send_mail, port, address, tagged("Weekly news", "newsletter"))
    plus = f"tia+signup@{web.server.settings.default_domain}"
    await asyncio.to_thread(send_mail, port, plus, tagged("Welcome", "onboarding"))
    await asyncio.to_thread(send_mail, port, address, simple_message(subject="Untagged"))

    await page.goto(f"/mailboxes/{made.json()['id']}")
    welcome = page.locator("tr", has_text="Welcome")
    await expect(welcome.locator(".tag")).to_have_text(["signup", "onboarding"])
    await expect(page.locator("tr", has_text="Untagged").locator(".tag")).to_have_count(0)
    await web.screenshot(page, "mailbox-tags")

    await welcome.get_by_role("link", name="Tag signup: show the messages with it").click()
    await page.wait_for_url("**?tag=signup")
    await expect(page.locator("#tag-filter")).to_contain_text("signup")
    await expect(page.locator("#message-rows tr")).to_have_count(1)
    await page.get_by_role("link", name="Welcome").click()
    tags = page.locator("dl.meta dd", has=page.locator(".tag"))
    await expect(tags.locator(".tag")).to_have_text(["signup", "onboarding"])
    await web.screenshot(page, "message-tags")
