"""WebSocket push latency and memory: SMTP `250` → `new_email` frame, p50 and p99.

Three runs against one `python -m inboxd serve` child process (SQLite, its own data dir):
  idle      one listening client, probe mails sent one after another;
  1k idle   the same with 1,000 more authenticated clients connected (3 per mailbox);
  ingest    the same while other SMTP sessions deliver ~500 msg/s to the 1,000 clients' mailboxes.
Resident memory per idle connection is the server's VmRSS delta over the 1,000 connections.

Latency is measured in this process, on one clock: from the moment the client reads the `250`
after DATA to the moment the probe's frame is read from the WebSocket. inboxd publishes right
after commit and before it writes the `250`, so a frame may arrive first: such samples count as
0 (the "frame first" share is printed). "DATA → frame" is measured from the end of DATA.

    .venv/bin/python -m bench.ws_latency [--clients 1000] [--samples 300] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

DOMAIN = "inboxd.localhost"
_LISTENING = re.compile(r"HTTP on http://[^:]+:(\d+)\s+SMTP on [^:]+:(\d+)")


@dataclass
class Server:
    proc: asyncio.subprocess.Process
    http_port: int
    smtp_port: int
    token: str

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def start_server(data_dir: Path) -> Server:
    env = {
        **os.environ,
        "INBOXD_DATA_DIR": str(data_dir),
        "INBOXD_HTTP_PORT": "0",
        "INBOXD_SMTP_PORT": "0",
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_LOG_LEVEL": "warning",
        # The benchmark creates hundreds of mailboxes and sends thousands of mails at once.
        "INBOXD_PRO_RPS": "1000000",
        "INBOXD_PRO_CREATE_INTERVAL": "0",
        "INBOXD_PRO_OPS_LIMIT": "1000000000",
        # Its clients and waits all come from one address and one user, a thousand at once.
        "INBOXD_WS_MAX_UNAUTHENTICATED_PER_IP": "100000",
        "INBOXD_WS_MAX_UNAUTHENTICATED": "100000",
        "INBOXD_MAX_WAITS_PER_USER": "100000",
        "INBOXD_MAX_WAITS_PER_MAILBOX": "100000",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "inboxd", "serve", env=env, stdout=asyncio.subprocess.PIPE, stderr=None
    )
    assert proc.stdout is not None
    ports: tuple[int, int] | None = None
    token = ""
    async with asyncio.timeout(60):
        while not token:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("inboxd exited during start-up")
            found = _LISTENING.search(line)
            if found:
                ports = (int(found.group(1)), int(found.group(2)))
            elif ports and line.startswith("ibx_"):
                token = line.strip()
    assert ports is not None
    return Server(proc, ports[0], ports[1], token)


async def stop_server(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(20):
            await server.proc.wait()
    except TimeoutError:
        server.proc.kill()


class Smtp:
    """A minimal SMTP client on asyncio streams: one session, mails sent one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Smtp:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        await client.reply()
        await client.command(b"EHLO bench.local")
        return client

    async def reply(self) -> int:
        while True:
            line = await self.reader.readline()
            if not line:
                raise ConnectionError("SMTP server closed the connection")
            if line[3:4] != b"-":
                return int(line[:3])

    async def command(self, line: bytes) -> int:
        self.writer.write(line + b"\r\n")
        return await self.reply()

    async def send(self, to: str, subject: str) -> tuple[float, float]:
        """Deliver one mail; returns (end of DATA sent, 250 read) on the perf counter."""
        body = (
            f"From: Bench <bench@example.org>\r\nTo: {to}\r\nSubject: {subject}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n\r\nLatency probe {subject}.\r\n"
        ).encode()
        self.writer.write(b"MAIL FROM:<bench@example.org>\r\nRCPT TO:<" + to.encode() + b">\r\nDATA\r\n")
        for expected in (250, 250, 354):
            code = await self.reply()
            if code != expected:
                raise RuntimeError(f"SMTP answered {code}, expected {expected}")
        self.writer.write(body + b".\r\n")
        sent = time.perf_counter()
        code = await self.reply()
        if code != 250:
            raise RuntimeError(f"SMTP answered {code} to DATA")
        return sent, time.perf_counter()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.command(b"QUIT")
        self.writer.close()


@dataclass
class Listener:
    """An authenticated WebSocket that records when each frame's subject arrived."""

    ws: ClientConnection
    seen: dict[str, float] = field(default_factory=dict)
    waiters: dict[str, asyncio.Future[float]] = field(default_factory=dict)
    frames: int = 0
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        with contextlib.suppress(Exception):
            async for message in self.ws:
                now = time.perf_counter()
                self.frames += 1
                subject = json.loads(message).get("subject", "")
                self.seen[subject] = now
                waiter = self.waiters.pop(subject, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(now)

    async def arrival(self, subject: str) -> float:
        if subject in self.seen:
            return self.seen[subject]
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[subject] = future
        return await asyncio.wait_for(future, 10)


async def open_listener(port: int, token: str) -> Listener:
    ws = await connect(f"ws://127.0.0.1:{port}/api/ws", proxy=None, open_timeout=30, compression=None)
    await ws.send(json.dumps({"type": "auth", "token": token}))
    reply = json.loads(await ws.recv())
    if reply != {"type": "auth_ok"}:
        raise RuntimeError(f"auth refused: {reply}")
    listener = Listener(ws)
    listener.task = asyncio.get_running_loop().create_task(listener.run())
    return listener


async def create_mailboxes(server: Server, count: int) -> list[dict[str, Any]]:
    boxes = []
    headers = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        for i in range(count):
            # auth_key instead of password: the benchmark should not time Argon2.
            body = {"address": f"bench{i}@{DOMAIN}", "auth_key": f"{i:064x}"}
            response = await http.post("/api/accounts", json=body, headers=headers)
            response.raise_for_status()
            boxes.append(response.json())
    return boxes


@dataclass
class Samples:
    after_250: list[float] = field(default_factory=list)
    after_data: list[float] = field(default_factory=list)
    frame_first: int = 0


async def probe(listener: Listener, smtp: Smtp, address: str, *, samples: int, label: str) -> Samples:
    result = Samples()
    for i in range(samples):
        subject = f"probe-{label}-{i}"
        sent, acked = await smtp.send(address, subject)
        arrived = await listener.arrival(subject)
        if arrived < acked:
            result.frame_first += 1
        result.after_250.append(max(0.0, arrived - acked))
        result.after_data.append(arrived - sent)
        await asyncio.sleep(0.005)  # a probe every few ms, not back to back
    return result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] * 1000


