"""The mail pages in a real browser: mailboxes, the live inbox, the message view and its tabs,
downloads, and hostile HTML that must stay inert (no script runs, nothing leaves for another host)."""

from __future__ import annotations

import asyncio
import base64
import re
import smtplib
import subprocess
import sys
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Dialog, Page, expect

from inboxd.events import REVOKE_ALL
from inboxd.model import Principal
from tests.browser import StartWeb, Web, browser_test
from tests.conftest import send_mail

pytestmark = browser_test

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class RemoteHost:
    """A host outside inboxd that hostile mail tries to reach: it records every request it gets."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(PNG)))
                self.end_headers()
                self.wfile.write(PNG)

        # 127.0.0.2: another host as far as the browser's origins go.
        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.url = f"http://127.0.0.2:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def remote() -> Iterator[RemoteHost]:
    host = RemoteHost()
    yield host
    host.stop()


def rich_message(to: str, subject: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Shop <orders@shop.example>"
    msg["To"] = to
    msg["Cc"] = "Boss <boss@example.org>"
    msg["Subject"] = subject
    msg.set_content("Hello in text.\nYour code is 482913.\n")
    msg.add_alternative(
        '<html><body><h2 id="greeting">Hello in HTML</h2><p>Inline logo: <img alt="logo" src="cid:logo@shop"></p>'
        '<p><a href="https://shop.example/verify?t=abc">Verify</a></p></body></html>',
        subtype="html",
    )
    for part in msg.iter_parts():
        if part.get_content_type() == "text/html":
            part.add_related(PNG, "image", "png", cid="<logo@shop>")
    msg.add_attachment(b"a,b\n1,2\n", maintype="text", subtype="csv", filename="report.csv")
    return msg


async def new_mailbox(web: Web, page: Page, local: str) -> str:
    await page.goto("/mailboxes")
    await page.get_by_label("Address").fill(local)
    await page.get_by_role("button", name="Create mailbox").click()
    address = f"{local}@{web.server.settings.default_domain}"
    await expect(page.get_by_role("heading", name=address)).to_be_visible()  # the new mailbox's page
    return address


async def send(web: Web, to: str, message: EmailMessage | bytes) -> None:
    await asyncio.to_thread(send_mail, web.server.smtp_port, to, message)


async def test_live_inbox_and_message_tabs(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("ann@example.test")
    page = await web.new_page()
    await web.sign_in(page, "ann@example.test")

    await page.goto("/")  # the home of a signed-in user is the mailbox list
    await expect(page).to_have_url(re.compile(r"/mailboxes$"))
    await expect(page.get_by_text("No mailboxes yet")).to_be_visible()
    await web.screenshot(page, "mailboxes-empty")
    await page.get_by_role("button", name="Create mailbox").click()  # random name, generated password
    await expect(page.get_by_role("status")).to_have_text("Mailbox created: it receives mail at once.")
    assert len(await page.locator("#new-password").input_value()) >= 12
    await web.screenshot(page, "mailbox-created")

    address = await new_mailbox(web, page, "ann")
    await expect(page.get_by_role("heading", name="No mail yet")).to_be_visible()
    # What every Python has comes first, swaks second.
    await expect(page.locator(".snippet").first).to_contain_text("import smtplib")
    await expect(page.locator(".snippet").nth(1)).to_contain_text(f"--to {address}")
    await expect(page.locator("#live-status")).to_have_text("Live")
    await web.screenshot(page, "inbox-empty")

    await send(web, address, rich_message(address, "Your order has shipped"))
    # The row appears without a reload, within a second or so of the 250.
    row = page.get_by_role("row", name=re.compile("Your order has shipped"))
    await expect(row).to_be_visible(timeout=5000)
    await expect(page.locator("#unread-count")).to_have_text("1 unread")
    for n in range(3):
        await send(web, address, rich_message(address, f"Newsletter {n}"))
    await expect(page.get_by_role("row", name=re.compile("Newsletter 2"))).to_be_visible(timeout=5000)
    await expect(page.locator("#unread-count")).to_have_text("4 unread")
    await web.screenshot(page, "inbox")

    await row.get_by_role("link").click()
    await expect(page.get_by_role("heading", name="Your order has shipped")).to_be_visible()
    await expect(page.locator(".meta")).to_contain_text("Boss <boss@example.org>")
    frame = page.frame_locator("iframe.html-frame")
    await expect(frame.locator("#greeting")).to_have_text("Hello in HTML")
    # The cid: image is the message's own part, inlined; it loaded (natural width 1).
    logo = frame.locator("img[alt=logo]")
    await expect(logo).to_have_attribute("src", re.compile(r"^data:image/png;base64,"))
    assert await logo.evaluate("img => img.naturalWidth") == 1
    link = frame.get_by_role("link", name="Verify")
    await expect(link).to_have_attribute("target", "_blank")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await web.screenshot(page, "message-html")

    await page.get_by_role("link", name="Text", exact=True).click()
    await expect(page.locator(".body-text")).to_contain_text("Your code is 482913.")
    await web.screenshot(page, "message-text")
    await page.get_by_role("link", name="Headers").click()
    headers = page.get_by_role("table", name="Every header, in order, decoded")
    await expect(headers.get_by_role("row", name=re.compile(r"^Subject Your order has shipped"))).to_be_visible()
    await expect(headers.get_by_role("row", name=re.compile(r"^Cc Boss <boss@example.org>"))).to_be_visible()
    await web.screenshot(page, "message-headers")
    await page.get_by_role("link", name="Source").click()
    await expect(page.locator(".body-source")).to_contain_text("Content-Type: multipart/mixed")

    async with page.expect_download() as eml:
        await page.get_by_role("link", name="Download .eml").click()
    assert (await eml.value).suggested_filename == "message.eml"
    async with page.expect_download() as csv:
        await page.get_by_role("link", name="report.csv").click()
    download = await csv.value
    assert download.suggested_filename == "report.csv"
    assert (await download.path()).read_bytes() == b"a,b\n1,2\n"

    # Opening marked it read; mark it unread again, then delete it.
    await page.get_by_role("button", name="Mark unread").click()
    await expect(page.locator("#unread-count")).to_have_text("4 unread")
    await page.get_by_role("row", name=re.compile("Your order has shipped")).get_by_role("link").click()
    # The confirmation is wired on DOMContentLoaded; a click before the page has loaded can race
    # the navigation and lose its dialog.
    await expect(page).to_have_url(re.compile(r"/messages/[^/?]+$"))
    await page.wait_for_load_state("load")

    async def accept(dialog: Dialog) -> None:
        await dialog.accept()

    page.once("dialog", accept)
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("status")).to_have_text("The message was deleted.")
    await expect(page.get_by_role("row", name=re.compile("Your order has shipped"))).to_have_count(0)
    await expect(page.locator("#unread-count")).to_have_text("3 unread")
    await page.get_by_role("button", name="Mark all read").click()
    await expect(page.locator("#unread-count")).to_have_text("0 unread")


async def test_live_inbox_reconnects_and_catches_up(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("bo@example.test")
    page = await web.new_page()
    await web.sign_in(page, "bo@example.test")
    address = await new_mailbox(web, page, "bo")
    await expect(page.locator("#live-status")).to_have_text("Live")
    owner = Principal(user=await web.services.users.user_by_email("bo@example.test"), session=True)
    mailbox = await web.services.mailboxes.find(owner, address, scope="user")
    # The server drops the socket; mail that arrives before the page is back is not missed.
    await web.services.bus.revoke(mailbox.id, REVOKE_ALL)
    await send(web, address, rich_message(address, "While you were away"))
    await expect(page.get_by_role("row", name=re.compile("While you were away"))).to_be_visible(timeout=10000)
    await expect(page.locator("#live-status")).to_have_text("Live")
    # A second tab follows the same mailbox.
    other = await page.context.new_page()
    await other.goto(page.url)
    await expect(other.locator("#live-status")).to_have_text("Live")
    await send(web, address, rich_message(address, "Seen in both tabs"))
    for tab in (page, other):
        await expect(tab.get_by_role("row", name=re.compile("Seen in both tabs"))).to_be_visible(timeout=5000)


async def test_the_live_inbox_stops_when_its_session_signs_out(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("cy@example.test")
    page = await web.new_page()
    await web.sign_in(page, "cy@example.test")
    await new_mailbox(web, page, "cy")
    await expect(page.locator("#live-status")).to_have_text("Live")
    # Signing out in another tab of the same session closes this tab's socket; it does not retry.
    other = await page.context.new_page()
    await other.goto("/account")
    await other.get_by_role("button", name="Sign out", exact=True).click()
    await expect(other).to_have_url(re.compile(r"/auth/sign-in"))
    await expect(page.locator("#live-status")).to_have_text("Session ended: reload the page for live updates")


async def test_hostile_html_stays_inert(start_web: StartWeb, remote: RemoteHost) -> None:
    web = await start_web()
    await web.user("cy@example.test")
    page = await web.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    dialogs: list[str] = []

    async def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    await web.sign_in(page, "cy@example.test")
    address = await new_mailbox(web, page, "cy")

    r = remote.url
    hostile = f"""<html><head>
