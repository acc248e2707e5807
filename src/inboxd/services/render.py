"""A message's HTML body as a PNG, the way the dashboard shows it (issue 28).

The document is the dashboard's (`mail/html_view.py`: sanitized, `cid:` parts inlined as `data:`
URLs), served to headless Chromium with the dashboard's sandboxing CSP and JavaScript off, CSS
animations and transitions switched off (a static image needs none, and a looping animation kept
a renderer busy and growing for the whole render). Every request the page makes goes through one
route handler: the document itself is answered from memory, and anything else is aborted, unless
remote content was asked for and the operator allows it (`render_remote`), in which case http(s)
URLs are fetched by `worker/fetch.py` through the webhooks' address guard (private addresses
refused unless `webhook_allow_private`). The document's own address is `http:`, so that Chromium
neither blocks nor upgrades an `http://` image as mixed content.

Nothing leaves the renderer on its own (issue 34): Chromium's background services (component and
model updates, account look-ups, preconnects) ask for connections even with Playwright's switches,
so Chromium is started with its proxy set to `_Sink`, a listener of ours on 127.0.0.1 that
records and refuses every connection, no bypass even for loopback, and a host-resolver rule that
resolves no name; Chromium's page requests never reach the proxy, the route handler answers them.

Playwright's async API runs on the server's event loop (its driver is a subprocess spoken to over a
pipe, so nothing blocks); Chromium starts at the first render. Bounded: `render_contexts` browser
contexts, each rendering one message at a time (a render waits for a free one), of which one user
holds at most `render_contexts - 1` at once (at least one), so that another user's render always
finds one that user cannot take; `render_timeout` seconds for the whole request (preparing the
document, the wait for a context, the render); and the last `render_cache_size` images kept
(messages never change, so a kept image stays right). A context is replaced after `_RECYCLE_AFTER`
renders so that Chromium's memory stays flat over a long run, and at once, in the background,
after a render that failed or ran out of time.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tinycss2
import tinycss2.ast

from inboxd.config import Settings
from inboxd.errors import InvalidRequest, RenderUnavailable, Unavailable
from inboxd.extras import install_command
from inboxd.mail.html_view import content_security_policy, with_color_scheme
from inboxd.model import Mailbox
from inboxd.services.messages import MessageService

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright, Route

MIN_WIDTH = 320
MAX_WIDTH = 1600
# The height of a render that is not `full`: a first screen, about what the dashboard's frame shows.
VIEWPORT_HEIGHT = 800
# The document's own address inside the renderer: `.invalid` never resolves, and the route handler
# answers it before any lookup would happen. `http:`, not `https:`: from an https document Chromium
# upgrades (or blocks) every `http://` image as mixed content, so `remote=true` never drew one.
DOCUMENT_URL = "http://render.inboxd.invalid/"
# Put first in every document's <head>: a static image needs no animation, and a looping one (kept
# running until the screenshot) made a renderer grow to gigabytes and slowed every other render.
# In a cascade layer, because an important declaration in a layer wins over every important one
# outside layers (the mail's own `!important` included); only a `style` attribute's would still
# win, so those declarations are taken out of the attributes (`_still_attribute`).
_STILL = "<style>@layer inboxd-still{*,*::before,*::after{animation:none!important;transition:none!important;}}</style>"
_STYLE_ATTRIBUTE = re.compile(r'\sstyle="([^"]*)"')
_MOVING = ("animation", "transition")
# Switches on top of Playwright's own (which already include --disable-background-networking,
# --disable-component-update, --no-first-run and --disable-default-apps; given again so the
# choice does not depend on Playwright's list). The proxy and resolver switches are added at
# launch, with the sink's port.
_SWITCHES = (
    "--disable-gpu",
    "--font-render-hinting=none",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-pings",
)
_SINK_KEPT = 100
_RECYCLE_AFTER = 200
_CACHE_BYTES = 64 * 1024 * 1024


# Fetches one remote URL for the page (status, content type, body), or None when refused or failed:
# `worker/fetch.py`'s, through the webhooks' address guard, handed in by app.py.
Fetch = Callable[[str], Awaitable[tuple[int, str, bytes] | None]]


async def _refuse(url: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RenderOptions:
    width: int
    full: bool = False
    remote: bool = False
    dark: bool = False


def render_options(*, width: str | None, full: str | None, remote: str | None, dark: str | None) -> RenderOptions:
    """The options of a render request, from query strings; a width outside 320–1600 is refused."""
    try:
        number = int(width) if width not in (None, "") else 600
    except ValueError:
        raise InvalidRequest(f"`width` must be a whole number from {MIN_WIDTH} to {MAX_WIDTH}.") from None
    if not MIN_WIDTH <= number <= MAX_WIDTH:
        raise InvalidRequest(f"`width` must be a whole number from {MIN_WIDTH} to {MAX_WIDTH}.")
    return RenderOptions(
        width=number, full=_flag("full", full), remote=_flag("remote", remote), dark=_flag("dark", dark)
    )


def _flag(name: str, value: str | None) -> bool:
    if value in (None, "", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise InvalidRequest(f"`{name}` must be `true` or `false`.")


class _Sink:
    """Chromium's proxy: a listener on 127.0.0.1 that keeps the first line of every connection
    (`CONNECT update.googleapis.com:443 HTTP/1.1`) and closes it unanswered."""

    def __init__(self) -> None:
        self.seen: deque[str] = deque(maxlen=_SINK_KEPT)
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._refuse, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            self.seen.append(line[:200].decode("latin-1").strip())
        except (TimeoutError, OSError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None


@dataclass(slots=True)
class _Share:
    """One user's renders: `semaphore` lets `render_contexts - 1` of them (at least one) hold or
    wait for a context; `users` counts those inside, so the entry goes when the last one leaves."""

    semaphore: asyncio.Semaphore
    users: int = 0


@dataclass(slots=True)
class _Slot:
    """One browser context with its page; `job` is what the page's route handler serves now."""

    context: BrowserContext
    page: Page
    renders: int = 0
    job: tuple[str, str, bool] | None = None  # (document, CSP, remote allowed)


