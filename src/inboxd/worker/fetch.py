"""Remote resources for the renderer (`services/render.py`) when remote content is allowed: each URL
fetched through the webhooks' address guard (`netguard.py`), connecting only to the addresses
the guard checked (`PinnedResolver`). No redirect is followed here: Chromium asks for the next hop,
which comes back through the guard."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

    from inboxd.netguard import PinnedResolver

log = logging.getLogger(__name__)

# A page's image or style sheet beyond this is cut: a render is not a download.
MAX_BYTES = 5 * 1024 * 1024


class GuardedFetch:
    """`await fetch(url)`: (status, content type, body), or None when refused or failed."""

    def __init__(self, *, allow_private: bool, timeout: float) -> None:
        self._allow_private = allow_private
        self._timeout = timeout
        self._resolver: PinnedResolver | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, url: str) -> tuple[int, str, bytes] | None:
        # aiohttp is imported at the first remote fetch, not at start: a server that never renders
        # with remote content never loads it (tests/test_lean_start.py).
        import aiohttp
        import yarl

        from inboxd.netguard import AddressRefused, ResolutionFailed, resolve_checked

        try:
            parsed = yarl.URL(url)
            if not parsed.raw_host or parsed.port is None:
                return None
            target = await resolve_checked(parsed.raw_host, parsed.port, allow_private=self._allow_private)
            session, resolver = self._open()
            resolver.pin(target)
            async with session.get(parsed, allow_redirects=False) as response:
                body = await response.content.read(MAX_BYTES)
                return response.status, response.headers.get("Content-Type", "application/octet-stream"), body
        except (AddressRefused, ResolutionFailed, aiohttp.ClientError, OSError, ValueError, TimeoutError) as exc:
            log.debug("render: remote %s refused: %r", url, exc)
            return None

    def _open(self) -> tuple[aiohttp.ClientSession, PinnedResolver]:
        import aiohttp

        from inboxd.netguard import PinnedResolver

        if self._session is None or self._resolver is None:
            self._resolver = PinnedResolver()
            connector = aiohttp.TCPConnector(resolver=self._resolver, use_dns_cache=False, limit=8)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout), trust_env=False
            )
        return self._session, self._resolver

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
