"""uvicorn's httptools protocol, its writes within one turn of the event loop sent as one.

uvicorn writes a response in two calls, the status line and headers, then the body; on a socket
each is a system call, and on loopback a `send()` also runs the receiving side's TCP work: for a
small JSON answer the second write cost more than building the answer. `GatheredWrites` holds
what is written during a turn of the loop and sends it in one write when the turn's callbacks
are done, or at once when 64 KiB are held, so a streamed body still reaches the socket in bounded
pieces and the socket's flow control (pause and resume writing) still holds back its sender.
Closing sends what is held first; a connection lost before the end of the turn gets nothing more.
The bytes on the wire, and their order, are unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

GATHER_LIMIT = 64 * 1024


class GatheredWrites(asyncio.Transport):
    """`transport`, its writes gathered per turn of `loop` (see the module docstring)."""

    __slots__ = ("_held", "_held_size", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []
        self._held_size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)
        self._held_size += len(data)
        if self._held_size >= GATHER_LIMIT:
            self.flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is held, in one write."""
        held = self._held
        if not held:
            return
        self._held = []
        self._held_size = 0
        # The peer may have gone between the write and the end of the turn: what was for it is
        # dropped, as uvicorn writes nothing to a connection it knows is lost (and a closed
        # handle would raise here, in a callback, rather than in the writer).
        if self._transport.is_closing():
            return
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._held_size = 0
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._held_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's `http="httptools"` protocol over `GatheredWrites` (a WebSocket it upgrades to
    writes through the same)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(GatheredWrites(transport, self.loop))
