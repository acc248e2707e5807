"""The Pro pages in a real browser: custom domains against the suite's real DNS server, webhooks
against its real HTTPS receiver, and the Pro rule for free users."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import expect

from tests.browser import StartWeb, browser_test
from tests.conftest import send_mail, simple_message
from tests.dns_server import DnsServerPair, FakeDns
from tests.webhook_receiver import Receiver

pytestmark = browser_test


@pytest.fixture
def dns() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def receiver(tmp_path: Path) -> AsyncIterator[Receiver]:
    found = Receiver.create(tmp_path)
    await found.start()
    try:
        yield found
    finally:
        await found.stop()


async def test_domains_add_publish_verify_delete(start_web: StartWeb, dns: DnsServerPair) -> None:
    web = await start_web(dns_nameservers=[dns.address], dns_timeout=0.5)
    user = await web.user("pia@example.test")
    page = await web.new_page()
    await web.sign_in(page, "pia@example.test")
    await page.get_by_role("link", name="Domains").click()
    await expect(page.get_by_text("No custom domains yet.")).to_be_visible()

    await page.get_by_role("textbox", name="Domain").fill("Mail.Example.COM")
    await page.get_by_role("button", name="Add domain").click()
    await expect(page.get_by_role("heading", name="mail.example.com added")).to_be_visible()
    [domain] = await web.services.domains.list(user)
    txt, mx = web.services.domains.records(domain)
    card = page.get_by_role("article", name="mail.example.com")
    await expect(card.get_by_role("row", name=re.compile(f"^TXT {re.escape(txt.host)}"))).to_contain_text(txt.value)
    await expect(card.get_by_role("row", name=re.compile("^MX"))).to_contain_text(mx.value)
    await expect(card.get_by_role("button", name="Copy TXT value")).to_be_visible()
    await web.screenshot(page, "domains")

    await card.get_by_role("button", name="Verify mail.example.com").click()
    status = page.get_by_role("status")
    await expect(status).to_contain_text("not verified yet")
    await expect(status.get_by_role("listitem").filter(has_text="TXT")).to_contain_text("missing")
    await web.screenshot(page, "domains-pending")

    dns.zone.set_txt(txt.host, [txt.value])
    dns.zone.set_mx(mx.host, (10, mx.value + "."))
    await page.get_by_role("button", name="Verify mail.example.com").click()
    await expect(page.get_by_role("status")).to_contain_text("mail.example.com: verified")
    await expect(page.locator(".badge-verified")).to_have_text("verified")

    # A verified domain is offered for new mailboxes.
    await page.goto("/mailboxes")
    await expect(page.get_by_role("combobox", name="Domain")).to_contain_text("mail.example.com")

    await page.goto("/domains")
    await page.get_by_role("link", name="Delete mail.example.com").click()
    await page.get_by_role("button", name="Delete domain").click()
    await expect(page.get_by_role("status")).to_contain_text("The domain was deleted")
    assert await web.services.domains.list(user) == []


async def test_webhooks_secret_once_deliveries_rotate(start_web: StartWeb, receiver: Receiver) -> None:
    web = await start_web(webhook_ca_file=str(receiver.ca_path), webhook_allow_private=True, webhook_poll_interval=0.05)
    await web.user("quin@example.test")
    page = await web.new_page()
    await web.sign_in(page, "quin@example.test")
    await page.get_by_role("link", name="Webhooks").click()
    await page.get_by_label("URL").fill("http://not-https.example/")
    await page.get_by_role("button", name="Create webhook").click()
    await expect(page.get_by_role("heading", name="That did not work")).to_be_visible()

    await page.goto("/webhooks")
    await page.get_by_label("URL").fill(receiver.url())
    await page.get_by_role("button", name="Create webhook").click()
    secret = await page.locator("#new-secret").input_value()
    assert secret.startswith("whsec_")
    await web.screenshot(page, "webhook-created")
    await page.goto("/webhooks")
    assert secret not in await page.content()

    mailbox_page = await web.new_page()
    await web.sign_in(mailbox_page, "quin@example.test")
    await mailbox_page.goto("/mailboxes")
    await mailbox_page.get_by_label("Address").fill("quin")
    await mailbox_page.get_by_role("button", name="Create mailbox").click()
    address = f"quin@{web.server.settings.default_domain}"
    await asyncio.to_thread(send_mail, web.server.smtp_port, address, simple_message())
    [call] = await receiver.wait_for(1)
    assert call.headers["Content-Type"].startswith("application/json")

    await page.get_by_role("link", name="Deliveries").click()
    for _ in range(40):
        if await page.get_by_role("row", name=re.compile(r"\b200\b")).count():
            break
        await asyncio.sleep(0.25)
        await page.reload()
    await expect(page.get_by_role("row", name=re.compile(r"\b200\b"))).to_be_visible()
    await web.screenshot(page, "webhook-deliveries")

    await page.goto("/webhooks")
    await page.get_by_role("link", name="Rotate secret").click()
    await page.get_by_role("button", name="Rotate secret").click()
    rotated = await page.locator("#new-secret").input_value()
    assert rotated.startswith("whsec_") and rotated != secret

    await page.get_by_role("link", name=re.compile("Delete webhook")).click()
    await page.get_by_role("button", name="Delete webhook").click()
    await expect(page.get_by_role("status")).to_have_text("The webhook was deleted.")
    await expect(page.get_by_text("No webhooks yet.")).to_be_visible()


async def test_free_users_get_the_pro_rule(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("ray@example.test", plan="free")
    page = await web.new_page()
    await web.sign_in(page, "ray@example.test")
    for path in ("/domains", "/webhooks", "/sandbox"):
        response = await page.goto(path)
        assert response is not None and response.status == 403, path
        await expect(page.get_by_text(re.compile("needs a Pro account"))).to_be_visible()
    await web.screenshot(page, "pro-required")
