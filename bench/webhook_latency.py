"""Delay from the SMTP `250` to the webhook POST arriving at the receiver.

inboxd runs in this process (on uvloop, as `inboxd serve` does); the HTTPS receiver runs in a
child process (aiohttp, trustme certificate), so it takes no time from inboxd's event loop. One
SMTP client sends the messages one after another; for each it notes the moment `sendmail`
returned (the 250 to DATA was read), the receiver notes the moment each POST arrived, both on
the system-wide monotonic clock, and the messages are matched by subject.

It also sends the same number of messages, in alternating blocks, to a mailbox of a user with no
webhook, to show what the deliveries cost SMTP ingest (messages per second with and without).

    python -m bench.webhook_latency                       # SQLite in a temporary directory
    python -m bench.webhook_latency --messages 500
    python -m bench.webhook_latency --database-url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import os
import shlex
import smtplib
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path

import httpx

from inboxd.app import Inboxd
from inboxd.config import Settings


def _receiver(conn: multiprocessing.connection.Connection, directory: str) -> None:
    """Child process: an HTTPS receiver that reports (subject, arrival time) per POST."""
    import trustme
    from aiohttp import web

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_path = Path(directory) / "bench-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    arrivals: list[tuple[str, float]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        arrivals.append((json.loads(body)["data"]["subject"], time.monotonic()))
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/hook", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        conn.send((int(runner.addresses[0][1]), str(ca_path)))
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "report":
                conn.send((list(arrivals), time.process_time()))
                arrivals.clear()
            elif command == "stop":
                break
        await runner.cleanup()

    asyncio.run(main())


def _send_all(port: int, address: str, subjects: list[str]) -> tuple[dict[str, float], float]:
    """Send one message per subject over one SMTP connection; when each 250 was read."""
    accepted: dict[str, float] = {}
    started = time.monotonic()
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        for subject in subjects:
            msg = EmailMessage()
            msg["From"] = "Bench <bench@example.org>"
            msg["To"] = address
            msg["Subject"] = subject
            msg.set_content("A short body, as a verification mail would have. Your code is 123456.")
            client.sendmail("bench@example.org", [address], msg.as_bytes(policy=SMTP))
            accepted[subject] = time.monotonic()
    return accepted, time.monotonic() - started


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


async def _mailbox(http: httpx.AsyncClient, address: str, token: str) -> str:
    response = await http.post(
        "/api/accounts",
        json={"address": address, "password": "secret123"},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()
    created: str = response.json()["address"]
    return created


async def _arrivals(
    conn: multiprocessing.connection.Connection, count: int, deadline: float
) -> tuple[dict[str, float], float]:
    """The POSTs that arrived (subject: time), once `count` did; and the receiver's CPU seconds so far."""
    found: dict[str, float] = {}
    cpu = 0.0
    while time.monotonic() < deadline:
        conn.send("report")
        arrivals, cpu = await asyncio.to_thread(conn.recv)
        found.update(dict(arrivals))
        if len(found) >= count:
            break
        await asyncio.sleep(0.01)
    return found, cpu


