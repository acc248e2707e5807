"""A real HTTPS webhook receiver on 127.0.0.1 (aiohttp server, certificate from trustme).

It records every request and answers with the statuses a test lines up (200 when none are
left). Tests give inboxd `ca_path` as `webhook_ca_file`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from aiohttp import web


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.perf_counter() on arrival
    wall: float  # time.time() on arrival


@dataclass
class Receiver:
    ca_path: Path
    server_ssl: ssl.SSLContext
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    # When set, each request waits for it before answering (a receiver that hangs).
    hold: asyncio.Event | None = None
    on_request: Callable[[Received], None] | None = None
    port: int = 0
    _runner: web.AppRunner | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def create(cls, directory: Path) -> Receiver:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        ca_path = directory / "webhook-ca.pem"
        ca.cert_pem.write_to_path(str(ca_path))
        return cls(ca_path=ca_path, server_ssl=context)

    def url(self, path: str = "/hooks/mail", host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port or self.port, ssl_context=self.server_ssl)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = Received(
            path=request.path,
            method=request.method,
            headers=dict(request.headers),
            body=await request.read(),
            at=time.perf_counter(),
            wall=time.time(),
        )
        self.requests.append(received)
        self._arrived.set()
        if self.on_request is not None:
            self.on_request(received)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hold is not None:
            await self.hold.wait()
        status = self.statuses.pop(0) if self.statuses else 200
        headers = {"Location": self.url("/elsewhere")} if 300 <= status < 400 else None
        return web.Response(status=status, text="ok", headers=headers)

    async def wait_for(self, count: int, within: float = 10.0) -> list[Received]:
        """Wait until at least `count` requests arrived; returns them all."""
        async with asyncio.timeout(within):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.requests)