def report(label: str, s: Samples) -> str:
    return (
        f"{label:<34} 250→frame p50 {pct(s.after_250, 50):6.2f} ms  p99 {pct(s.after_250, 99):6.2f} ms   "
        f"DATA→frame p50 {pct(s.after_data, 50):6.2f} ms  p99 {pct(s.after_data, 99):6.2f} ms   "
        f"frame first {100 * s.frame_first / len(s.after_250):.0f}%"
    )


async def load(port: int, targets: list[str], *, rate: float, sessions: int, stop: asyncio.Event) -> int:
    """Deliver about `rate` mails per second over `sessions` SMTP sessions until `stop`."""
    sent = 0

    async def session(n: int) -> None:
        nonlocal sent
        smtp = await Smtp.open(port)
        interval = sessions / rate
        due = time.perf_counter() + n * interval / sessions
        try:
            while not stop.is_set():
                await smtp.send(random.choice(targets), f"load-{n}-{sent}")
                sent += 1
                due += interval
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
        finally:
            await smtp.close()

    await asyncio.gather(*(session(n) for n in range(sessions)))
    return sent


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="inboxd-bench-") as tmp:
        server = await start_server(Path(tmp))
        try:
            await run(server, args)
        finally:
            await stop_server(server)


async def run(server: Server, args: argparse.Namespace) -> None:
    per_box = 3
    boxes = await create_mailboxes(server, 1 + (args.clients + per_box - 1) // per_box)
    probe_box, crowd = boxes[0], boxes[1:]
    smtp = await Smtp.open(server.smtp_port)
    listener = await open_listener(server.http_port, probe_box["token"])
    await probe(listener, smtp, probe_box["address"], samples=50, label="warmup")
    lines = [
        report("idle (1 client)", await probe(listener, smtp, probe_box["address"], samples=args.samples, label="idle"))
    ]

    await asyncio.sleep(1)
    rss_before = server.rss_kib()
    clients = [await open_listener(server.http_port, crowd[i // per_box]["token"]) for i in range(args.clients)]
    await asyncio.sleep(2)
    rss_after = server.rss_kib()
    per_connection = (rss_after - rss_before) * 1024 / args.clients
    with_crowd = await probe(listener, smtp, probe_box["address"], samples=args.samples, label="crowd")
    lines.append(report(f"{args.clients} idle clients connected", with_crowd))

    stop = asyncio.Event()
    started = time.perf_counter()
    cpu_before, own_before = server.cpu_seconds(), time.process_time()
    loading = asyncio.create_task(
        load(server.smtp_port, [b["address"] for b in crowd], rate=args.rate, sessions=args.sessions, stop=stop)
    )
    await asyncio.sleep(1)  # let the load reach its pace
    under_load = await probe(listener, smtp, probe_box["address"], samples=args.samples, label="load")
    stop.set()
    delivered = await loading
    elapsed = time.perf_counter() - started
    achieved = delivered / elapsed
    server_cpu = (server.cpu_seconds() - cpu_before) / elapsed
    client_cpu = (time.process_time() - own_before) / elapsed
    lines.append(report(f"+ ingest at {achieved:.0f} msg/s", under_load))
    received = sum(c.frames for c in clients)
    alive = sum(1 for c in clients if c.ws.close_code is None)

    print()
    print(f"inboxd WebSocket latency (server pid {server.proc.pid}, {os.cpu_count()} CPUs, SQLite)")
    print(f"  probes per run: {args.samples}; load target {args.rate:.0f} msg/s over {args.sessions} sessions")
    for line in lines:
        print("  " + line)
    print(
        f"  memory: VmRSS {rss_before} KiB → {rss_after} KiB with {args.clients} idle connections: "
        f"{per_connection / 1024:.1f} KiB per connection"
    )
    print(
        f"  CPU during the ingest run: server {100 * server_cpu:.0f}%, this client {100 * client_cpu:.0f}% (of 1 core)"
    )
    print(f"  crowd: {alive}/{args.clients} connections open after the load, {received} frames received")
    print(
        f"  reproduce: .venv/bin/python -m bench.ws_latency --clients {args.clients} --samples {args.samples} "
        f"--rate {args.rate:.0f}"
    )
    for c in clients:
        await c.ws.close()
    await listener.ws.close()
    await smtp.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--sessions", type=int, default=8)
    return parser.parse_args(argv)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(parse_args()))
