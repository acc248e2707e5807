"""The Release form of the message page in a real browser, against a second inboxd as the relay:
the relay's answer per recipient on the result page and in the message's history, a refused
recipient said on the page with the addresses kept. Screenshots at 1280 and 375 px."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import httpx
from playwright.async_api import expect

from inboxd.app import Inboxd
from inboxd.config import Settings
from tests.browser import StartWeb, browser_test
from tests.conftest import Clock, send_mail, simple_message

pytestmark = browser_test
RELAY_DOMAIN = "relay.test"


async def test_release_from_the_message_page(
    start_web: StartWeb, tmp_path: Path, sqlite_template: Path, clock: Clock
) -> None:
    data = tmp_path / "relay-data"
    data.mkdir()
    shutil.copy(sqlite_template, data / "inboxd.sqlite3")
    relay = Inboxd(
        Settings(data_dir=data, http_port=0, smtp_port=0, submission_port=0, public_domains=[RELAY_DOMAIN]),
        clock=clock,
    )
    await relay.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{relay.http_port}", timeout=30) as relay_http:
            relay_auth = {"Authorization": f"Bearer {relay.bootstrap_token}"}
            inbox = f"me@{RELAY_DOMAIN}"
            created = await relay_http.post(
                "/api/accounts", json={"address": inbox, "password": "secret123"}, headers=relay_auth
            )
            assert created.status_code == 201, created.text

            web = await start_web(
                relay_host="127.0.0.1",
                relay_port=relay.smtp_port,
                relay_tls="none",
                relay_allow=[RELAY_DOMAIN, "qa@example.org"],
                relay_sender="releases@ops.example",
            )
            user = await web.user("ann@example.test")
            token = (await web.services.users.create_token(user, "t")).value
            address = f"ann@{web.server.settings.default_domain}"
            box = await web.http.post(
                "/api/accounts",
                json={"address": address, "password": "secret123"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert box.status_code == 201, box.text
            await asyncio.to_thread(
                send_mail, web.server.smtp_port, address, simple_message(subject="Your invoice is ready")
            )

            page = await web.new_page()
            await web.sign_in(page, "ann@example.test")
            await page.goto(f"/mailboxes/{box.json()['id']}")
            await page.get_by_role("row", name=re.compile("Your invoice is ready")).get_by_role("link").click()
            await expect(page.get_by_role("heading", name="Release")).to_be_visible()
            # The form says whom it may reach before anything is tried.
            allowed = page.locator("#release-allowed")
            await expect(allowed).to_contain_text(f"…@{RELAY_DOMAIN}")
            await expect(allowed).to_contain_text("qa@example.org")
            await web.screenshot(page, "message-release")

            # A recipient the allow list does not name: said on the page, the addresses kept.
            await page.get_by_label("Send this message to").fill(f"{inbox}, someone@example.org")
            await page.get_by_role("button", name="Release").click()
            await expect(page.get_by_role("heading", name="Not released")).to_be_visible()
            await expect(page.get_by_role("alert")).to_contain_text("someone@example.org")
            await expect(page.get_by_label("Send this message to")).to_have_value(f"{inbox}, someone@example.org")
            await web.screenshot(page, "release-refused")

            # The relay takes one recipient and refuses the other (550 5.1.1): both answers shown.
            await page.get_by_label("Send this message to").fill(f"{inbox} nobody@{RELAY_DOMAIN}")
            await page.get_by_role("button", name="Release").click()
            await expect(page.get_by_role("heading", name="Released")).to_be_visible()
            accepted = page.get_by_role("row", name=re.compile(re.escape(inbox)))
            await expect(accepted).to_contain_text("accepted")
            refused = page.get_by_role("row", name=re.compile(f"nobody@{RELAY_DOMAIN}"))
            await expect(refused).to_contain_text("refused")
            await expect(refused).to_contain_text("550 5.1.1")
            await web.screenshot(page, "release-result")

            # The message page lists the release under the form.
            await page.get_by_role("link", name="Back to the message").first.click()
            history = page.locator(".release-answers")
            await expect(history.get_by_role("row", name=re.compile(f"nobody@{RELAY_DOMAIN}"))).to_contain_text("550")
            await web.screenshot(page, "message-released")

            listed = (await relay_http.get(f"/api/accounts/{inbox}/messages", headers=relay_auth)).json()
            assert [m["subject"] for m in listed["messages"]] == ["Your invoice is ready"]
    finally:
        await relay.stop()