class Renderer:
    """Owns Playwright, the browser, the pool of contexts and the cache of recent images."""

    def __init__(self, settings: Settings, *, messages: MessageService, fetch: Fetch = _refuse) -> None:
        self._settings = settings
        self._messages = messages
        self._fetch = fetch
        self._starting: asyncio.Task[None] | None = None
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._slots: asyncio.Queue[_Slot] | None = None
        self._cache: OrderedDict[tuple[str, RenderOptions], bytes] = OrderedDict()
        self._cache_bytes = 0
        self._shares: dict[str, _Share] = {}
        self._per_user = max(1, settings.render_contexts - 1)
        self._sink = _Sink()
        self._mending: set[asyncio.Task[None]] = set()
        self.renders = 0  # renders done (cache hits not counted): for the bench and tests

    @property
    def refused_connections(self) -> tuple[str, ...]:
        """The first lines of the last connections Chromium tried on its own (all refused)."""
        return tuple(self._sink.seen)

    async def render(self, mailbox: Mailbox, message_id: str, options: RenderOptions) -> bytes:
        """The PNG of the message's HTML body; the cache answers a render already made."""
        summary = await self._messages.live(mailbox, message_id)  # 404/410 before any work
        remote = options.remote and self._settings.render_remote
        options = RenderOptions(width=options.width, full=options.full, remote=remote, dark=options.dark)
        key = (summary.id, options)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        try:
            # The whole request: preparing the document (sanitizing, on the analysis executor)
            # counts, as the wait for a context and the render do.
            async with asyncio.timeout(self._settings.render_timeout):
                safe = await self._messages.html_view(mailbox, message_id, allow_remote=remote)
                document = with_color_scheme(_still(safe.document), dark=options.dark)
                async with self._share(mailbox.user_id):
                    png = await self._shoot(document, options)
        except TimeoutError:
            raise Unavailable(
                f"The render did not finish within {self._settings.render_timeout:g} seconds (INBOXD_RENDER_TIMEOUT)."
            ) from None
        self._keep(key, png)
        return png

    @contextlib.asynccontextmanager
    async def _share(self, user: str) -> AsyncIterator[None]:
        share = self._shares.get(user)
        if share is None:
            share = self._shares[user] = _Share(asyncio.Semaphore(self._per_user))
        share.users += 1
        try:
            async with share.semaphore:
                yield
        finally:
            share.users -= 1
            if share.users == 0:
                del self._shares[user]

    def _keep(self, key: tuple[str, RenderOptions], png: bytes) -> None:
        if self._settings.render_cache_size <= 0:
            return
        self._cache[key] = png
        self._cache_bytes += len(png)
        while len(self._cache) > self._settings.render_cache_size or self._cache_bytes > _CACHE_BYTES:
            _, dropped = self._cache.popitem(last=False)
            self._cache_bytes -= len(dropped)

    async def _shoot(self, document: str, options: RenderOptions) -> bytes:
        slots = await self._pool()
        slot = await slots.get()
        try:
            slot.job = (document, content_security_policy(allow_remote=options.remote), options.remote)
            await slot.page.set_viewport_size({"width": options.width, "height": VIEWPORT_HEIGHT})
            await slot.page.goto(DOCUMENT_URL, wait_until="load")
            clip: Any = None
            if options.full:
                height = await slot.page.evaluate("document.documentElement.scrollHeight")
                height = max(VIEWPORT_HEIGHT, min(int(height), self._settings.render_max_height))
                clip = {"x": 0, "y": 0, "width": options.width, "height": height}
            png = await slot.page.screenshot(type="png", full_page=options.full, clip=clip, animations="disabled")
        except BaseException:
            # Replaced in the background: closing a context whose renderer is still busy can
            # take as long as the render would have, and the caller's time is up.
            slot.job = None
            self._mend(slots, slot)
            raise
        self.renders += 1
        slot.renders += 1
        slot.job = None
        if slot.renders >= _RECYCLE_AFTER:
            slot = await self._replace(slot)
        slots.put_nowait(slot)
        return png

    def _mend(self, slots: asyncio.Queue[_Slot], slot: _Slot) -> None:
        async def mend() -> None:
            slots.put_nowait(await self._replace(slot))

        task = asyncio.get_running_loop().create_task(mend())
        self._mending.add(task)
        task.add_done_callback(self._mending.discard)

    async def _pool(self) -> asyncio.Queue[_Slot]:
        if self._slots is not None and self._browser is not None and self._browser.is_connected():
            return self._slots
        # One start at a time, shielded: a render that times out while Chromium starts must not
        # cancel the start half-way (a driver or browser process would be left behind).
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._start())
        await asyncio.shield(self._starting)
        assert self._slots is not None
        return self._slots

    async def _start(self) -> None:
        try:
            from playwright.async_api import Error, async_playwright
        except ImportError:
            raise RenderUnavailable(
                f"Rendering needs the optional `render` extra: {install_command('render')}."
            ) from None
        await self._stop_browser()
        await self._sink.start()
        self._playwright = await async_playwright().start()
        switches = [
            *_SWITCHES,
            f"--proxy-server=http://127.0.0.1:{self._sink.port}",
            # Chromium sends loopback straight out unless told otherwise; `<-loopback>` removes
            # that exception, so the sink is the only place a connection can go.
            "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ]
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=self._settings.render_chromium, args=switches
            )
        except Error as exc:
            await self._stop_browser()
            raise RenderUnavailable(
                f"Chromium did not start from {self._settings.render_chromium!r} (INBOXD_RENDER_CHROMIUM): "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc
        slots: asyncio.Queue[_Slot] = asyncio.Queue()
        for _ in range(self._settings.render_contexts):
            slots.put_nowait(await self._new_slot())
        self._slots = slots

    async def _new_slot(self) -> _Slot:
        assert self._browser is not None
        context = await self._browser.new_context(
            java_script_enabled=False,
            service_workers="block",
            viewport={"width": 600, "height": VIEWPORT_HEIGHT},
            device_scale_factor=1,
            color_scheme="light",
        )
        page = await context.new_page()
        slot = _Slot(context=context, page=page)

        async def handle(route: Route) -> None:
            await self._answer(slot, route)

        await page.route("**/*", handle)
        return slot

    async def _replace(self, slot: _Slot) -> _Slot:
        """A fresh context in place of one that failed or served its share of renders."""
        with contextlib.suppress(Exception):
            await slot.context.close()
        try:
            return await self._new_slot()
        except Exception:
            # The browser is gone: the next render starts a new one; this slot stays a dead one
            # until then, and `_pool` notices the disconnected browser first.
            return slot

    async def _answer(self, slot: _Slot, route: Route) -> None:
        request = route.request
        job = slot.job
        if job is None:
            await route.abort("blockedbyclient")
            return
        document, csp, remote = job
        if request.url == DOCUMENT_URL and request.is_navigation_request():
            await route.fulfill(
                status=200,
                headers={"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": csp},
                body=document,
            )
            return
        if remote and request.method == "GET" and request.url.startswith(("http://", "https://")):
            fetched = await self._fetch(request.url)
            if fetched is not None:
                status, content_type, body = fetched
                await route.fulfill(status=status, headers={"Content-Type": content_type}, body=body)
                return
        await route.abort("blockedbyclient")

    async def _stop_browser(self) -> None:
        self._slots = None
        if self._mending:
            await asyncio.wait(list(self._mending))
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await self._browser.close()
            self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        await self._sink.stop()

    async def close(self) -> None:
        if self._starting is not None and not self._starting.done():
            await asyncio.wait([self._starting])
        await self._stop_browser()


def _still(document: str) -> str:
    """The document with CSS animations and transitions off: `_STILL` first in its <head>, and no
    animation or transition declared in a `style` attribute."""
    return _STYLE_ATTRIBUTE.sub(_still_attribute, document.replace("<head>", f"<head>{_STILL}", 1))


def _still_attribute(match: re.Match[str]) -> str:
    value = match.group(1)
    if not any(word in value.lower() for word in _MOVING) and "\\" not in value:
        return match.group(0)
    kept = [
        declaration.serialize()
        for declaration in tinycss2.parse_blocks_contents(html.unescape(value), skip_whitespace=True)
        if not (isinstance(declaration, tinycss2.ast.Declaration) and declaration.lower_name.startswith(_MOVING))
    ]
    return f' style="{html.escape("; ".join(kept), quote=True)}"'