async def run(args: argparse.Namespace) -> None:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        parent, child = context.Pipe()
        receiver = context.Process(target=_receiver, args=(child, directory), daemon=True)
        receiver.start()
        port, ca_path = parent.recv()
        settings = Settings(
            data_dir=Path(directory) / "data",
            database_url=args.database_url,
            database_schema=f"bench_{uuid.uuid4().hex[:8]}" if args.database_url else "",
            http_port=0,
            smtp_port=0,
            submission_port=0,
            webhook_ca_file=ca_path,
            webhook_allow_private=True,
            log_level="warning",
        )
        server = Inboxd(settings)
        await server.start()
        try:
            token = server.bootstrap_token
            assert token is not None
            auth = {"Authorization": f"Bearer {token}"}
            plain_user = await server.services.users.create_user("plain@example.org", plan="pro")
            plain_token = (await server.services.users.create_token(plain_user, "bench")).value
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
                box = await _mailbox(http, "hooked@inboxd.localhost", token)
                plain_box = await _mailbox(http, "plain@inboxd.localhost", plain_token)
                hook = (
                    await http.post(
                        "/api/user/webhooks",
                        json={"url": f"https://127.0.0.1:{port}/hook", "events": ["email.received"]},
                        headers=auth,
                    )
                ).json()
                warm = [f"warm {i}" for i in range(args.warmup)]
                await asyncio.to_thread(_send_all, server.smtp_port, box, warm)
                await asyncio.to_thread(_send_all, server.smtp_port, plain_box, warm)
                await _arrivals(parent, len(warm), time.monotonic() + 30)
                # Alternate blocks to a mailbox without a webhook and one with, so both see the same
                # machine load; the latency is taken on the hooked blocks.
                # CPU of this process (inboxd and the SMTP client) per block, a hooked block counted
                # until its last POST arrived: the difference is what delivering costs inboxd.
                n = args.messages
                accepted: dict[str, float] = {}
                arrived: dict[str, float] = {}
                plain_seconds = hooked_seconds = plain_cpu = hooked_cpu = receiver_cpu = 0.0
                subjects: list[str] = []
                for r in range(args.rounds):
                    block = [f"timed {r} {i}" for i in range(n // args.rounds)]
                    cpu = time.process_time()
                    _, seconds = await asyncio.to_thread(
                        _send_all, server.smtp_port, plain_box, [f"plain {s}" for s in block]
                    )
                    plain_seconds += seconds
                    plain_cpu += time.process_time() - cpu
                    _, receiver_before = await _arrivals(parent, 0, time.monotonic() + 30)
                    cpu = time.process_time()
                    times, seconds = await asyncio.to_thread(_send_all, server.smtp_port, box, block)
                    hooked_seconds += seconds
                    found, receiver_after = await _arrivals(parent, len(block), time.monotonic() + 60)
                    hooked_cpu += time.process_time() - cpu
                    receiver_cpu += receiver_after - receiver_before
                    accepted.update(times)
                    arrived.update(found)
                    subjects += block
                n = len(subjects)
                logged = (await http.get(f"/api/user/webhooks/{hook['id']}/deliveries", headers=auth)).json()
        finally:
            await server.stop()
            parent.send("stop")
            receiver.join(10)
            if args.database_url:
                await _drop_schema(args.database_url, settings.database_schema)
    delays = [(arrived[s] - accepted[s]) * 1000 for s in subjects if s in arrived]
    backend = "PostgreSQL" if args.database_url else "SQLite"
    print(f"webhook latency, SMTP 250 -> POST arrival ({backend}, {len(delays)}/{n} delivered, sequential sends):")
    print(
        f"  p50 {_percentile(delays, 50):.2f} ms   p90 {_percentile(delays, 90):.2f} ms   "
        f"p99 {_percentile(delays, 99):.2f} ms   max {max(delays):.2f} ms   mean {statistics.fmean(delays):.2f} ms"
    )
    print(
        f"SMTP ingest, one client, alternating blocks: {n / plain_seconds:.0f} msg/s to a mailbox without a "
        f"webhook, {n / hooked_seconds:.0f} msg/s to one with a webhook"
    )
    print(
        f"CPU per message in the inboxd process: {plain_cpu / n * 1000:.2f} ms without a webhook, "
        f"{hooked_cpu / n * 1000:.2f} ms with one; the receiver (same machine) used {receiver_cpu / n * 1000:.2f} ms "
        "per POST"
    )
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
    failed = [d for d in logged["deliveries"] if d["error"] is not None]
    print(f"deliveries log: newest {len(logged['deliveries'])} shown, {len(failed)} failed")
    print("reproduce: " + shlex.join([sys.executable, "-m", "bench.webhook_latency", *sys.argv[1:]]))


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4, help="alternating blocks with and without a webhook")
    parser.add_argument("--database-url", default="", help="postgresql://… (default: SQLite in a temporary directory)")
    args = parser.parse_args()
    import uvloop  # ships with uvicorn[standard]; `inboxd serve` runs on it too

    uvloop.run(run(args))


if __name__ == "__main__":
    main()
