"""WebSocket clients for the `/api/ws` tests: the `websockets` library's asyncio client, and a
raw one on its sans-I/O protocol for what the library does for us (answering pings, reading).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


def ws_url(http_port: int) -> str:
    return f"ws://127.0.0.1:{http_port}/api/ws"


def open_ws(http_port: int, **kw: Any) -> connect:
    return connect(ws_url(http_port), proxy=None, open_timeout=10, **kw)


@asynccontextmanager
async def authed(http_port: int, token: str, **kw: Any) -> AsyncIterator[ClientConnection]:
    """A connection that has sent its auth message and received `auth_ok`."""
    async with open_ws(http_port, **kw) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "auth_ok"}
        yield ws


async def refused(ws: ClientConnection) -> tuple[Any, int | None]:
    """The error message the server sent, and the close code that followed it."""
    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
    await asyncio.wait_for(ws.wait_closed(), 10)
    assert ws.close_code is not None
    return message, ws.close_code


class RawClient:
    """A WebSocket client that does only what the test makes it do.

    It reads only when asked (so it can stop reading), and writes only what the test sends (so
    the pongs the protocol prepares are never written).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proto: ClientProtocol) -> None:
        self.reader = reader
        self.writer = writer
        self.proto = proto
        self.frames: list[Frame] = []
        self.eof = False
        self.response: Response | None = None

    @classmethod
    async def open(cls, http_port: int, *, rcvbuf: int | None = None, source: str | None = None) -> RawClient:
        """A connection through the handshake: `response` holds the server's answer to it (101, or
        a refusal). `source` is the local address to connect from (127.0.0.x)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if source is not None:
            sock.bind((source, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", http_port))
        # A small stream limit keeps the client's own buffer small when it stops reading.
        reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
        proto = ClientProtocol(parse_uri(ws_url(http_port)), max_size=None)
        proto.send_request(proto.connect())
        client = cls(reader, writer, proto)
        client.flush()
        while client.response is None:
            if client.eof:
                raise EOFError("the server closed the connection during the handshake")
            client.response = next((e for e in await client.read_events() if isinstance(e, Response)), None)
        return client

    def flush(self) -> None:
        self.writer.write(b"".join(self.proto.data_to_send()))

    def send_text(self, text: str) -> None:
        """Send one frame; pongs queued by the protocol are dropped, never written."""
        self.proto.data_to_send()
        self.proto.send_text(text.encode())
        self.flush()

    async def read_events(self) -> list[object]:
        data = await self.reader.read(65536)
        if not data:
            self.eof = True
            self.proto.receive_eof()
        else:
            self.proto.receive_data(data)
        events: list[object] = list(self.proto.events_received())
        self.frames.extend(e for e in events if isinstance(e, Frame))
        return events

    async def next_frame(self, opcodes: tuple[Opcode, ...] = (Opcode.TEXT, Opcode.CLOSE)) -> Frame:
        while True:
            for i, frame in enumerate(self.frames):
                if frame.opcode in opcodes:
                    del self.frames[i]
                    return frame
            if self.eof:
                raise EOFError("the server closed the connection")
            await self.read_events()

    async def auth(self, token: str) -> Any:
        self.send_text(json.dumps({"type": "auth", "token": token}))
        frame = await self.next_frame()
        return json.loads(bytes(frame.data))

    async def read_until_closed(self) -> None:
        """Read everything until the server's side ends (close, EOF or reset)."""
        try:
            while not self.eof:
                await self.read_events()
        except ConnectionResetError:
            self.eof = True

    def close(self) -> None:
        self.writer.transport.abort()
