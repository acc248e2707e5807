"""The dashboard's frictions of issue 35, each in Chromium at 1280 and 375 px (screenshots in
tests/artifacts/): the Release and "Check the links again" forms of a caught (sandbox) message; the
sign-in page's command, copied out of the page and run as printed against a second server started
as a child process (with its INBOXD_BASE_URL), as its start-up hint is; phone-width pages (no
clipped preview, no address broken mid-word, Checks tables that fit); a `?notice=` said once; an
error page, through the dashboard's one exception handler; and `/api/docs` showing `/metrics`
unlocked when it needs no token."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tomllib
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

import inboxd
from inboxd.model import User
from tests.browser import ARTIFACTS, WIDTHS, StartWeb, Web, browser_test
from tests.conftest import free_port
from tests.test_web_checks import LinkSite
from tests.test_web_checks import link_site as link_site
from tests.test_web_first_hour import submit
from tests.test_web_first_hour_browser import BROKEN_WORDS, phone_problems

pytestmark = [
    browser_test,
    # pyspf (the Checks tab's SPF) has an invalid escape in a docstring; a venv installed without
    # compiled bytecode compiles it at the first check, in the test, where warnings are errors.
    pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning"),
]
ROOT = Path(__file__).resolve().parent.parent
RELAY_DOMAIN = "relay.test"
LONG_FROM = "Notifications <no-reply.notifications@mail.accounts.example-company.example>"
LONG_TO = "release-candidate.qa-team@outside.example"


async def caught(web: Web, user: User, msg: EmailMessage, to: list[str]) -> None:
    """`msg` submitted to `user`'s sandbox, as their application would."""
    token = (await web.services.users.create_token(user, "app")).value
    info = await web.services.sandboxes.info(user)
    await asyncio.to_thread(submit, info.smtp.port, info.smtp.username, token, msg, to)


