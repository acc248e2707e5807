"""The link check against a real local HTTP server: 200, 301 → 200, 404, a redirect loop, a slow
answer, a server refusing HEAD; and the address guard refusing private targets unless allowed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from inboxd.config import Settings, SettingsError
from inboxd.services.checks.links import LinkChecker


class Site:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.methods: list[tuple[str, str]] = []
        self.release = asyncio.Event()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    holder: list[Site] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        s = holder[0]
        s.methods.append((request.method, request.path))
        path = request.path
        if path == "/ok":
            return web.Response(text="fine")
        if path == "/moved":
            raise web.HTTPMovedPermanently("/ok")
        if path == "/missing":
            raise web.HTTPNotFound()
        if path in ("/loop-a", "/loop-b"):
            raise web.HTTPFound("/loop-b" if path == "/loop-a" else "/loop-a")
        if path == "/slow":
            await s.release.wait()
            return web.Response(text="late")
        if path == "/no-head":
            if request.method == "HEAD":
                raise web.HTTPMethodNotAllowed("HEAD", ["GET"])
            return web.Response(text="get only")
        raise web.HTTPInternalServerError()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    holder.append(Site(port))
    try:
        yield holder[0]
    finally:
        holder[0].release.set()
        await runner.cleanup()


def checker(*, allow_private: bool = True, timeout: float = 1.0) -> LinkChecker:
    return LinkChecker(Settings(link_check_allow_private=allow_private, link_check_timeout=timeout))


async def test_statuses_redirects_loops_and_timeouts(site: Site) -> None:
    links = checker()
    try:
        urls = [f"{site.base}{p}" for p in ("/ok", "/moved", "/missing", "/loop-a", "/slow", "/no-head")]
        ok, moved, missing, loop, slow, no_head = await links.check_all(urls, user_key="u1")
    finally:
        await links.close()
    assert (ok.outcome, ok.status, ok.final_url, ok.error) == ("ok", 200, f"{site.base}/ok", None)
    assert (moved.outcome, moved.status, moved.final_url) == ("ok", 200, f"{site.base}/ok")
    assert (missing.outcome, missing.status, missing.error) == ("broken", 404, "HTTP 404")
    assert loop.outcome == "redirect_loop" and loop.status == 302 and "loop" in (loop.error or "")
    assert (slow.outcome, slow.status, slow.error) == ("broken", None, "timed out")
    assert 900 <= slow.ms < 5000
    assert (no_head.outcome, no_head.status) == ("ok", 200)
    assert ("HEAD", "/no-head") in site.methods and ("GET", "/no-head") in site.methods
    # HEAD answered: no GET for a link that takes HEAD.
    assert ("GET", "/ok") not in site.methods


async def test_a_refused_connection_is_broken(site: Site) -> None:
    links = checker()
    try:
        (closed,) = await links.check_all(["http://127.0.0.1:9/"], user_key="u1")
    finally:
        await links.close()
    assert closed.outcome == "broken" and (closed.error or "").startswith("refused")


async def test_private_targets_are_refused_unless_allowed(site: Site) -> None:
    guarded = checker(allow_private=False)
    try:
        literal, named, hop = await guarded.check_all(
            [f"{site.base}/ok", f"http://localhost:{site.base.rsplit(':', 1)[1]}/ok", "http://[::ffff:127.0.0.1]/"],
            user_key="u1",
        )
    finally:
        await guarded.close()
    assert {literal.outcome, named.outcome, hop.outcome} == {"private_refused"}
    assert site.methods == []  # nothing reached the server


async def test_the_cache_and_the_rate(site: Site) -> None:
    links = LinkChecker(Settings(link_check_allow_private=True, link_check_rate=2.0))
    try:
        first = await links.check_all([f"{site.base}/ok", f"{site.base}/ok"], user_key="u1")
        again = await links.check_all([f"{site.base}/ok"], user_key="u1")
        assert [s.outcome for s in first + again] == ["ok", "ok", "ok"]
        assert site.methods.count(("HEAD", "/ok")) == 1  # one fetch: distinct URLs, then the cache
        over = await links.check_all([f"{site.base}/missing", f"{site.base}/moved"], user_key="u1")
        assert over[0].outcome == "broken" and over[1].outcome == "skipped"
        assert "rate" in (over[1].error or "")
        other_user = await links.check_all([f"{site.base}/moved"], user_key="u2")
        assert other_user[0].outcome == "ok"
        refreshed = await links.check_all([f"{site.base}/ok"], user_key="u2", refresh=True)
        assert refreshed[0].outcome == "ok" and site.methods.count(("HEAD", "/ok")) == 3
    finally:
        await links.close()


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(SettingsError, match="INBOXD_RSPAMD_URL"):
        Settings(rspamd_url="127.0.0.1:11333")
    with pytest.raises(SettingsError, match="INBOXD_LINK_CHECK_CONCURRENCY"):
        Settings(link_check_concurrency=0)
