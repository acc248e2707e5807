"""The dashboard's first hour in Chromium (issue 23): a caught message opens under Sandbox, the
code's copy button copies under the page's CSP, a message's links are shown and never fetched,
and at 375 px no word breaks mid-way and the domain selector and code examples stay in their box.
Screenshots at 1280 and 375 px go to tests/artifacts/."""

from __future__ import annotations

import asyncio
import re
from email.message import EmailMessage
from typing import Any

from playwright.async_api import Page, expect

from inboxd.model import User
from tests.browser import StartWeb, Web, browser_test
from tests.test_web_first_hour import submit
from tests.test_web_mail import RemoteHost, new_mailbox, remote, send

pytestmark = browser_test
__all__ = ["remote"]  # the fixture, used by name

LONG_DOMAIN = "qa-mail.eu-west-1.staging.a-rather-long-company-name.example"

# Words (runs of non-space) of the visible text laid out over more than one line although they fit
# on one: a word broken mid-way (at a hyphen, a slash or anywhere). A word wider than its box (a
# long URL) has to break; preformatted code scrolls instead; what is not rendered has no lines.
BROKEN_WORDS = """(root) => {
  const broken = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest("pre, textarea, option, .visually-hidden")) continue;
    if (!parent.getClientRects().length) continue;
    let block = parent;
    while (getComputedStyle(block).display.startsWith("inline") && block.parentElement) block = block.parentElement;
    const style = getComputedStyle(block);
    const room = block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    for (const match of node.textContent.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter(r => r.width > 0);
      const lines = new Set(rects.map(r => Math.round(r.bottom)));
      const width = rects.reduce((sum, r) => sum + r.width, 0);
      if (lines.size > 1 && width <= room + 1) broken.push(match[0]);
    }
  }
  return broken;
}"""

# Each element of `selector` lies inside the box of its `container` ancestor; one wider than its
# own box scrolls (overflow-x auto or scroll) rather than spilling out.
OUT_OF_BOX = """([selector, container]) => {
  const out = [];
  for (const el of document.querySelectorAll(selector)) {
    if (!el.getClientRects().length) continue;
    const box = el.closest(container).getBoundingClientRect();
    const own = el.getBoundingClientRect();
    if (own.left < box.left - 0.5 || own.right > box.right + 0.5) out.push(`${selector} outside ${container}`);
    const style = getComputedStyle(el);
    if (el.scrollWidth > el.clientWidth + 1 && !["auto", "scroll"].includes(style.overflowX)) {
      out.push(`${selector} overflows without scrolling`);
    }
  }
  return out;
}"""


async def phone_problems(page: Page, *boxes: tuple[str, str]) -> list[str]:
    """What is wrong with `page` at 375 px: words broken mid-way, a page wider than the screen,
    elements out of their box."""
    await page.set_viewport_size({"width": 375, "height": 900})
    problems = [f"broken word {w!r}" for w in await page.evaluate(BROKEN_WORDS, await page.query_selector("main"))]
    width = await page.evaluate("document.documentElement.scrollWidth")
    if width > 375:
        problems.append(f"page is {width} px wide")
    for selector, container in boxes:
        problems += await page.evaluate(OUT_OF_BOX, [selector, container])
    await page.set_viewport_size({"width": 1280, "height": 900})
    return problems


async def caught_mail(web: Web, user: User, subject: str, to: list[str]) -> None:
    token = (await web.services.users.create_token(user, "app")).value
    info = await web.services.sandboxes.info(user)
    msg = EmailMessage()
    msg["From"] = "app@example.com"
    msg["To"] = to[0]
    msg["Subject"] = subject
    msg.set_content("Welcome! Your code is 771305.")
    await asyncio.to_thread(submit, info.smtp.port, info.smtp.username, token, msg, to)


async def test_the_sandbox_is_its_own_place(start_web: StartWeb) -> None:
    web = await start_web()
    user = await web.user("lea@example.test")
    page = await web.new_page()
    await web.sign_in(page, "lea@example.test")
    await page.get_by_role("link", name="Sandbox").click()
    await expect(page.locator("#live-status")).to_have_text("Live")
    recipients = ["dev@outside.example", "qa@outside.example", "bcc-only@outside.example"]
    await caught_mail(web, user, "Welcome to the app", recipients)
    # The row arrives live, with the envelope recipients of the message.
    row = page.get_by_role("row", name=re.compile("Welcome to the app"))
    await expect(row).to_contain_text(", ".join(recipients), timeout=5000)
    await web.screenshot(page, "sandbox-caught")
    assert await phone_problems(page, ("pre.snippet", ".card"), ("table.messages", "main")) == []

    await row.get_by_role("link").click()
    await expect(page).to_have_url(re.compile(r"/sandbox/messages/[0-9a-f-]+$"))
    await expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Sandbox")).to_have_attribute(
        "aria-current", "page"
    )
    await expect(page.locator(".crumbs")).to_have_text("Sandbox /")
    await expect(page.get_by_role("link", name="Reset password")).to_have_count(0)
    await expect(page.get_by_role("link", name="Delete mailbox")).to_have_count(0)
    await expect(page.locator(".meta")).to_contain_text(", ".join(recipients))
    await web.screenshot(page, "sandbox-message")
    assert await phone_problems(page) == []

    await page.locator(".crumbs").get_by_role("link", name="Sandbox").click()
    await expect(page).to_have_url(re.compile(r"/sandbox$"))