def newsletter(to: str, site: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = LONG_FROM
    msg["To"] = to
    msg["Subject"] = "Your weekly account summary and the changes to our terms of service"
    text = (
        "Hello! Here is what happened on your account this week: three new sign-ins, two invoices paid "
        f"and one report ready to download. Read it at {site}/ok"
    )
    msg.set_content(text)
    msg.add_alternative(
        f'<p>{text}</p><p><a href="{site}/ok">Read the report</a> or '
        f'<a href="{site}/missing/a-rather-long-path/that-goes-on/report.pdf?utm_source=newsletter">'
        "the archive</a>.</p>",
        subtype="html",
    )
    return msg


async def open_caught(web: Web, page: Page, subject: str) -> None:
    await page.goto("/sandbox")
    await page.get_by_role("row", name=re.compile(re.escape(subject))).get_by_role("link").first.click()
    await expect(page).to_have_url(re.compile(r"/sandbox/messages/[0-9a-f-]+$"))


async def test_a_caught_message_releases_and_checks_its_links_again(start_web: StartWeb, link_site: LinkSite) -> None:
    smtp = free_port()
    # The relay is the server's own SMTP listener: a release of a caught message arrives there.
    web = await start_web(
        smtp_port=smtp,
        public_domains=[RELAY_DOMAIN],
        relay_host="127.0.0.1",
        relay_port=smtp,
        relay_tls="none",
        relay_allow=[RELAY_DOMAIN],
        relay_sender=f"releases@{RELAY_DOMAIN}",
        link_check_allow_private=True,
        link_check_timeout=5.0,
    )
    user = await web.user("cat@example.test")
    inbox = f"inbox@{RELAY_DOMAIN}"
    await web.services.mailboxes.create_in_dashboard(user, local="inbox", domain=RELAY_DOMAIN, password="secret123")
    msg = newsletter(LONG_TO, link_site.base)
    await caught(web, user, msg, [LONG_TO])
    page = await web.new_page()
    await web.sign_in(page, "cat@example.test")
    await open_caught(web, page, "Your weekly account summary")

    await page.get_by_role("link", name="Checks", exact=True).click()
    await expect(page.locator("#ck-links")).to_contain_text(f"{link_site.base}/ok")
    before = link_site.hits.count(("HEAD", "/ok"))
    await page.get_by_role("button", name="Check the links again").click()
    # Back on the caught message's own page (not a 404), the links fetched once more.
    await expect(page).to_have_url(re.compile(r"/sandbox/messages/[0-9a-f-]+\?tab=checks#ck-links$"))
    await expect(page.get_by_role("heading", name="Links and images")).to_be_visible()
    assert link_site.hits.count(("HEAD", "/ok")) == before + 1
    await web.screenshot(page, "frictions-sandbox-checks-again")

    await page.get_by_role("link", name="Text", exact=True).click()
    await page.get_by_label("Send this message to").fill(inbox)
    await page.get_by_role("button", name="Release").click()
    await expect(page.get_by_role("heading", name="Released")).to_be_visible()
    await expect(page.get_by_role("row", name=re.compile(re.escape(inbox)))).to_contain_text("accepted")
    await web.screenshot(page, "frictions-sandbox-released")
    assert await phone_problems(page) == []
    await page.set_viewport_size({"width": 375, "height": 900})
    # The recipient's address on one line at 375 px, not crushed into a narrow column mid-word.
    assert await lines_of(page, ".release-answers td", inbox) == 1
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.get_by_role("link", name="Back to the message").first.click()
    await expect(page).to_have_url(re.compile(r"/sandbox/messages/[0-9a-f-]+$"))
    await expect(page.locator(".release-answers").get_by_role("row", name=re.compile(re.escape(inbox)))).to_be_visible()


# Every word of an address on the page (an email, or a name part of one) laid out on one line.
ADDRESS_WORDS = r"[\w.+-]+@[\w.-]+|[\w.+-]{12,}"


async def lines_of(page: Page, selector: str, text: str) -> int:
    """How many lines the element of `selector` whose text is `text` is laid out on."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """([selector, text]) => {
            const el = [...document.querySelectorAll(selector)].find(e => e.textContent.trim() === text);
            const range = document.createRange();
            range.selectNodeContents(el);
            return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.bottom))).size;
        }""",
        [selector, text],
    )


async def table_overflow(page: Page, selector: str) -> list[str]:
    """Each table of `selector` wider than its box (so part of it is out of sight, or scrolls)."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """(selector) => [...document.querySelectorAll(selector)]
            .filter(t => t.getClientRects().length)
            .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 1)
            .map(t => `${t.className}: ${Math.round(t.getBoundingClientRect().width)} px`)
            """,
        selector,
    )


async def clipped(page: Page, selector: str) -> list[str]:
    """Elements of `selector` whose text is cut off (an ellipsis, or hidden overflow)."""
    return await page.evaluate(  # type: ignore[no-any-return]
        """(selector) => [...document.querySelectorAll(selector)]
            .filter(e => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
            .map(e => e.textContent.trim().slice(0, 40))""",
        selector,
    )


async def test_phone_width_snippets_addresses_and_checks(start_web: StartWeb, link_site: LinkSite) -> None:
    web = await start_web(link_check_allow_private=True, link_check_timeout=5.0)
    user = await web.user("dee@example.test")
    await caught(web, user, newsletter(LONG_TO, link_site.base), [LONG_TO, "second.recipient@outside.example"])
    page = await web.new_page(width=375)
    await web.sign_in(page, "dee@example.test")
    await page.goto("/sandbox")
    row = page.get_by_role("row", name=re.compile("Your weekly account summary"))
    await expect(row).to_be_visible()
    await web.screenshot(page, "frictions-phone-sandbox")
    await page.set_viewport_size({"width": 375, "height": 900})
    # The preview of a message reads in full on a phone, wrapped, not cut; so do the code examples.
    assert await clipped(page, "table.messages .preview") == []
    for summary in await page.locator(".snippets summary").all():
        if await summary.evaluate("s => !s.parentElement.open"):
            await summary.click()
    assert await clipped(page, "pre.snippet") == []
    assert await phone_problems(page, ("table.messages", "main")) == []

    await row.get_by_role("link").first.click()
    await expect(page).to_have_url(re.compile(r"/sandbox/messages/"))
    await web.screenshot(page, "frictions-phone-message")
    assert await phone_problems(page) == []
    await page.set_viewport_size({"width": 375, "height": 900})
    meta = await page.evaluate(BROKEN_WORDS, await page.query_selector(".meta"))
    assert meta == [], meta

    await page.get_by_role("link", name="Checks", exact=True).click()
    await expect(page.locator("#ck-links")).to_contain_text(f"{link_site.base}/ok")
    await web.screenshot(page, "frictions-phone-checks")
    await page.set_viewport_size({"width": 375, "height": 900})
    # Every Checks table fits the phone's width: nothing to scroll sideways, nothing out of sight.
    assert await table_overflow(page, ".ck table") == []
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, width
    for box in await page.query_selector_all(".ck-box"):  # and no word in them broken mid-way
        assert await page.evaluate(BROKEN_WORDS, box) == []
    await page.set_viewport_size({"width": 1280, "height": 900})
    assert await table_overflow(page, ".ck table") == []


async def test_a_notice_is_said_once(start_web: StartWeb) -> None:
    web = await start_web()
    await web.user("eve@example.test")
    page = await web.new_page()
    await web.sign_in(page, "eve@example.test")
    await page.goto("/mailboxes")
    await page.get_by_label("Address").fill("eve")
    await page.get_by_role("button", name="Create mailbox").click()
    await expect(page.get_by_role("status")).to_have_text("Mailbox created: it receives mail at once.")
    await expect(page).to_have_url(re.compile(r"/mailboxes/[0-9a-f-]+$"))  # the address lost ?notice=
    await web.screenshot(page, "frictions-notice-once")
    await page.reload()
    await expect(page.get_by_role("heading", name=re.compile("^eve@"))).to_be_visible()
    await expect(page.get_by_role("status")).to_have_count(0)
    # Other parameters stay: a search after a notice keeps its query.
    await page.goto(page.url + "?q=hello&notice=created")
    await expect(page).to_have_url(re.compile(r"\?q=hello$"))
    await expect(page.get_by_label("Search this mailbox")).to_have_value("hello")
    await page.reload()
    await expect(page.get_by_role("status")).to_have_count(0)
    await web.screenshot(page, "frictions-notice-reloaded")


async def test_error_pages_come_through_one_exception_handler(start_web: StartWeb, tmp_path: Path) -> None:
    """A page's error (here a message that does not exist, and an unknown address) is the error
    page with the navigation, the security headers and the kept session; and the import contract
    holds without the exception the page wrapper needed (its import of the error pages)."""
    web = await start_web()
    await web.user("fay@example.test")
    page = await web.new_page()
    await web.sign_in(page, "fay@example.test")
    # A page handler's NotFound, and an address no route has (Starlette's 404, the same page).
    for path in ("/sandbox/messages/no-such-message", "/no/such/page"):
        answer = await page.goto(path)
        assert answer is not None, path
        assert answer.status == 404, (path, answer.status)
        assert answer.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
        await expect(page.get_by_role("link", name="Back to your account")).to_be_visible()
        await expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    await page.goto("/sandbox/messages/no-such-message")
    await web.screenshot(page, "frictions-error-page")
    await page.goto("/account")  # still signed in: the error page kept the session
    await expect(page).to_have_url(re.compile(r"/account$"))

    done = await asyncio.to_thread(_lint_imports_without_web_ignores, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def _lint_imports_without_web_ignores(folder: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on pyproject's contracts, less every ignored import from the dashboard (an
    ignore of another part that no longer matches is not this test's business)."""
    text = (ROOT / "pyproject.toml").read_text()
    kept = re.sub(r'^\s*"inboxd\.web\.[^"]*",\n', "", text, flags=re.M)
    kept = kept.replace(
        "[[tool.importlinter.contracts]]\n",
        '[[tool.importlinter.contracts]]\nunmatched_ignore_imports_alerting = "none"\n',
    )
    tomllib.loads(kept)  # still a valid document
    (folder / "pyproject.toml").write_text(kept)
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run(
        [lint, str(folder / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(inboxd.__file__).parent.parent)},  # the code under test
        check=False,
    )


async def test_api_docs_show_metrics_open_when_it_is(start_web: StartWeb) -> None:
    for token, locked in (("", False), ("s3cret-metrics", True)):
        web = await start_web(metrics_token=token)
        page = await web.new_page()
        await page.goto("/api/docs")
        metrics = page.locator(
            ".opblock", has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/metrics$"))
        )
        await expect(metrics).to_have_count(1)
        await metrics.scroll_into_view_if_needed()
        lock = metrics.locator(".authorization__btn")
        await expect(lock).to_have_count(1 if locked else 0)
        healthz = page.locator(
            ".opblock", has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/healthz$"))
        )
        await expect(healthz.locator(".authorization__btn")).to_have_count(0)
        await web.screenshot(page, f"frictions-api-docs-metrics-{'locked' if locked else 'open'}")
        document = (await web.http.get("/api/openapi.json")).json()["paths"]["/metrics"]["get"]
        assert (document["security"] != []) is locked
        assert ("401" in document["responses"]) is locked


# The sign-in page's command and the start-up hint, for a second server (its own port, base URL and
# data directory) run as a child process, run as printed in a shell without any INBOXD_ variable.


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("INBOXD_")}


