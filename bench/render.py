"""`python -m bench.render`: rendered images (`GET …/render.png`, issue 28) under load.

Starts `inboxd serve` on SQLite, stores `--messages` HTML newsletters, then measures:
- the latency of a message-list request (`GET …/messages`) with the server idle, and again while
  `--concurrency` clients ask for renders without pause (each a width the cache has not seen), so
  a render that blocked the event loop would show as list latency (issue 28's bar: p99 within 2x
  of idle);
- renders per second during that load;
- the resident memory of the server and its Chromium processes after each of `--rounds` rounds,
  which must level off rather than grow with the number of renders.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import smtplib
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from bench.checks import newsletter
from bench.servers import HOST, Inboxd


def tree_rss_mb(pid: int) -> float:
    """The memory of a process and all its descendants (Chromium's), by PSS: shared pages counted
    once across the processes that share them, as RSS would not."""
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a renderer that ended meanwhile
            total += process.memory_full_info().pss
    return total / (1024 * 1024)


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def list_latencies(url: str, token: str, *, stop: threading.Event, limit: int) -> list[float]:
    """Sequential list requests until `stop` is set or `limit` are done; each one's seconds."""
    samples: list[float] = []
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while not stop.is_set() and len(samples) < limit:
            started = time.perf_counter()
            http.get(url).raise_for_status()
            samples.append(time.perf_counter() - started)
    return samples


async def render_load(
    base: str, token: str, ids: list[str], *, concurrency: int, seconds: float, offset: int
) -> tuple[int, int]:
    """`concurrency` clients rendering without pause for `seconds`; (renders done, failures)."""
    done = failed = 0
    deadline = time.perf_counter() + seconds
    counter = offset

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal done, failed, counter
        while time.perf_counter() < deadline:
            counter += 1
            # A width and message the cache has not seen in this run: every request is a render.
            width = 320 + counter % 1281
            message_id = ids[(counter // 1281) % len(ids)]
            response = await http.get(f"{base}/{message_id}/render.png", params={"width": width})
            if response.status_code == 200:
                done += 1
            else:
                failed += 1

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return done, failed


def _watch(url: str, token: str, stop: threading.Event, into: list[float]) -> None:
    into.extend(list_latencies(url, token, stop=stop, limit=10**9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-requests", type=int, default=400)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="inboxd-bench-render-") as workdir:
        server = Inboxd(backend="sqlite", workdir=Path(workdir), pg_url="")
        server.start()
        try:
            box = server.create_mailbox("render@inboxd.localhost")
            html = newsletter()
            with smtplib.SMTP(HOST, server.smtp_port, timeout=60) as smtp:
                for n in range(args.messages):
                    smtp.sendmail(
                        "news@example.org", [box.address], html.replace(b"Subject: ", f"Subject: {n} ".encode(), 1)
                    )
            list_url = server.messages_url(box)
            ids = [m["id"] for m in server.page(box, 1)]
            base = list_url
            auth = {"Authorization": f"Bearer {server.token}"}
            httpx.get(f"{base}/{ids[0]}/render.png", headers=auth, timeout=120).raise_for_status()  # Chromium up

            idle = list_latencies(list_url, server.token, stop=threading.Event(), limit=args.idle_requests)
            print(
                f"list, idle: p50 {statistics.median(idle) * 1000:.2f} ms, p99 {percentile(idle, 0.99) * 1000:.2f} ms"
            )
            print(f"memory before load: {tree_rss_mb(server.pid):.0f} MB (server and Chromium)")
            for round_ in range(args.rounds):
                stop = threading.Event()
                busy: list[float] = []
                watcher = threading.Thread(target=_watch, args=(list_url, server.token, stop, busy))
                watcher.start()
                started = time.perf_counter()
                done, failed = asyncio.run(
                    render_load(
                        base,
                        server.token,
                        ids,
                        concurrency=args.concurrency,
                        seconds=args.seconds,
                        offset=round_ * 100_000,
                    )
                )
                elapsed = time.perf_counter() - started
                stop.set()
                watcher.join()
                p99 = percentile(busy, 0.99)
                print(
                    f"round {round_ + 1}: {done / elapsed:.1f} renders/s ({done} in {elapsed:.1f} s, {failed} failed, "
                    f"{args.concurrency} clients); list p50 {statistics.median(busy) * 1000:.2f} ms, "
                    f"p99 {p99 * 1000:.2f} ms ({p99 / percentile(idle, 0.99):.2f}x idle); "
                    f"memory {tree_rss_mb(server.pid):.0f} MB"
                )
        finally:
            server.stop()
    print(
        f"python -m bench.render --messages {args.messages} --concurrency {args.concurrency} "
        f"--seconds {args.seconds:g} --rounds {args.rounds}"
    )


if __name__ == "__main__":
    main()