def hostile_links(to: str, remote_url: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Shop <orders@shop.example>"
    msg["To"] = to
    msg["Subject"] = "Confirm your email address"
    msg.set_content(f"Your verification code is 482913.\nOpen {remote_url}/confirm?t=abc to confirm.\n")
    msg.add_alternative(
        f'<html><body><p>Your code: <b style="font-size:24px">482913</b></p>'
        f'<p><a href="{remote_url}/confirm?t=abc">Confirm &lt;img src=x onerror=alert(1)&gt;</a></p>'
        f'<p><a href="{remote_url}/unsubscribe/a-very-long-path-that-goes-on-and-on-without-any-spaces">'
        "Unsubscribe</a></p>"
        '<p><a href="javascript:alert(2)">Run</a></p></body></html>',
        subtype="html",
    )
    return msg


async def test_the_message_shows_its_code_and_links(start_web: StartWeb, remote: RemoteHost) -> None:
    web = await start_web()
    await web.user("max@example.test")
    context = await web.browser.new_context(
        base_url=web.base, viewport={"width": 1280, "height": 900}, permissions=["clipboard-read", "clipboard-write"]
    )
    web.contexts.append(context)
    page = await context.new_page()
    csp_errors: list[str] = []
    page.on("console", lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
    dialogs: list[str] = []

    async def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    await web.sign_in(page, "max@example.test")
    address = await new_mailbox(web, page, "max")
    await send(web, address, hostile_links(address, remote.url))
    await page.get_by_role("row", name=re.compile("Confirm your email")).get_by_role("link").click(timeout=10000)

    codes = page.get_by_role("group", name="Code")
    await expect(codes.locator("code")).to_have_text("482913")
    copy = codes.get_by_role("button", name="Copy code 482913")
    await copy.click()
    await expect(copy).to_have_text("Copied")
    assert await page.evaluate("navigator.clipboard.readText()") == "482913"
    await web.screenshot(page, "message-code")

    await page.get_by_role("link", name=re.compile(r"^Links")).click()
    await expect(page).to_have_url(re.compile(r"\?tab=links$"))
    panel = page.locator(".tab-panel")
    urls = panel.locator("a.link-url")
    await expect(urls).to_have_text(
        [
            f"{remote.url}/confirm?t=abc",
            f"{remote.url}/unsubscribe/a-very-long-path-that-goes-on-and-on-without-any-spaces",
        ]
    )
    for n in range(2):
        await expect(urls.nth(n)).to_have_attribute("rel", "noopener noreferrer")
        await expect(urls.nth(n)).to_have_attribute("target", "_blank")
    await expect(panel).to_contain_text("Confirm <img src=x onerror=alert(1)>")
    await expect(panel.locator("img")).to_have_count(0)
    await expect(panel.locator("a[href^='javascript:']")).to_have_count(0)
    await web.screenshot(page, "message-links")
    assert await phone_problems(page, (".links", ".tab-panel")) == []
    # Every tab is on the phone's screen, none left past the edge of a scrolled row.
    await page.set_viewport_size({"width": 375, "height": 900})
    right_edges = await page.locator("nav.tabs .tab").evaluate_all(
        "els => els.map(e => e.getBoundingClientRect().right)"
    )
    assert len(right_edges) == 6 and max(right_edges) <= 375, right_edges
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.get_by_role("link", name="Text", exact=True).click()
    await expect(page.locator(".body-text")).to_contain_text("482913")
    assert remote.hits == [], remote.hits  # nothing on the page fetched a link of the message
    assert dialogs == [] and csp_errors == [], (dialogs, csp_errors)


async def test_phone_width_and_the_new_mailbox_page(start_web: StartWeb) -> None:
    web = await start_web(public_domains=["inboxd.localhost", LONG_DOMAIN])
    await web.user("ned@example.test")
    page = await web.new_page()
    await web.sign_in(page, "ned@example.test")
    await page.goto("/sandbox")
    await expect(page.get_by_role("heading", name="SMTP sandbox")).to_be_visible()
    for summary in await page.locator(".snippets summary").all():
        if await summary.evaluate("s => !s.parentElement.open"):
            await summary.click()
    await web.screenshot(page, "sandbox-phone")
    assert await phone_problems(page, ("pre.snippet", ".card"), (".settings", ".card")) == []
    icon = await page.locator("link[rel=icon]").get_attribute("href")
    assert icon is not None
    answer = await page.request.get(icon)
    assert answer.status == 200 and answer.headers["content-type"] == "image/svg+xml"
    await page.goto("/mailboxes")
    await page.get_by_label("Domain").select_option(LONG_DOMAIN)
    await web.screenshot(page, "mailboxes-long-domain")
    assert await phone_problems(page, ("#domain", ".mailbox-form"), ("#local", ".mailbox-form")) == []

    await page.get_by_label("Address").fill("ned")
    await page.get_by_role("button", name="Create mailbox").click()
    # The answer is the new mailbox's own page (a redirect), with its password shown once.
    await expect(page).to_have_url(re.compile(r"/mailboxes/[0-9a-f-]+$"))  # its ?notice=created said once
    await expect(page.get_by_role("heading", name=f"ned@{LONG_DOMAIN}")).to_be_visible()
    assert len(await page.locator("#new-password").input_value()) >= 12
    await expect(page.get_by_role("heading", name="No mail yet")).to_be_visible()
    await web.screenshot(page, "mailbox-new")
    assert await phone_problems(page, ("pre.snippet", ".empty-state"), (".copy-row input", ".created")) == []
    await page.reload()  # a reload neither sends the form again nor shows the password again
    await expect(page.get_by_role("heading", name=f"ned@{LONG_DOMAIN}")).to_be_visible()
    await expect(page.locator("#new-password")).to_have_count(0)
    await page.goto("/mailboxes")
    await expect(page.get_by_role("link", name=f"ned@{LONG_DOMAIN}", exact=True)).to_have_count(1)
    await expect(page.get_by_label("Address")).to_have_value("")