def _run_as_printed(command: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return done.stdout.splitlines()[-1]


@pytest.fixture
def second_server(tmp_path: Path) -> Any:
    """`inboxd serve` on its own port, base URL and data directory, as a second server is started;
    what it printed up to its sign-in hint."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **_clean_env(),
        "INBOXD_HTTP_PORT": str(port),
        "INBOXD_BASE_URL": base,
        "INBOXD_DATA_DIR": str(tmp_path / "data2"),
        "INBOXD_SMTP_PORT": str(free_port()),
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_LOG_LEVEL": "warning",
    }
    inboxd = str(Path(sys.executable).parent / "inboxd")
    proc = subprocess.Popen(
        [inboxd, "serve"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "users sign-in-link" in line:
                break
        yield base, tmp_path, "".join(lines)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


async def test_the_sign_in_command_runs_as_printed(browser: Browser, second_server: Any) -> None:
    base, cwd, printed = second_server
    hint = re.search(r"`([^`]*users sign-in-link[^`]*)`", printed)
    assert hint, printed
    assert f"INBOXD_BASE_URL={base} " in hint.group(1), hint.group(1)
    assert _run_as_printed(hint.group(1), cwd).startswith(f"{base}/auth/link/")

    context = await browser.new_context(
        base_url=base, viewport={"width": 1280, "height": 900}, permissions=["clipboard-read", "clipboard-write"]
    )
    try:
        page = await context.new_page()
        await page.goto("/auth/sign-in")
        copy = page.locator("button[data-copy='#sign-in-command']")  # its name becomes "Copied"
        await expect(copy).to_have_accessible_name("Copy command")
        await copy.click()
        await expect(copy).to_have_text("Copied")
        command = await page.evaluate("navigator.clipboard.readText()")
        assert command == await page.locator("#sign-in-command").text_content()
        assert f"INBOXD_BASE_URL={base} " in command and "--email admin@localhost" in command, command
        ARTIFACTS.mkdir(exist_ok=True)
        for width in WIDTHS:  # the whole command in sight, wrapped, in the narrow card and on a phone
            await page.set_viewport_size({"width": width, "height": 900})
            await page.screenshot(path=str(ARTIFACTS / f"frictions-sign-in-command-{width}.png"), full_page=True)
            assert await clipped(page, "pre.command") == [], width
            assert await page.evaluate("document.documentElement.scrollWidth") <= width

        link = _run_as_printed(command, cwd)  # as printed: pasted into a shell in that directory
        assert link.startswith(f"{base}/auth/link/"), link
        await page.goto(link)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page).to_have_url(re.compile(r"/account$"))
        await expect(page.get_by_role("heading", name="Your account")).to_be_visible()
        await expect(page.locator(".who-email")).to_have_text("admin@localhost")
    finally:
        await context.close()
