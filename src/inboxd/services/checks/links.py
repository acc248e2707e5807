"""The link check: each URL of a message fetched on request, never at ingest.

HEAD first, GET when the server refuses HEAD (405, 501, or 400/403 some servers give HEAD);
redirects are followed here, one hop at a time, so every hop's host passes the webhooks' address
guard (`netguard.py`: private, loopback and link-local addresses refused, literals and DNS
answers both) unless `link_check_allow_private`. The connection then goes to the addresses the
guard checked (`PinnedResolver`), never to a second DNS answer.

Bounded per user, so one user's black-holed links never make another user's checks wait:
`link_check_user_concurrency` fetches of one user at once, `link_check_concurrency` for the whole
server (`gate.UserGate`: a user waits for its own slots first), `link_check_timeout` seconds per
URL (all hops, DNS included), and `link_check_rate` URLs per minute and user (a token bucket; the
URLs of a report beyond it are not fetched and say so). The rate is never above what can drain:
a user's `link_check_user_concurrency` fetches each end within `link_check_timeout`, so at most
`user_concurrency * 60 / timeout` URLs a minute get through (`drain_rate`); a higher rate would
only queue fetches that then time out. Host names are resolved with dnspython's asynchronous
resolver (`netguard.AsyncLookup`), never on the default thread pool that ingest uses.

Only definite answers are kept (`link_check_cache_ttl` seconds per URL, at most `_CACHE_SIZE`
URLs, so a refreshed report does not hammer a site): an HTTP status, a redirect loop, a refused
address. A timeout, a refused connection or a failed lookup says nothing lasting about the link
and is asked again next time. Whatever a site answers (a malformed `Location`, a bad status line,
headers that are not UTF-8, a cut body) is an outcome of that link, never an exception.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import aiohttp
import yarl

from inboxd.config import Settings
from inboxd.dns import parse_nameserver
from inboxd.netguard import AddressRefused, AsyncLookup, PinnedResolver, ResolutionFailed, resolve_checked
from inboxd.services.checks.gate import UserGate

log = logging.getLogger(__name__)

USER_AGENT = "inboxd-link-check/1"
# Servers that refuse HEAD say so in one of these; the same URL is then asked with GET.
_HEAD_REFUSED = frozenset({400, 403, 405, 501})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CACHE_SIZE = 10_000
_READ_LIMIT = 65536

Outcome = Literal["ok", "broken", "redirect_loop", "private_refused", "skipped"]


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """What fetching one URL came to: the last status, where the redirects ended, how long it took.

    `outcome` is `ok` for a 2xx/3xx final answer (a 3xx only when the hop limit stopped us),
    `broken` for 4xx/5xx, refused, timed out or unresolved, `redirect_loop` when a hop came back to
    a URL already visited or the hops ran out, `private_refused` when the guard refused a host, and
    `skipped` when the URL was not fetched (not http(s), or over the user's rate).
    """

    url: str
    outcome: Outcome
    status: int | None
    final_url: str | None
    ms: int
    error: str | None


class _Bucket:
    """A token bucket per user: `rate` URLs per minute, holding at most `rate`."""

    def __init__(self, *, rate: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}

    def take(self, key: str, wanted: int) -> int:
        """How many of `wanted` tokens the user gets now (taken)."""
        now = self._clock()
        level, at = self._levels.get(key, (self._rate, now))
        level = min(self._rate, level + (now - at) * self._rate / 60.0)
        granted = max(0, min(wanted, int(level)))
        self._levels[key] = (level - granted, now)
        if len(self._levels) > _CACHE_SIZE:  # full buckets carry no information: drop the oldest
            self._levels.pop(next(iter(self._levels)))
        return granted


def drain_rate(settings: Settings) -> float:
    """URLs per minute and user: `link_check_rate`, at most what the user's slots can drain."""
    drain = max(1, settings.link_check_user_concurrency) * 60.0 / settings.link_check_timeout
    return drain if settings.link_check_rate <= 0 else min(settings.link_check_rate, drain)


class LinkChecker:
    """Owns the aiohttp session (opened at first use), the cache, the per-user buckets and gate."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = clock
        self._resolver = PinnedResolver()
        self._lookup = AsyncLookup(
            nameservers=[parse_nameserver(s) for s in settings.dns_nameservers],
            timeout=min(settings.dns_timeout, settings.link_check_timeout),
        )
        self._session: aiohttp.ClientSession | None = None
        self._gate = UserGate(per_user=settings.link_check_user_concurrency, total=settings.link_check_concurrency)
        self._bucket = _Bucket(rate=drain_rate(settings), clock=clock)
        self._cache: OrderedDict[str, tuple[float, LinkStatus]] = OrderedDict()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=self._resolver, use_dns_cache=False, limit=max(1, self._settings.link_check_concurrency)
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": USER_AGENT},
                trust_env=False,
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check_all(self, urls: Sequence[str], *, user_key: str, refresh: bool = False) -> list[LinkStatus]:
        """The status of each URL (in order, each distinct URL fetched once); `refresh` ignores
        the cache."""
        distinct = list(dict.fromkeys(urls))
        known: dict[str, LinkStatus] = {}
        wanted: list[str] = []
        for url in distinct:
            cached = None if refresh else self._cached(url)
            if cached is not None:
                known[url] = cached
            elif not _fetchable(url):
                known[url] = LinkStatus(url, "skipped", None, None, 0, "not an http(s) URL")
            else:
                wanted.append(url)
        granted = self._bucket.take(user_key, len(wanted))
        for url in wanted[granted:]:
            known[url] = LinkStatus(url, "skipped", None, None, 0, "not checked: the link check rate was reached")
        fetched = await asyncio.gather(*(self.check(url, user_key=user_key) for url in wanted[:granted]))
        known.update((s.url, s) for s in fetched)
        return [known[url] for url in urls]

    def _cached(self, url: str) -> LinkStatus | None:
        hit = self._cache.get(url)
        if hit is None or hit[0] <= self._clock():
            return None
        self._cache.move_to_end(url)
        return hit[1]

    async def check(self, url: str, *, user_key: str) -> LinkStatus:
        """Fetch one URL with its redirects in one of `user_key`'s slots (past the cache, unlimited
        by rate); never raises. A definite answer is kept for the next report."""
        async with self._gate.slot(user_key):
            started = time.perf_counter()  # the fetch's own time, not the wait for a slot
            try:
                async with asyncio.timeout(self._settings.link_check_timeout):
                    outcome, status, final, error = await self._follow(url)
            except TimeoutError:
                outcome, status, final, error = "broken", None, None, "timed out"
            except Exception as exc:  # a stranger's site must never turn a report into a 500
                log.warning("link check: %s gave an unexpected %r", url, exc)
                outcome, status, final, error = "broken", None, url, f"unreadable answer ({type(exc).__name__})"
        result = LinkStatus(url, outcome, status, final, int((time.perf_counter() - started) * 1000), error)
        if status is not None or outcome == "private_refused":
            self._cache[url] = (self._clock() + self._settings.link_check_cache_ttl, result)
            self._cache.move_to_end(url)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return result

    async def _follow(self, url: str) -> tuple[Outcome, int | None, str | None, str | None]:
        seen = {url}
        current = url
        status: int | None = None
        for _hop in range(self._settings.link_check_max_redirects + 1):
            try:
                status, location = await self._ask(current)
            except AddressRefused:
                return "private_refused", None, current, "refused: a private, loopback or link-local address"
            except ResolutionFailed as exc:
                return "broken", None, current, f"unresolved: {exc}"
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                return "broken", None, current, f"refused: {str(exc).strip() or type(exc).__name__}"[:300]
            if status not in _REDIRECTS or location is None:
                broken = status >= 400
                return ("broken" if broken else "ok"), status, current, (f"HTTP {status}" if broken else None)
            try:
                following = str(yarl.URL(current).join(yarl.URL(location)))
            except (ValueError, TypeError) as exc:  # `http://[::1`, a bad port, surrogates of non-UTF-8
                shown = location.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:200]
                return "broken", status, current, f"redirected to an invalid URL ({shown!r}: {exc})"[:300]
            if following in seen:
                return "redirect_loop", status, following, f"redirect loop back to {following}"
            if not _fetchable(following):
                return "broken", status, following, "redirected to a URL that is not http(s)"
            seen.add(following)
            current = following
        return "redirect_loop", status, current, f"more than {self._settings.link_check_max_redirects} redirects"

    async def _ask(self, url: str) -> tuple[int, str | None]:
        """One hop: HEAD, then GET if HEAD is refused; the status and any Location."""
        parsed = yarl.URL(url)
        if not parsed.raw_host or parsed.port is None:
            raise ValueError(f"invalid URL {url}")
        target = await resolve_checked(
            parsed.raw_host, parsed.port, allow_private=self._settings.link_check_allow_private, lookup=self._lookup
        )
        self._resolver.pin(target)
        session = self._open()
        async with session.head(parsed, allow_redirects=False) as response:
            status, location = response.status, response.headers.get("Location")
        if status in _HEAD_REFUSED:
            async with session.get(parsed, allow_redirects=False) as response:
                # Read a little so the connection can be reused; the body itself is not judged.
                await response.content.read(_READ_LIMIT)
                status, location = response.status, response.headers.get("Location")
        return status, location


def _fetchable(url: str) -> bool:
    try:
        parsed = yarl.URL(url)
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.raw_host)
