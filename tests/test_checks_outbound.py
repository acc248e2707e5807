"""The checks' outbound I/O against real local servers: a site that answers malformed HTTP (each
answer a link outcome, never an exception), a black hole that accepts connections and never
answers (one user's 20 such links never make another user's link and rspamd checks wait), a
timeout never kept as the link's verdict, the per-user rate derived from what can drain, and
rspamd's malformed answers (not JSON, another shape, cut, oversized) as the spam part's error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from inboxd.config import Settings
from inboxd.services.checks.links import LinkChecker, drain_rate
from inboxd.services.checks.reports import spam_part
from inboxd.services.checks.spam import Envelope, SpamChecker
from tests.conftest import free_port
from tests.dns_server import DnsServerPair, FakeDns
from tests.rspamd_server import Rspamd
from tests.test_checks_links import Site
from tests.test_checks_links import site as site
from tests.test_checks_spam import ENVELOPE, personal
from tests.test_checks_spam import rspamd as rspamd

# What the raw site answers to each path: bytes written as they are, then the connection closed.
_CANNED: dict[str, bytes] = {
    "/bad-location": b"HTTP/1.1 302 Found\r\nLocation: http://[::1\r\nContent-Length: 0\r\n\r\n",
    "/bad-port": b"HTTP/1.1 301 Moved\r\nLocation: http://example.com:99999/\r\nContent-Length: 0\r\n\r\n",
    "/latin1-location": b"HTTP/1.1 302 Found\r\nLocation: http://[caf\xe9]/\r\nContent-Length: 0\r\n\r\n",
    "/latin1-header": b"HTTP/1.1 200 OK\r\nX-Name: caf\xe9 cr\xe8me\r\nContent-Length: 0\r\n\r\n",
    "/bad-status": b"HTTP/1.1 abc Whatever\r\nContent-Length: 0\r\n\r\n",
    "/not-http": b"\x00\x01\x02 hello there\r\n\r\n",
    "/huge-header": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    "/status-999": b"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
    "/empty": b"",
    "/cut": b"HTTP/1.1 405 No\r\nContent-Length: 0\r\n\r\n",  # HEAD refused; GET answers a cut body
}
_CUT_GET = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly a little"


class RawSite:
    """An HTTP/1.1 'server' that answers each path with canned bytes (see `_CANNED`)."""

    def __init__(self) -> None:
        self.port = 0
        self.base = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            answer = _CUT_GET if path == "/cut" and method == "GET" else _CANNED.get(path, b"")
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw_site() -> AsyncIterator[RawSite]:
    site = RawSite()
    server = await asyncio.start_server(site.handle, "127.0.0.1", 0)
    site.port = server.sockets[0].getsockname()[1]
    site.base = f"http://127.0.0.1:{site.port}"
    try:
        yield site
    finally:
        server.close()
        await server.wait_closed()


class BlackHole:
    """Accepts every connection and never answers (a black-holed web server)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.base = ""
        self._held: list[asyncio.StreamWriter] = []
        self.release = asyncio.Event()

    async def handle(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._held.append(writer)
        await self.release.wait()
        writer.close()


@pytest.fixture
async def black_hole() -> AsyncIterator[BlackHole]:
    hole = BlackHole()
    server = await asyncio.start_server(hole.handle, "127.0.0.1", 0)
    hole.base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield hole
    finally:
        hole.release.set()
        server.close()
        await server.wait_closed()


async def _until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        await asyncio.sleep(0.01)


async def test_every_malformed_answer_is_a_link_outcome(raw_site: RawSite) -> None:
    links = LinkChecker(Settings(link_check_allow_private=True, link_check_timeout=3.0))
    paths = list(_CANNED)
    invalid = ["http://[::1/", "http://exa mple.com/", "http://example.com:99999/", "http://%zz/", "http://[v1.x]/"]
    try:
        statuses = await links.check_all([f"{raw_site.base}{p}" for p in paths] + invalid, user_key="u1")
    finally:
        await links.close()
    by_path = dict(zip(paths + invalid, statuses, strict=True))
    for where, status in by_path.items():
        assert status.outcome in ("ok", "broken", "skipped"), (where, status)
    bad_location = by_path["/bad-location"]
    assert (bad_location.outcome, bad_location.status) == ("broken", 302)
    assert "invalid URL" in (bad_location.error or "") and "[::1" in (bad_location.error or "")
    assert by_path["/bad-port"].outcome == "broken" and by_path["/bad-port"].status == 301
    assert by_path["/latin1-location"].outcome == "broken"
    assert by_path["/latin1-header"].outcome == "ok"  # an odd header alone does not break a link
    assert (by_path["/cut"].outcome, by_path["/cut"].status) == ("ok", 200)  # the body is not judged
    for path in ("/bad-status", "/not-http", "/huge-header", "/empty"):
        assert by_path[path].outcome == "broken", (path, by_path[path])
    assert by_path["/status-999"].outcome == "broken"
    for url in invalid:
        assert by_path[url].outcome in ("broken", "skipped"), (url, by_path[url])


async def test_a_timeout_is_never_kept_as_the_links_verdict(site: Site) -> None:
    """/slow times out while the site holds it; once the site answers, the next report (no refresh)
    fetches it again and finds it fine. A definite answer (/ok) is still kept."""
    links = LinkChecker(Settings(link_check_allow_private=True, link_check_timeout=0.5))
    try:
        slow, ok = await links.check_all([f"{site.base}/slow", f"{site.base}/ok"], user_key="u1")
        assert (slow.outcome, slow.error) == ("broken", "timed out")
        site.release.set()
        again, ok_again = await links.check_all([f"{site.base}/slow", f"{site.base}/ok"], user_key="u1")
    finally:
        await links.close()
    assert (again.outcome, again.status) == ("ok", 200)
    assert ok.outcome == ok_again.outcome == "ok"
    assert site.methods.count(("HEAD", "/slow")) == 2 and site.methods.count(("HEAD", "/ok")) == 1


async def test_a_refused_connection_is_not_kept(raw_site: RawSite) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/latin1-header"
    links = LinkChecker(Settings(link_check_allow_private=True, link_check_timeout=2.0))
    try:
        (closed,) = await links.check_all([url], user_key="u1")
        assert (closed.outcome, closed.status) == ("broken", None)
        served = await asyncio.start_server(raw_site.handle, "127.0.0.1", port)
        try:
            (later,) = await links.check_all([url], user_key="u1")
        finally:
            served.close()
            await served.wait_closed()
    finally:
        await links.close()
    assert (later.outcome, later.status) == ("ok", 200)


def test_the_rate_is_what_can_drain() -> None:
    # 4 fetches at once that each end within 10 s: 24 URLs a minute get through, not 120.
    assert drain_rate(Settings()) == 24.0
    assert drain_rate(Settings(link_check_rate=120.0)) == 24.0
    assert drain_rate(Settings(link_check_rate=6.0)) == 6.0
    assert drain_rate(Settings(link_check_user_concurrency=2, link_check_timeout=4.0)) == 30.0


async def test_a_report_gets_as_many_urls_as_drain(site: Site) -> None:
    settings = Settings(
        link_check_allow_private=True, link_check_rate=120.0, link_check_user_concurrency=2, link_check_timeout=4.0
    )
    links = LinkChecker(settings)
    try:
        statuses = await links.check_all([f"{site.base}/ok?n={n}" for n in range(40)], user_key="u1")
    finally:
        await links.close()
    assert [s.outcome for s in statuses].count("ok") == 30
    assert [s.outcome for s in statuses].count("skipped") == 10


@pytest.mark.alone
async def test_one_users_black_holed_links_never_hold_another_users_checks(
    black_hole: BlackHole, site: Site, rspamd: Rspamd
) -> None:
    """User A's report has 20 links to a server that accepts and never answers; meanwhile user B's
    healthy link and rspamd score answer in well under one link timeout, and A's are still held."""
    timeout = 4.0
    settings = Settings(link_check_allow_private=True, link_check_timeout=timeout, rspamd_url=rspamd.url)
    links, spam = LinkChecker(settings), SpamChecker(settings)
    mail = personal("Hi Bob,\n\nAre you still free on Friday?\n\nAlice\n")
    assert (await spam.check(mail, ENVELOPE, user_key="warm-up")).error is None  # rspamd's first answer is slow
    a = asyncio.create_task(links.check_all([f"{black_hole.base}/{n}" for n in range(20)], user_key="A"))
    try:
        await _until(lambda: black_hole.accepted >= settings.link_check_user_concurrency)
        started = time.perf_counter()
        (b_link,), b_spam = await asyncio.gather(
            links.check_all([f"{site.base}/ok"], user_key="B"), spam.check(mail, ENVELOPE, user_key="B")
        )
        took = time.perf_counter() - started
        assert (b_link.outcome, b_link.status) == ("ok", 200)
        assert b_spam.error is None and b_spam.action == "no action"
        assert took / timeout < 0.5, f"user B waited {took:.2f} s behind user A's black hole"
        assert not a.done()
        # A holds only its own slots: never more connections than its share.
        assert black_hole.accepted == settings.link_check_user_concurrency
    finally:
        a.cancel()
        await asyncio.gather(a, return_exceptions=True)
        await links.close()


@pytest.mark.alone
async def test_black_holed_names_hold_no_thread_of_the_default_pool(site: Site) -> None:
    """20 links whose names a silent nameserver never answers: the lookups go through the async
    resolver, so the default thread pool (ingest's, Argon2's) answers at once meanwhile, and the
    outcome (unresolved, timed out) is not kept."""
    zone = FakeDns()
    dns = DnsServerPair(zone)
    dns.start()
    names = [f"h{n}.black-hole.example" for n in range(20)]
    for name in names:
        zone.silence(name)
    settings = Settings(
        link_check_allow_private=True, link_check_timeout=3.0, dns_timeout=1.0, dns_nameservers=[dns.address]
    )
    links = LinkChecker(settings)
    try:
        a = asyncio.create_task(links.check_all([f"http://{n}/" for n in names], user_key="A"))
        await _until(lambda: len(zone.queries) >= settings.link_check_user_concurrency)
        pool: Awaitable[None] = asyncio.to_thread(lambda: None)
        await pool
        assert not a.done()  # the default pool answered while every lookup was still pending
        (b_link,) = await links.check_all([f"{site.base}/ok"], user_key="B")
        assert b_link.outcome == "ok" and not a.done()
        statuses = await a
        assert all(s.outcome == "broken" and "unresolved" in (s.error or "") for s in statuses), statuses
        assert {q[0] for q in zone.queries} <= set(names)
    finally:
        await links.close()
        dns.stop()
    assert all(links._cached(f"http://{n}/") is None for n in names)


# --- rspamd's malformed answers ------------------------------------------------------------------

_RSPAMD_ANSWERS: dict[str, bytes] = {
    "not-json": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 14\r\n\r\n<html>hi</html",
    "wrong-shape": b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n[1, 2, 3]",
    "wrong-types": b"HTTP/1.1 200 OK\r\nContent-Length: 55\r\n\r\n"
    b'{"score": "high", "required_score": 15, "action": null}',
    "symbols-list": b"HTTP/1.1 200 OK\r\nContent-Length: 72\r\n\r\n"
    b'{"score": 1, "required_score": 15, "action": "no action", "symbols": []}',
    "truncated": b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"score": 1, "required_',
    "cut-json": b'HTTP/1.1 200 OK\r\nContent-Length: 23\r\n\r\n{"score": 1, "required_',
    "not-utf8": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00{",
    "bad-status": b"HTTP/1.1 2xx OK\r\n\r\n",
    "oversized": b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n" + b" " * 2_000_000,
}


async def _fake_rspamd(answer: bytes) -> tuple[asyncio.Server, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("kind", list(_RSPAMD_ANSWERS))
async def test_rspamds_malformed_answers_are_the_spam_parts_error(kind: str) -> None:
    server, url = await _fake_rspamd(_RSPAMD_ANSWERS[kind])
    try:
        result = await SpamChecker(Settings(rspamd_url=url, rspamd_timeout=5.0)).check(
            b"Subject: x\r\n\r\nhi\r\n", Envelope()
        )
    finally:
        server.close()
        await server.wait_closed()
    assert result.score is None and result.action is None and result.error, result
    part = spam_part(result)
    assert (part.verdict, part.configured) == ("warning", True)
    assert [f.code for f in part.findings] == ["spam_check_failed"]
