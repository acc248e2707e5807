"""SMTP load generators: Postfix's `smtp-source` (C, preferred) or a Python asyncio client.

Both send the same 4 KB message over N persistent connections, one transaction at a time per
connection (MAIL, RCPT, DATA, each waiting for its reply: no pipelining), and end with QUIT.
A run is bounded: it is killed after `timeout` seconds and reported as such.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import resource
import shlex
import subprocess
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SENDER = "loader@load.test"


@dataclass(frozen=True, slots=True)
class LoadRun:
    """One load run: how long it took, what the client burned, and any failure it reported."""

    client: str
    command: str
    messages: int
    connections: int
    elapsed: float
    client_cpu: float
    failure: str = ""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def smtp_source_command(
    tool: str, *, port: int, connections: int, messages: int, message_file: Path, recipient: str
) -> list[str]:
    return [
        tool,
        "-d",
        "-s",
        str(connections),
        "-m",
        str(messages),
        "-F",
        str(message_file),
        "-f",
        SENDER,
        "-t",
        recipient,
        f"127.0.0.1:{port}",
    ]


def run_smtp_source(
    tool: str, *, port: int, connections: int, messages: int, message_file: Path, recipient: str, timeout: float
) -> LoadRun:
    argv = smtp_source_command(
        tool, port=port, connections=connections, messages=messages, message_file=message_file, recipient=recipient
    )
    cpu_before = _children_cpu()
    started = time.perf_counter()
    failure = ""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            failure = f"timed out after {timeout:.0f} s"
    elapsed = time.perf_counter() - started
    if not failure and proc.returncode != 0:
        lines = output.decode(errors="replace").strip().splitlines()
        failure = f"smtp-source exited {proc.returncode}: {lines[-1] if lines else ''}"[:200]
    return LoadRun(
        client="smtp-source",
        command=shlex.join(argv),
        messages=messages,
        connections=connections,
        elapsed=elapsed,
        client_cpu=_children_cpu() - cpu_before,
        failure=failure,
    )


class _SmtpReplyError(Exception):
    pass


async def _reply(reader: asyncio.StreamReader, expect: bytes) -> None:
    while True:
        line = await reader.readline()
        if not line:
            raise _SmtpReplyError("connection closed")
        if line[3:4] != b"-":
            break
    if not line.startswith(expect):
        raise _SmtpReplyError(line.decode(errors="replace").strip())


async def _session(
    port: int, *, payload: bytes, recipient: str, remaining: list[int], auth: tuple[str, str] | None = None
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await _reply(reader, b"220")
        writer.write(b"EHLO load.test\r\n")
        await _reply(reader, b"250")
        if auth is not None:
            # Once per connection, as an application's mail library does.
            credentials = base64.b64encode(f"\0{auth[0]}\0{auth[1]}".encode()).decode()
            writer.write(f"AUTH PLAIN {credentials}\r\n".encode())
            await _reply(reader, b"235")
        envelope = [f"MAIL FROM:<{SENDER}>\r\n".encode(), f"RCPT TO:<{recipient}>\r\n".encode(), b"DATA\r\n"]
        while remaining[0] > 0:
            remaining[0] -= 1
            for command, expect in zip(envelope, (b"250", b"250", b"354"), strict=True):
                writer.write(command)
                await _reply(reader, expect)
            writer.write(payload)
            await _reply(reader, b"250")
        writer.write(b"QUIT\r\n")
        await _reply(reader, b"221")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _python_load(
    port: int, *, connections: int, messages: int, message: bytes, recipient: str, auth: tuple[str, str] | None
) -> str:
    """Empty when every message got its 250, else the first failure."""
    payload = (b"\r\n" + message).replace(b"\r\n.", b"\r\n..")[2:] + b".\r\n"
    remaining = [messages]
    failures: list[str] = []
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(connections):
                group.create_task(_session(port, payload=payload, recipient=recipient, remaining=remaining, auth=auth))
    except* (_SmtpReplyError, OSError) as errors:
        failures.append(f"client error: {errors.exceptions[0]}"[:200])
    return failures[0] if failures else ""


def run_python_client(
    *,
    port: int,
    connections: int,
    messages: int,
    message: bytes,
    recipient: str,
    timeout: float,
    auth: tuple[str, str] | None = None,
) -> LoadRun:
    """The Python client, on uvloop when available, in this (the bench's) process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    coro = _python_load(
        port, connections=connections, messages=messages, message=message, recipient=recipient, auth=auth
    )
    try:
        failure = _run(asyncio.wait_for(coro, timeout))
    except TimeoutError:
        failure = f"timed out after {timeout:.0f} s"
    elapsed = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return LoadRun(
        client="python-asyncio",
        command=f"(built-in Python client: {connections} connections, {messages} messages"
        + (", AUTH PLAIN once per connection)" if auth else ")"),
        messages=messages,
        connections=connections,
        elapsed=elapsed,
        client_cpu=usage.ru_utime + usage.ru_stime - cpu_before,
        failure=failure,
    )


def _run(coro: Coroutine[Any, Any, str]) -> str:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(coro)
    return uvloop.run(coro)
