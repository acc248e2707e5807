"""A TCP proxy a test can cut: between inboxd and PostgreSQL, it loses the connection for real.

`cut()` closes every connection it carries and refuses new ones (as a restarted or unreachable
server would); `restore()` lets connections through again.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.open = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()
            self._writers.discard(sink)

    def cut(self) -> None:
        """Drop every carried connection (a reset, not a goodbye) and refuse new ones."""
        self.open = False
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.open = True

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
