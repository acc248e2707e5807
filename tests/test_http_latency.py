"""Small responses on a kept-alive connection leave at once: the listening socket sets
TCP_NODELAY, which accepted connections inherit. Without it, Nagle's algorithm held each body
written after its headers until the client's delayed ACK: about 40 ms per request."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from typing import Any

import pytest

from inboxd.app import Inboxd
from inboxd.config import Settings
from tests.conftest import Harness

# Bounds on time and memory: run after the parallel part of the suite, alone (Makefile).
pytestmark = pytest.mark.alone


def _timed_requests(port: int, count: int) -> list[float]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        timings = []
        for _ in range(count):
            started = time.perf_counter()
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: inboxd\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            while len(body) < length:
                body += sock.recv(65536)
            timings.append(time.perf_counter() - started)
        return timings


async def _serve_and_time(settings: Settings) -> list[float]:
    async with Inboxd(settings) as server:
        return await asyncio.to_thread(_timed_requests, server.http_port, 30)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_keep_alive_requests_are_not_delayed(harness: Harness, make_settings: Any) -> None:
    on_uvloop = await asyncio.to_thread(_timed_requests, harness.server.http_port, 30)
    assert statistics.median(on_uvloop) < 0.02, on_uvloop
    # The stock asyncio loop (an embedding application's `asyncio.run`) showed the delay; uvloop
    # sets TCP_NODELAY itself. Run one inboxd there, in a thread of this test only.
    on_asyncio = await asyncio.to_thread(asyncio.run, _serve_and_time(make_settings()))
    assert statistics.median(on_asyncio) < 0.02, on_asyncio
