"""Idle cost of waits: CPU and memory of `inboxd serve` holding 1,000 open `…/messages/wait`.

One `python -m inboxd serve` child process (SQLite, its own data dir). The bench creates
`--mailboxes` mailboxes, opens `--waits` HTTP connections spread over them, each a
`GET /api/accounts/{id}/messages/wait?subject=…&timeout=60` that nothing will match, and then
reads the server's CPU time (user + system, from /proc) over `--idle` seconds of silence. It
then sends one matching mail to one mailbox and reports how long its waits took to answer,
checks every other wait is still open, and closes them all.

    .venv/bin/python -m bench.waits [--waits 1000] [--mailboxes 100] [--idle 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.ws_latency import DOMAIN, Server, Smtp, start_server, stop_server


async def open_wait(
    port: int, token: str, mailbox_id: str, subject: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /api/accounts/{mailbox_id}/messages/wait?subject={subject}&timeout=60 HTTP/1.1\r\n"
        f"Host: bench\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    await writer.drain()
    return reader, writer


async def status_of(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    return int(line.split()[1])


async def settle(server: Server, *, limit: float = 60.0) -> None:
    """Until the server's CPU use stops moving: the open requests are all parked."""
    deadline = time.monotonic() + limit
    last = server.cpu_seconds()
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = server.cpu_seconds()
        if now - last < 0.02:
            return
        last = now


async def silent(reader: asyncio.StreamReader) -> bool:
    """True when the server has sent nothing on this connection (its wait is still open)."""
    try:
        await asyncio.wait_for(reader.read(1), 0.5)
    except TimeoutError:
        return True
    return False


async def run(server: Server, args: argparse.Namespace) -> None:
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
        boxes = []
        for i in range(args.mailboxes):
            created = await http.post(
                "/api/accounts", json={"address": f"wait{i}@{DOMAIN}", "password": "benchpass1"}, headers=auth
            )
            created.raise_for_status()
            boxes.append(created.json())
    rss_before = server.rss_kib()
    conns = [
        await open_wait(server.http_port, server.token, boxes[i % len(boxes)]["id"], "never") for i in range(args.waits)
    ]
    await settle(server)  # every request read, answered by its first query and parked
    rss_after = server.rss_kib()
    cpu_start, wall_start = server.cpu_seconds(), time.monotonic()
    await asyncio.sleep(args.idle)
    cpu_used, wall = server.cpu_seconds() - cpu_start, time.monotonic() - wall_start
    # One mailbox gets mail its waits match: they answer, the rest stay open.
    target = boxes[0]
    matching = [
        await open_wait(server.http_port, server.token, target["id"], "wakeup")
        for _ in range(max(1, args.waits // args.mailboxes))
    ]
    await asyncio.sleep(1)
    smtp = await Smtp.open(server.smtp_port)
    _, got_250 = await smtp.send(target["address"], "wakeup")
    statuses = await asyncio.gather(*(status_of(r) for r, _ in matching))
    answered = time.perf_counter() - got_250
    still_open = sum(await asyncio.gather(*(silent(r) for r, _ in conns)))
    for _, writer in conns + matching:
        writer.close()
    print()
    print(f"inboxd idle waits (server pid {server.proc.pid}, {os.cpu_count()} CPUs, SQLite)")
    print(f"  {args.waits} open waits over {args.mailboxes} mailboxes, {args.idle:.0f} s idle")
    print(f"  server CPU while idle: {cpu_used:.3f} s over {wall:.1f} s = {100 * cpu_used / wall:.2f} % of one core")
    print(f"  resident memory: +{(rss_after - rss_before) / max(1, args.waits):.1f} KiB per open wait")
    print(
        f"  one matching mail: {len(statuses)} waits answered {sorted(set(statuses))} "
        f"within {answered * 1000:.1f} ms of the 250; {still_open}/{args.waits} others still open"
    )
    print("  command: .venv/bin/python -m bench.waits " + " ".join(sys.argv[1:]))


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="inboxd-bench-waits-") as scratch:
        server = await start_server(Path(scratch))
        try:
            await run(server, args)
        finally:
            await stop_server(server)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waits", type=int, default=1000)
    parser.add_argument("--mailboxes", type=int, default=100)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle measured")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
