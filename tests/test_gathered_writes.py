"""`http/protocol.py`: a turn's writes reach the socket as one, in order; a large body goes out
in bounded pieces; closing sends what is held first; and a real server answers through it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx

from inboxd.app import Inboxd
from inboxd.http.protocol import GATHER_LIMIT, GatheredWrites


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))

    def abort(self) -> None:
        self.calls.append(("abort", b""))

    closing = False

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7


async def test_a_turns_writes_go_out_as_one() -> None:
    inner = Recorder()
    gathered = GatheredWrites(inner, asyncio.get_running_loop())
    gathered.write(b"HTTP/1.1 200 OK\r\n\r\n")
    gathered.write(b"")
    gathered.write(memoryview(b"body"))
    assert inner.calls == [] and gathered.get_write_buffer_size() == 7 + 23
    await asyncio.sleep(0)
    assert inner.calls == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody")]
    gathered.write(b"next")
    await asyncio.sleep(0)
    assert inner.calls[1:] == [("write", b"next")]


async def test_a_large_body_is_not_held_whole() -> None:
    inner = Recorder()
    gathered = GatheredWrites(inner, asyncio.get_running_loop())
    piece = b"x" * (GATHER_LIMIT // 4)
    for _ in range(10):
        gathered.write(piece)
    # Sent whenever 64 KiB are held, so the socket's flow control sees them while they are made.
    assert [len(data) for _, data in inner.calls] == [GATHER_LIMIT, GATHER_LIMIT]
    await asyncio.sleep(0)
    assert b"".join(data for _, data in inner.calls) == piece * 10


async def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    inner = Recorder()
    gathered = GatheredWrites(inner, asyncio.get_running_loop())
    gathered.write(b"last words")
    gathered.close()
    assert inner.calls == [("write", b"last words"), ("close", b"")]
    gathered.write(b"lost")
    gathered.abort()
    await asyncio.sleep(0)
    assert inner.calls[2:] == [("abort", b"")]


async def test_a_connection_lost_before_the_turn_ends_gets_nothing() -> None:
    inner = Recorder()
    gathered = GatheredWrites(inner, asyncio.get_running_loop())
    gathered.write(b"for a peer that left")
    inner.closing = True  # the connection was lost
    await asyncio.sleep(0)
    assert inner.calls == [] and gathered.get_write_buffer_size() == 7


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


async def test_a_server_answers_through_it(make_settings: Any, clock: Any) -> None:
    async with Inboxd(make_settings(), clock=clock) as server:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            # Keep-alive: several answers on one connection, each whole.
            for _ in range(3):
                answer = await http.get("/healthz")
                assert answer.status_code == 200 and answer.headers["x-request-id"]
        # `Connection: close`: the answer is sent before the connection is closed.
        raw = await asyncio.to_thread(
            _raw, server.http_port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"connection: close" in head.lower() and body
