"""The HTTP side of webhook delivery: one signed POST per attempt, over aiohttp, through the guard.

Each attempt resolves and checks the host (`guard.resolve_checked`), pins the checked addresses
in `netguard.PinnedResolver`, and lets aiohttp connect: the connector asks the resolver, which answers
only from the pins and never looks a name up itself, so the connection goes to an address that
was checked. TLS keeps the URL's host name for SNI and certificate checks. Redirects are not
followed; proxies from the environment are not used.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import aiohttp
import yarl

from inboxd.config import Settings
from inboxd.netguard import AddressRefused, PinnedResolver, ResolutionFailed, resolve_checked
from inboxd.webhooks import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

USER_AGENT = "inboxd-webhooks/1"
BLOCKED = "blocked_address"
_MAX_ERROR = 300
_READ_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to: `error` is None exactly when the receiver answered 2xx."""

    status_code: int
    error: str | None
    duration_ms: int


def _ssl_context(settings: Settings) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if settings.webhook_ca_file:
        context.load_verify_locations(cafile=settings.webhook_ca_file)
    return context


def _short(kind: str, exc: BaseException) -> str:
    detail = str(exc).strip() or type(exc).__name__
    return f"{kind}: {detail}"[:_MAX_ERROR]


class WebhookSender:
    """Owns the aiohttp session; `post` never raises for a receiver's fault, it reports it."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._resolver = PinnedResolver()
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        connector = aiohttp.TCPConnector(
            resolver=self._resolver,
            use_dns_cache=False,
            ssl=_ssl_context(self._settings),
            limit=max(1, self._settings.webhook_concurrency),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._settings.webhook_timeout),
            headers={"User-Agent": USER_AGENT},
            trust_env=False,
            auto_decompress=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, *, event_id: str, body: bytes, secret: str, timestamp: int) -> Outcome:
        """Sign `body` at `timestamp` and POST it to `url`; at most `webhook_timeout` seconds."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._settings.webhook_timeout):
                status = await self._attempt(url, event_id=event_id, body=body, secret=secret, timestamp=timestamp)
        except Exception as exc:
            return Outcome(0, _describe(exc), _elapsed(started))
        error = None if 200 <= status < 300 else _status_error(status)
        return Outcome(status, error, _elapsed(started))

    async def _attempt(self, url: str, *, event_id: str, body: bytes, secret: str, timestamp: int) -> int:
        assert self._session is not None, "the sender is not started"
        parsed = yarl.URL(url)
        allowed = ("https", "http") if self._settings.webhook_allow_http else ("https",)
        if parsed.scheme not in allowed or not parsed.raw_host or parsed.port is None:
            raise aiohttp.InvalidURL(url)
        target = await resolve_checked(parsed.raw_host, parsed.port, allow_private=self._settings.webhook_allow_private)
        self._resolver.pin(target)
        headers = {
            "Content-Type": "application/json",
            ID_HEADER: event_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(secret, timestamp, body),
        }
        async with self._session.post(parsed, data=body, headers=headers, allow_redirects=False) as response:
            # Read a little so a kept-alive connection can be reused; the body itself is ignored.
            await response.content.read(_READ_LIMIT)
            return response.status


def _elapsed(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _status_error(status: int) -> str:
    if 300 <= status < 400:
        return f"HTTP {status} (redirects are not followed)"
    return f"HTTP {status}"


def _describe(exc: Exception) -> str:
    """The delivery log's error text for an attempt that got no HTTP answer (status_code 0)."""
    if isinstance(exc, AddressRefused):
        return BLOCKED
    if isinstance(exc, ResolutionFailed | aiohttp.ClientConnectorDNSError):
        return _short("dns_error", exc)
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return _short("tls_error", exc)
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        return _short("invalid_url", exc)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return _short("connection_error", exc)
    return _short("error", exc)
