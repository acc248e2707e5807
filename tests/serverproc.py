"""`python -m inboxd serve` as a child process, configured through INBOXD_* variables."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