<meta http-equiv="refresh" content="0;url={r}/refresh">
<base href="{r}/base/">
<link rel="stylesheet" href="{r}/link.css">
<style>body {{ background: url({r}/css-bg.png); }} @import url({r}/import.css);</style>
<script>fetch("{r}/script-ran"); alert("script ran");</script>
</head><body>
<h1 id="hello">Hostile &amp; harmless</h1>
<img src="{r}/pixel.png" alt="tracker">
<img src="x" onerror="fetch('{r}/onerror-ran')">
<a href="javascript:fetch('{r}/js-link')" id="js">click me</a>
<form action="{r}/form"><input name="q" value="secret"><button id="submit">Go</button></form>
<svg onload="fetch('{r}/svg-ran')"><script>fetch("{r}/svg-script")</script></svg>
<iframe src="{r}/frame"></iframe>
<object data="{r}/object"></object>
<div style="background-image: url('{r}/inline-style.png')">styled</div>
</body></html>"""
    msg = EmailMessage()
    msg["From"] = "Mallory <m@evil.example>"
    msg["To"] = address
    msg["Subject"] = "<script>alert('subject')</script> & friends"
    msg.set_content(hostile, subtype="html")
    await send(web, address, msg)
    row = page.get_by_role("row", name=re.compile("friends"))
    await expect(row).to_be_visible(timeout=5000)
    await expect(row).to_contain_text("<script>alert('subject')</script>")  # shown as text, escaped
    await row.get_by_role("link").click()

    frame = page.frame_locator("iframe.html-frame")
    await expect(frame.locator("#hello")).to_have_text("Hostile & harmless")
    await expect(frame.locator("form")).to_have_count(0)
    await expect(frame.locator("#js")).not_to_have_attribute("href", re.compile("javascript"))
    await frame.locator("#js").click()
    await page.wait_for_timeout(1500)
    await web.screenshot(page, "message-hostile")
    assert remote.hits == [], remote.hits
    assert not [u for u in requests if u.startswith(r)], requests
    assert dialogs == []

    # Asked for: remote images load, yet scripts still never run and no form is sent.
    await page.get_by_role("link", name="Load remote content").click()
    await expect(frame.locator("#hello")).to_be_visible()
    for _ in range(50):
        if "/pixel.png" in remote.hits:
            break
        await asyncio.sleep(0.1)
    assert "/pixel.png" in remote.hits, remote.hits
    await page.wait_for_timeout(1000)
    ran = [h for h in remote.hits if "ran" in h or "script" in h or h.startswith(("/form", "/js-link", "/refresh"))]
    assert ran == [], remote.hits
    assert dialogs == []


async def test_other_users_and_bad_ids_get_not_found(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("dee@example.test")
    await web.user("eve@example.test")
    dee = await web.new_page()
    await web.sign_in(dee, "dee@example.test")
    address = await new_mailbox(web, dee, "dee")
    await send(web, address, rich_message(address, "Private to Dee"))
    await expect(dee.get_by_role("row", name=re.compile("Private to Dee"))).to_be_visible(timeout=5000)
    await dee.get_by_role("row", name=re.compile("Private to Dee")).get_by_role("link").click()
    message_url = dee.url

    eve = await web.new_page()
    await web.sign_in(eve, "eve@example.test")
    for url in (message_url, message_url + "/html", message_url + "/source", message_url + "/attachments/0"):
        response = await eve.goto(url)
        assert response is not None and response.status == 404, url
    await expect(eve.get_by_role("heading", name="Not found")).to_be_visible()
    await web.screenshot(eve, "not-found")
    unknown = re.sub(r"/messages/[^/]+$", "/messages/00000000-0000-0000-0000-000000000000", message_url)
    response = await dee.goto(unknown)
    assert response is not None and response.status == 404


async def test_a_huge_message_stays_fast(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("fay@example.test")
    page = await web.new_page()
    await web.sign_in(page, "fay@example.test")
    address = await new_mailbox(web, page, "fay")
    msg = EmailMessage()
    msg["From"] = "big@example.org"
    msg["To"] = address
    msg["Subject"] = "Twenty megabytes"
    msg.set_content(("All work and no play makes Jack a dull boy. " * 23 + "\n") * 20_000)
    await send(web, address, msg)
    await page.get_by_role("row", name=re.compile("Twenty megabytes")).get_by_role("link").click(timeout=10000)
    await expect(page.locator(".body-text")).to_contain_text("All work and no play")
    await expect(page.get_by_text("The text is cut here")).to_be_visible()
    size = await page.evaluate("document.documentElement.outerHTML.length")
    assert size < 1_000_000, size


def submit_to_sandbox(port: int, username: str, token: str, message: EmailMessage, to: list[str]) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.login(username, token)
        client.sendmail("app@example.com", to, message.as_bytes())


async def test_sandbox_page_catches_live_with_envelope(start_web: StartWeb) -> None:
    web = await start_web()
    user = await web.user("gil@example.test")
    token = (await web.services.users.create_token(user, "app")).value
    page = await web.new_page()
    await web.sign_in(page, "gil@example.test")
    await page.get_by_role("link", name="Sandbox").click()
    await expect(page.get_by_role("heading", name="SMTP sandbox")).to_be_visible()
    info = await web.services.sandboxes.info(user)
    await expect(page.locator("#sandbox-username")).to_have_text(info.smtp.username)
    await expect(page.locator(".snippet").first).to_contain_text(f'smtp.login("{info.smtp.username}"')
    await expect(page.locator("#live-status")).to_have_text("Live")
    await web.screenshot(page, "sandbox-empty")

    msg = EmailMessage()
    msg["From"] = "app@example.com"
    msg["To"] = "a@outside.example, b@outside.example"
    msg["Subject"] = "Welcome to the app"
    msg.set_content("Hi there.")
    recipients = ["a@outside.example", "b@outside.example", "hidden@outside.example"]
    await asyncio.to_thread(submit_to_sandbox, info.smtp.port, info.smtp.username, token, msg, recipients)
    row = page.get_by_role("row", name=re.compile("Welcome to the app"))
    await expect(row).to_be_visible(timeout=5000)
    await web.screenshot(page, "sandbox")
    await row.get_by_role("link").click()
    await expect(page.get_by_text(", ".join(recipients))).to_be_visible()

    free = await web.user("hal@example.test", plan="free")
    assert free.plan == "free"
    other = await web.new_page()
    await web.sign_in(other, "hal@example.test")
    await expect(other.get_by_role("link", name="Sandbox")).to_have_count(0)
    response = await other.goto("/sandbox")
    assert response is not None and response.status == 403


async def test_search_box_filters_the_inbox(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("ida@example.test")
    page = await web.new_page()
    await web.sign_in(page, "ida@example.test")
    address = await new_mailbox(web, page, "ida")
    await send(web, address, rich_message(address, "Invoice for November"))
    await send(web, address, rich_message(address, "Team lunch on Friday"))
    await expect(page.get_by_role("row", name=re.compile("Team lunch"))).to_be_visible(timeout=5000)
    inbox_url = page.url.split("?")[0]  # the new mailbox opened with ?notice=created
    for _ in range(40):  # the full-text index is filled off the SMTP path, within about 2 s
        await page.goto(f"{inbox_url}?q=lunch")
        if await page.get_by_role("row", name=re.compile("Team lunch")).count():
            break
        await asyncio.sleep(0.25)
    await expect(page.get_by_role("row", name=re.compile("Team lunch"))).to_be_visible()
    await expect(page.get_by_role("row", name=re.compile("Invoice"))).to_have_count(0)
    await expect(page.get_by_role("searchbox")).to_have_value("lunch")
    await web.screenshot(page, "inbox-search")
    await page.get_by_role("searchbox").fill("nothingmatches")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_text("No message matches “nothingmatches”.")).to_be_visible()
    await page.get_by_role("link", name="Clear").click()
    await expect(page.get_by_role("row", name=re.compile("Invoice"))).to_be_visible()


async def test_the_empty_state_example_runs_as_shown(start_web: StartWeb, tmp_path: Path) -> None:
    """A newcomer copies the Python example from the empty inbox, runs it, and sees the mail arrive live."""
    web = await start_web()
    await web.user("jo@example.test")
    page = await web.new_page()
    await web.sign_in(page, "jo@example.test")
    await new_mailbox(web, page, "jo")
    await expect(page.locator("#live-status")).to_have_text("Live")
    example = await page.locator(".snippet").first.inner_text()
    script = tmp_path / "example.py"
    script.write_text(example)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, str(script)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    await expect(page.get_by_role("row", name=re.compile("Hello"))).to_be_visible(timeout=5000)


async def test_a_malformed_message_opens_in_every_tab(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("kim@example.test")
    page = await web.new_page()
    await web.sign_in(page, "kim@example.test")
    address = await new_mailbox(web, page, "kim")
    raw = (
        b"From: =?x-unknown?B?////?= <broken\r\nSubject: =?utf-8?Q?broken=ZZ?= \xff\xfe\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/html; charset=bogus\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\n!!!not base64!!!\r\n--b\r\nContent-Type: image/png\r\n"
        b"Content-Disposition: attachment; filename*=utf-8''%FF%FE.png\r\n\r\nxx\r\n"
    )
    await send(web, address, raw)
    row = page.locator("#message-rows tr").first
    await expect(row).to_be_visible(timeout=5000)
    await row.get_by_role("link").click()
    base = page.url
    for tab in ("html", "text", "headers", "source"):
        response = await page.goto(f"{base}?tab={tab}")
        assert response is not None and response.status == 200, tab
    for path in ("/html", "/source", "/attachments/0"):
        fetched = await page.request.get(base + path)
        assert fetched.status == 200, path
