"""Browser tests: Playwright for Python driving Debian's `chromium` (no browser download).

One browser for the whole session (`browser`); each test gets fresh contexts (cookie jars) from
`start_web`, which runs a real inboxd whose base URL is the address the browser uses, so
callbacks, origins and cookies are the real ones. Tests that use these fixtures run on the
session's event loop (`pytestmark = pytest.mark.asyncio(loop_scope="session")`), the loop the
browser lives on. Screenshots go to tests/artifacts/ (git-ignored) at 1280 and 375 px.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from inboxd.app import Inboxd
from inboxd.model import User
from tests.conftest import Clock, free_port

CHROMIUM = os.environ.get("INBOXD_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"
WIDTHS = (1280, 375)
# The machine may be busy: assertions wait up to 15 s for the page (5 s by default) before failing.
expect.set_options(timeout=15_000)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class Web:
    """A running inboxd reachable at `base`, and a browser to visit it with."""

    server: Inboxd
    base: str
    http: httpx.AsyncClient
    clock: Clock
    browser: Browser
    backend: str
    contexts: list[BrowserContext] = field(default_factory=list)

    @property
    def services(self) -> Any:
        return self.server.services

    async def new_page(self, width: int = 1280) -> Page:
        """A page in a fresh browser context: its own cookie jar, as another person or device."""
        context = await self.browser.new_context(base_url=self.base, viewport={"width": width, "height": 900})
        context.set_default_timeout(15000)
        self.contexts.append(context)
        return await context.new_page()

    async def user(self, email: str, *, plan: str = "pro", role: str = "user") -> User:
        return await self.services.users.create_user(email, plan=plan, role=role)  # type: ignore[no-any-return]

    async def link_for(self, email: str) -> str:
        user = await self.services.users.user_by_email(email)
        link: str = await self.services.sign_in.issue_link(user)
        return link

    async def sign_in(self, page: Page, email: str) -> None:
        """Sign in through a one-time link, as the operator's printed link does."""
        await page.goto(await self.link_for(email))
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/account")

    async def at_provider(self, page: Page, login: str) -> None:
        """Complete `OidcProvider`'s sign-in form (tests/identity_providers.py) after a redirect to it."""
        await page.locator("input[name=login]").fill(login)
        await page.locator("input[name=password]").fill("any-password")
        await page.locator("button[type=submit]").click()

    async def screenshot(self, page: Page, name: str) -> None:
        """Full-page screenshots at each width (SQLite run only: the pages are the same)."""
        if self.backend != "sqlite":
            return
        ARTIFACTS.mkdir(exist_ok=True)
        original = page.viewport_size or {"width": 1280, "height": 900}
        for width in WIDTHS:
            await page.set_viewport_size({"width": width, "height": 900})
            await page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)
        await page.set_viewport_size(original)


StartWeb = Callable[..., Awaitable[Web]]


@pytest_asyncio.fixture(loop_scope="session")
async def start_web(make_settings: Any, clock: Clock, browser: Browser, backend: str) -> AsyncIterator[StartWeb]:
    """`await start_web(port=None, **settings)`: an inboxd on `port` (a free one by default) whose
    base URL is that address."""
    started: list[Web] = []

    async def start(*, port: int | None = None, **overrides: Any) -> Web:
        port = port or free_port()
        base = f"http://127.0.0.1:{port}"
        settings = make_settings(http_port=port, base_url=base, **overrides)
        server = Inboxd(settings, clock=clock)
        await server.start()
        http = httpx.AsyncClient(base_url=base, timeout=30)
        web = Web(server=server, base=base, http=http, clock=clock, browser=browser, backend=backend)
        started.append(web)
        return web

    yield start
    for web in started:
        for context in web.contexts:
            await context.close()
        await web.http.aclose()
        await web.server.stop()


browser_test = pytest.mark.asyncio(loop_scope="session")
