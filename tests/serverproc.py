"""inboxd as a child process, configured through INBOXD_* variables: `python -m inboxd serve`
(`ServerProcess`), or forked from a process that has imported inboxd already (`ForkedServer`),
whose restart costs milliseconds rather than the seconds of a fresh interpreter's imports."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

_LISTENING = re.compile(r"HTTP on http://[^:]+:(\d+)\s+SMTP on [^:]+:(\d+)")
_SUBMISSION = re.compile(r"submission on \S+:(\d+)")


@dataclass
class ServerProcess:
    proc: asyncio.subprocess.Process
    http_port: int
    smtp_port: int
    bootstrap_token: str | None
    output: list[str] = field(default_factory=list)
    submission_port: int = 0
    drain: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, data_dir: Path, **env: str) -> ServerProcess:
        variables = {
            **os.environ,
            "INBOXD_DATA_DIR": str(data_dir),
            "INBOXD_HTTP_PORT": "0",
            "INBOXD_SMTP_PORT": "0",
            "INBOXD_SUBMISSION_PORT": "0",
            "INBOXD_LOG_LEVEL": "warning",
            **env,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "inboxd",
            "serve",
            env=variables,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert proc.stdout is not None
        output: list[str] = []
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("inboxd exited during start-up:\n" + "".join(output))
                output.append(line)
                found = _LISTENING.search(line)
                if found:
                    break
            token = None
            if "bootstrap" in (await _peek(proc.stdout, output)):
                token = (await proc.stdout.readline()).decode().strip()
        submission = _SUBMISSION.search(found.string)
        server = cls(proc, int(found.group(1)), int(found.group(2)), token, output)
        server.submission_port = int(submission.group(1)) if submission else 0
        # Keep reading, so a chatty server never blocks on a full pipe.
        server.drain = asyncio.get_running_loop().create_task(_collect(proc.stdout, output))
        return server

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(20):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.drain is not None:
            with contextlib.suppress(Exception):
                await self.drain

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash, a power cut of the process or the OOM killer."""
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        if self.drain is not None:
            with contextlib.suppress(Exception):
                await self.drain

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


async def _collect(stream: asyncio.StreamReader, output: list[str]) -> None:
    while line := await stream.readline():
        output.append(line.decode())


async def _peek(stream: asyncio.StreamReader, output: list[str]) -> str:
    """The next line if one comes promptly (the bootstrap notice follows the listening line)."""
    try:
        async with asyncio.timeout(0.5):
            line = (await stream.readline()).decode()
    except TimeoutError:
        return ""
    output.append(line)
    return line


_forkserver: Any = None


def _fork_context() -> Any:
    """A forkserver that imported inboxd once: each child is a fork of it, with nothing to import."""
    global _forkserver
    if _forkserver is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["inboxd.app", "inboxd.config", "uvloop"])
        _forkserver = context
    return _forkserver


def _forked_main(env: dict[str, str], conn: Connection) -> None:
    """The child: `inboxd serve` without the command line; reports its ports over the pipe."""
    import logging

    import uvloop

    from inboxd.app import Inboxd
    from inboxd.config import load_settings

    os.environ.update(env)
    settings = load_settings()
    logging.basicConfig(level=settings.log_level.upper())

    async def main() -> None:
        server = Inboxd(settings)
        await server.start()
        conn.send((server.http_port, server.smtp_port, server.bootstrap_token))
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()

    uvloop.run(main())


@dataclass
class ForkedServer:
    process: BaseProcess
    http_port: int
    smtp_port: int
    bootstrap_token: str | None

    @classmethod
    async def start(cls, data_dir: Path, **env: str) -> ForkedServer:
        variables = {
            "INBOXD_DATA_DIR": str(data_dir),
            "INBOXD_HTTP_PORT": "0",
            "INBOXD_SMTP_PORT": "0",
            "INBOXD_LOG_LEVEL": "warning",
            **env,
        }
        context = _fork_context()
        ours, theirs = context.Pipe(duplex=False)
        process = context.Process(target=_forked_main, args=(variables, theirs), daemon=True)
        await asyncio.to_thread(process.start)
        theirs.close()
        try:
            for _ in range(600):
                if await asyncio.to_thread(ours.poll, 0.1):
                    try:
                        http_port, smtp_port, token = ours.recv()
                    except EOFError:
                        await asyncio.to_thread(process.join, 10)
                        raise RuntimeError(f"inboxd exited during start-up with {process.exitcode}") from None
                    return cls(process, http_port, smtp_port, token)
                if not process.is_alive():
                    raise RuntimeError(f"inboxd exited during start-up with {process.exitcode}")
            raise RuntimeError("inboxd did not start within 60 s")
        finally:
            ours.close()

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or the OOM killer."""
        if self.process.pid is not None and self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        await asyncio.to_thread(self.process.join)

    async def stop(self) -> None:
        if self.process.pid is not None and self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)
            await asyncio.to_thread(self.process.join, 20)
        if self.process.is_alive():
            await self.kill()
