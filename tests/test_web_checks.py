"""The message view's Checks tab in Chromium: a DKIM-signed HTML message with a working and a broken
link, judged by the same CheckService as the API, with a real rspamd and the suite's DNS server.
The verdicts, per-client table, link statuses and spam symbols are shown; what comes from the mail
stays text (escaped, never a link); the links can be fetched again through a CSRF-guarded form;
at 375 px the tables scroll inside their box and the page does not widen."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import SMTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.async_api import expect

from tests.browser import StartWeb, browser_test
from tests.dns_server import DnsServerPair, FakeDns
from tests.rspamd_server import Rspamd
from tests.test_checks_auth import key as key
from tests.test_checks_auth import publish_key, signed
from tests.test_checks_spam import rspamd as rspamd
from tests.test_web_mail import new_mailbox, send

pytestmark = browser_test


class LinkSite:
    """A site the message links to: /ok answers 200, anything else 404; it records each request."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self) -> None:
                hits.append((self.command, self.path))
                self.send_response(200 if self.path == "/ok" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def link_site() -> Iterator[LinkSite]:
    site = LinkSite()
    yield site
    site.stop()


@pytest.fixture
def zone() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


HOSTILE = "<script>window.pwned=1</script>"


def newsletter(to: str, base: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Shop <news@example.org>"
    msg["To"] = to
    msg["Subject"] = "Our autumn sale"
    msg["Message-ID"] = "<sale-1@example.org>"
    msg["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    msg.set_content(f"The sale: {base}/ok\n")
    msg.add_alternative(
        f'<div style="display: flex; border-radius: 8px"><p>Autumn sale. <a href="{base}/ok">Shop now</a>'
        f' or read <a href="{base}/missing?q={HOSTILE}">the small print</a>.</p>'
        f'<img src="cid:{HOSTILE}"></div>',
        subtype="html",
    )
    return msg


async def test_the_checks_tab(
    start_web: StartWeb, link_site: LinkSite, rspamd: Rspamd, zone: DnsServerPair, key: tuple[bytes, str]
) -> None:
    publish_key(zone.zone, key, "s1._domainkey.example.org")
    web = await start_web(
        link_check_allow_private=True,
        link_check_timeout=5.0,
        rspamd_url=rspamd.url,
        dns_nameservers=[zone.address],
        dns_timeout=2.0,
    )
    await web.user("ann@example.test")
    page = await web.new_page()
    await web.sign_in(page, "ann@example.test")
    address = await new_mailbox(web, page, "checks")
    raw = signed(newsletter(address, link_site.base).as_bytes(policy=SMTP), key)
    await send(web, address, raw)
    row = page.get_by_role("row", name=re.compile("Our autumn sale"))
    await row.get_by_role("link").click()
    await page.get_by_role("link", name="Checks", exact=True).click()
    await expect(page).to_have_url(re.compile(r"tab=checks$"))

    glance = page.get_by_role("table", name="Verdicts at a glance")
    await expect(glance.get_by_role("row", name=re.compile(r"^Content Error"))).to_be_visible()
    await expect(
        glance.get_by_role("row", name=re.compile(r"^Links and images Error .*2 URLs, 1 broken"))
    ).to_be_visible()
    await expect(glance.get_by_role("row", name=re.compile(r"^Authentication .*DKIM pass"))).to_be_visible()
    await expect(glance.get_by_role("row", name=re.compile(r"^Spam score .*score -?[0-9.]+ of "))).to_be_visible()
    await expect(page.locator(".ck-overall .verdict")).to_have_text("Error")

    # Findings grouped by part, each with its code.
    content = page.locator("#ck-content")
    await expect(content.locator(".ck-finding", has_text="broken_cid")).to_contain_text(HOSTILE)
    await expect(page.locator("#ck-links .ck-finding", has_text="link_broken")).to_contain_text("HTTP 404")

    clients = page.get_by_role("table", name=re.compile("Support of the message's HTML per email client"))
    await expect(clients.get_by_role("row", name=re.compile(r"^Outlook Windows [0-9.]+%"))).to_be_visible()
    features = page.get_by_role("table", name=re.compile("Features of the message some clients"))
    await expect(features).to_contain_text("display:flex")

    links = page.get_by_role("table", name=re.compile("Every link and image URL"))
    await expect(links.locator("tbody tr", has_text=f"{link_site.base}/ok")).to_contain_text("200")
    await expect(links.locator("tbody tr", has_text=f"{link_site.base}/missing")).to_contain_text("404 HTTP 404")
    symbols = page.get_by_role("table", name="rspamd's symbols, largest score first")
    await expect(symbols.get_by_role("row").nth(1)).to_be_visible()
    dkim = page.get_by_role("table", name="Every DKIM signature of the message")
    await expect(dkim.get_by_role("row", name=re.compile(r"^example.org s1 rsa-sha256 pass pass"))).to_be_visible()

    # The mail's text is text: no script ran, nothing of it is a link.
    assert await page.evaluate("() => window.pwned") is None
    panel = page.locator(".ck")
    assert await panel.locator(f"a[href^='{link_site.base}']").count() == 0
    assert await panel.locator("script").count() == 0
    await web.screenshot(page, "message-checks")

    # At 375 px the page keeps its width; the wide tables scroll inside their box.
    await page.set_viewport_size({"width": 375, "height": 900})
    widths = await page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths
    box = page.locator(".ck-box", has=clients)
    assert await box.evaluate("el => getComputedStyle(el).overflowX") == "auto"
    await page.set_viewport_size({"width": 1280, "height": 900})

    # The links again, past the cache: a POST with the session's CSRF token.
    before = link_site.hits.count(("HEAD", "/ok"))
    await page.get_by_role("button", name="Check the links again").click()
    await expect(page).to_have_url(re.compile(r"tab=checks#ck-links$"))
    assert link_site.hits.count(("HEAD", "/ok")) == before + 1
    # The same POST from the signed-in browser without the token is refused.
    forged = await page.request.post(
        page.url.split("?")[0] + "/checks/links", form={"x": "1"}, headers={"Origin": web.base}, max_redirects=0
    )
    assert forged.status == 403 and link_site.hits.count(("HEAD", "/ok")) == before + 1
