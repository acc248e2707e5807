"""The HTML tab's preview (issue 28) in a real browser: phone, tablet and desktop widths and a dark
background without reloading the page, and `render.png` drawing each message of the test corpus as
the dashboard's frame shows it. Screenshots go to tests/artifacts/preview-*.png."""

from __future__ import annotations

import asyncio
import io
from email.message import EmailMessage
from pathlib import Path

import pytest
from PIL import Image, ImageChops
from playwright.async_api import Page, expect

from tests.browser import ARTIFACTS, StartWeb, Web, browser_test
from tests.conftest import send_mail

pytestmark = [browser_test, pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]

CORPUS = Path(__file__).parent / "data" / "checks"
# The corpus's messages with an HTML body: the ones the HTML tab shows.
HTML_CORPUS = sorted(p.name for p in CORPUS.glob("*.eml") if b"text/html" in p.read_bytes().lower())


def newsletter() -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Shop <shop@example.org>"
    msg["To"] = "someone@example.test"
    msg["Subject"] = "Spring sale"
    msg.set_content("Spring sale: everything 20% off.")
    msg.add_alternative(
        """<html><body style="margin:0;font-family:sans-serif">
<table width="100%" cellpadding="0" cellspacing="0"><tr><td align="center">
<table style="max-width:600px;width:100%" cellpadding="16"><tr>
<td><h1 id="title">Spring sale</h1><p>Everything 20% off this week, in every size and colour.</p>
<p><a href="https://shop.example/sale">Shop now</a></p></td></tr></table></td></tr></table></body></html>""",
        subtype="html",
    )
    return msg


async def open_message(web: Web, message: EmailMessage | bytes) -> tuple[Page, str, str]:
    """A signed-in page on the message's HTML tab; (page, mailbox address, API token)."""
    user = await web.user(f"ann{id(message)}@example.test")
    token = (await web.services.users.create_token(user, "test")).value
    auth = {"Authorization": f"Bearer {token}"}
    created = await web.http.post(
        "/api/accounts",
        json={"address": f"m{id(message)}@{web.server.settings.default_domain}", "password": "secret123"},
        headers=auth,
    )
    assert created.status_code == 201, created.text
    box = created.json()
    await asyncio.to_thread(send_mail, web.server.smtp_port, box["address"], message)
    listed = await web.http.get(f"/api/accounts/{box['id']}/messages", headers=auth)
    message_id = listed.json()["messages"][0]["id"]
    page = await web.new_page()
    await web.sign_in(page, user.email)
    await page.goto(f"/mailboxes/{box['id']}/messages/{message_id}?tab=html")
    return page, f"/api/accounts/{box['id']}/messages/{message_id}", token


async def frame_width(page: Page) -> int:
    frame = page.frame_locator("iframe.html-frame")
    width: int = await frame.locator("html").evaluate("html => html.clientWidth")
    return width


async def test_widths_and_dark_background_without_a_reload(start_web: StartWeb) -> None:
    web = await start_web()
    page, _, _ = await open_message(web, newsletter())
    await expect(page.frame_locator("iframe.html-frame").locator("#title")).to_have_text("Spring sale")
    await page.evaluate("window.stillTheSamePage = true")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "preview-desktop.png"), full_page=True)
    assert await frame_width(page) > 1000

    for name, width in (("Phone", 375), ("Tablet", 768)):
        button = page.get_by_role("button", name=name)
        await button.click()
        await expect(button).to_have_attribute("aria-pressed", "true")
        await expect(page.locator(".html-preview-size")).to_have_text(f"{width} px wide")
        assert await frame_width(page) == width
        await page.screenshot(path=str(ARTIFACTS / f"preview-{width}.png"), full_page=True)

    dark = page.get_by_role("button", name="Dark background")
    await dark.click()
    await expect(dark).to_have_attribute("aria-pressed", "true")
    body = page.frame_locator("iframe.html-frame").locator("html")
    await expect(body).to_have_css("background-color", "rgb(18, 18, 18)")
    await expect(page.frame_locator("iframe.html-frame").locator("#title")).to_have_text("Spring sale")
    await page.screenshot(path=str(ARTIFACTS / "preview-768-dark.png"), full_page=True)
    await page.get_by_role("button", name="Phone").click()
    assert await frame_width(page) == 375
    await page.screenshot(path=str(ARTIFACTS / "preview-375-dark.png"), full_page=True)

    await dark.click()
    await expect(body).to_have_css("background-color", "rgba(0, 0, 0, 0)")
    await page.get_by_role("button", name="Desktop").click()
    assert await frame_width(page) > 1000
    assert await page.evaluate("window.stillTheSamePage") is True  # no reload happened


def difference(a: Image.Image, b: Image.Image) -> float:
    """The share of pixels that differ by more than a little in any channel."""
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L").point(lambda v: 255 if v > 16 else 0)
    return diff.histogram()[255] / (a.size[0] * a.size[1])


@pytest.mark.parametrize("name", HTML_CORPUS)
async def test_render_png_is_what_the_dashboard_shows(start_web: StartWeb, name: str) -> None:
    web = await start_web()
    page, api, token = await open_message(web, (CORPUS / name).read_bytes())
    await page.get_by_role("button", name="Phone").click()
    assert await frame_width(page) == 375
    frame = page.locator("iframe.html-frame")
    box = await frame.bounding_box()
    assert box is not None
    shown = Image.open(io.BytesIO(await frame.screenshot()))
    inner = shown.crop((1, 1, shown.size[0] - 1, shown.size[1] - 1))  # the frame's 1 px border
    rendered = await web.http.get(
        f"{api}/render.png", params={"width": 375}, headers={"Authorization": f"Bearer {token}"}
    )
    assert rendered.status_code == 200, rendered.text
    drawn = Image.open(io.BytesIO(rendered.content)).crop((0, 0, *inner.size))
    assert inner.size[0] == 375
    assert difference(inner, drawn) < 0.005, name
