"""The uvicorn internals inboxd leans on, checked against a real uvicorn: when an upgrade moves
them, this file fails with a message naming what moved, instead of a feature quietly degrading.

What app.py uses: `Server._serve(sockets=...)` (serve without taking the process's signals),
`Server.started`, `Server.should_exit`. What api/ws.py uses: `receive.__self__` is the
websockets-sansio protocol, with `transport.abort`, `handshake_complete`, `request`/`response`
(emptied after the handshake) and `initial_response` (set by a denial before the handshake).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from importlib.metadata import requires, version
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from inboxd.api.ws import _deny, _shed_handshake, _transport_abort


def test_installed_uvicorn_is_in_the_declared_range() -> None:
    declared = [Requirement(r) for r in requires("inboxd") or [] if r.startswith("uvicorn")]
    assert len(declared) == 1
    specifier = declared[0].specifier
    # A range with an upper bound: an untested major change must be a deliberate edit.
    assert any(s.operator == "<" for s in specifier), specifier
    assert specifier.contains(version("uvicorn")), f"uvicorn {version('uvicorn')} is outside {specifier}"


def test_server_serve_is_where_app_py_expects_it() -> None:
    serve = getattr(uvicorn.Server, "_serve", None)
    assert serve is not None and inspect.iscoroutinefunction(serve), "uvicorn.Server._serve moved"
    assert "sockets" in inspect.signature(serve).parameters, "uvicorn.Server._serve lost `sockets`"
    server = uvicorn.Server(uvicorn.Config(_app))
    assert server.started is False and server.should_exit is False


class _Probe:
    """An ASGI app that runs ws.py's helpers on uvicorn's real protocol and notes what it saw."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.done = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        protocol = getattr(receive, "__self__", None)
        self.seen["protocol"] = type(protocol)
        try:
            if scope["path"] == "/deny":
                await _deny(scope, receive, send)
                self.seen["deny_completed"] = getattr(protocol, "handshake_complete", None)
                return
            await send({"type": "websocket.accept"})
            self.seen["abort"] = _transport_abort(receive)
            request_headers = protocol.request.headers  # type: ignore[union-attr]
            self.seen["had_headers"] = len(request_headers) > 0
            _shed_handshake(scope, receive)
            self.seen["request_after"] = getattr(protocol, "request", "missing")
            self.seen["response_after"] = getattr(protocol, "response", "missing")
            self.seen["headers_after"] = len(request_headers)
            await send({"type": "websocket.close", "code": 1000})
        finally:
            self.done.set()


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    pass


async def _serve(app: Any) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", ws="websockets-sansio", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server._serve(sockets=[sock]))
    for _ in range(1000):
        if server.started:
            break
        await asyncio.sleep(0.005)
    assert server.started, "uvicorn.Server.started never turned true"
    return server, task, sock.getsockname()[1]


async def test_websocket_protocol_internals(caplog: pytest.LogCaptureFixture) -> None:
    probe = _Probe()
    server, task, port = await _serve(probe)
    try:
        async with connect(f"ws://127.0.0.1:{port}/ok", proxy=None, open_timeout=10) as ws:
            await ws.wait_closed()
        await asyncio.wait_for(probe.done.wait(), 10)
        assert probe.seen["protocol"] is WebSocketsSansIOProtocol, "receive.__self__ is no longer the protocol"
        assert callable(probe.seen["abort"]), "the protocol's transport.abort moved"
        assert probe.seen["had_headers"], "protocol.request.headers moved"
        assert probe.seen["request_after"] is None and probe.seen["response_after"] is None, "request/response moved"
        assert probe.seen["headers_after"] == 0

        probe.done.clear()
        with caplog.at_level(logging.ERROR), pytest.raises(InvalidStatus) as denied:
            async with connect(f"ws://127.0.0.1:{port}/deny", proxy=None, open_timeout=10):
                pass
        assert denied.value.response.status_code == 403
        await asyncio.wait_for(probe.done.wait(), 10)
        assert probe.seen["deny_completed"] is True, "initial_response/handshake_complete moved"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
