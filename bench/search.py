"""Search latency over 100,000 messages: `GET …/messages?q=…` (and the other filters), per back end.

The fill runs in this process: an `Inboxd` on fresh storage takes `--messages` varied messages
(a Zipf-distributed vocabulary, with planted words of known frequency) through its ingest
service, and its background indexer takes them into the search index; the fill waits until
every message is indexed. Then a `python -m inboxd serve` child process opens the same storage
and each query is sent `--runs` times, one at a time, over HTTP; the figures are the client's
round trips (median, 10th/90th percentile, min, max).

    .venv/bin/python -m bench.search [--messages 100000] [--runs 50] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.ws_latency import _LISTENING
from inboxd.app import Inboxd
from inboxd.config import Settings

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
ADDRESS = "search@inboxd.localhost"
# Planted words: (word, share of messages carrying it).
PLANTED = (("kumquat", 0.0001), ("tangerine", 0.01), ("apricot", 0.3))
QUERIES: list[tuple[str, dict[str, str]]] = [
    ("no filter (page 1)", {}),
    ("q: rare word (~10 hits)", {"q": "kumquat"}),
    ("q: 1% word (~1,000 hits)", {"q": "tangerine"}),
    ("q: 30% word (~30,000 hits)", {"q": "apricot"}),
    ("q: prefix apri*", {"q": "apri*"}),
    ("q: two words (AND)", {"q": "apricot tangerine"}),
    ("q: no hit", {"q": "nosuchword"}),
    ("q: rare word, page 2", {"q": "tangerine", "page": "2"}),
    ("subject substring", {"subject": "verification"}),
    ("from substring, unread", {"from": "shop17", "unread": "true"}),
    ("to + has_attachments", {"to": "team", "has_attachments": "true"}),
]


def vocabulary(rng: random.Random, size: int = 20000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qui", "dro", "fen", "gar", "hul"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def make_message(rng: random.Random, words: list[str], weights: list[float], n: int) -> bytes:
    body = rng.choices(words, weights=weights, k=50)
    for word, share in PLANTED:
        if rng.random() < share:
            body.insert(rng.randrange(len(body)), word)
    kind = n % 4
    subject = ("Your verification code", "Weekly digest", "Invoice", "Meeting notes")[kind]
    headers = (
        f"From: Shop {n % 50} <shop{n % 50}@example.com>\r\nTo: {'Team <team@example.test>' if kind == 3 else ADDRESS}"
        f"\r\nSubject: {subject} {n}\r\nMessage-ID: <{n}@bench>\r\n"
    )
    text = " ".join(body)
    if kind == 2:
        return (
            headers + 'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n'
            "Content-Type: text/plain\r\n\r\n" + text + "\r\n--b\r\nContent-Type: application/pdf\r\n"
            'Content-Disposition: attachment; filename="invoice.pdf"\r\n\r\n%PDF-1.4\r\n--b--\r\n'
        ).encode()
    return (headers + "Content-Type: text/plain; charset=utf-8\r\n\r\n" + text + "\r\n").encode()


async def fill(settings: Settings, count: int) -> tuple[str, str]:
    """Returns (API token, mailbox id) once every message is stored and indexed."""
    rng = random.Random(1)
    words = vocabulary(rng)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    server = Inboxd(settings)
    await server.start()
    try:
        services = server.services
        token = server.bootstrap_token
        assert token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
            created = await http.post(
                "/api/accounts",
                json={"address": ADDRESS, "password": "benchpass1"},
                headers={"Authorization": f"Bearer {token}"},
            )
            created.raise_for_status()
            mailbox_id = created.json()["id"]
        recipient = await services.ingest.resolve(ADDRESS)
        started = time.monotonic()
        queue = iter(range(count))

        async def feeder() -> None:
            for n in queue:
                raw = make_message(rng, words, weights, n)
                await services.ingest.deliver(sender="bench@example.com", recipients=[recipient], raw=raw)

        await asyncio.gather(*(feeder() for _ in range(64)))
        stored = time.monotonic() - started
        db = server._db  # the benchmark reads the indexer queue length directly
        assert db is not None
        while True:
            left = await db.read(lambda tx: tx.fetchval("SELECT count(*) FROM messages WHERE indexed = 0"))
            if not left:
                break
            await asyncio.sleep(0.5)
        indexed = time.monotonic() - started
        print(f"  filled {count} messages in {stored:.1f} s; all indexed after {indexed:.1f} s")
        return token, mailbox_id
    finally:
        await server.stop()


async def serve(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inboxd",
        "serve",
        env={**os.environ, "INBOXD_HTTP_PORT": "0", "INBOXD_SMTP_PORT": "0", "INBOXD_LOG_LEVEL": "warning", **env},
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("inboxd exited during start-up")
            found = _LISTENING.search(line)
            if found:
                return proc, int(found.group(1))


def describe(samples: list[float]) -> str:
    ordered = sorted(samples)
    deciles = statistics.quantiles(ordered, n=10)
    return (
        f"median {statistics.median(ordered):6.2f} ms  p10 {deciles[0]:6.2f}  p90 {deciles[-1]:6.2f}  "
        f"min {ordered[0]:6.2f}  max {ordered[-1]:6.2f}"
    )


async def measure(port: int, token: str, mailbox_id: str, runs: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        for label, params in QUERIES:
            url = f"/api/accounts/{mailbox_id}/messages"
            hits = 0
            for _ in range(3):  # warm: statement caches, pages in the OS cache
                answer = await http.get(url, params=params, headers=headers)
                answer.raise_for_status()
                hits = len(answer.json()["messages"])
            samples = []
            for _ in range(runs):
                begun = time.perf_counter()
                answer = await http.get(url, params=params, headers=headers)
                samples.append((time.perf_counter() - begun) * 1000)
                assert answer.status_code == 200
            print(f"  {label:30s} {hits:2d} items  {describe(samples)}")


async def bench_backend(backend: str, args: argparse.Namespace, scratch: Path) -> None:
    data_dir = scratch / backend
    env = {"INBOXD_DATA_DIR": str(data_dir), "INBOXD_PRO_RPS": "1000000", "INBOXD_PRO_OPS_LIMIT": "1000000000"}
    overrides: dict[str, Any] = {"data_dir": data_dir, "http_port": 0, "smtp_port": 0}
    schema = ""
    if backend == "postgres":
        schema = f"bench_search_{uuid.uuid4().hex[:8]}"
        overrides.update(database_url=args.pg_url, database_schema=schema)
        env.update(INBOXD_DATABASE_URL=args.pg_url, INBOXD_DATABASE_SCHEMA=schema)
    print(f"\n{backend}:")
    try:
        token, mailbox_id = await fill(Settings(**overrides), args.messages)
        if backend == "postgres":
            with psycopg.connect(args.pg_url, autocommit=True, options=f"-csearch_path={schema}") as conn:
                conn.execute("ANALYZE")  # what autovacuum does after a bulk load, without waiting for it
        proc, port = await serve(env)
        try:
            await measure(port, token, mailbox_id, args.runs)
        finally:
            proc.terminate()
            await proc.wait()
    finally:
        if schema:
            with psycopg.connect(args.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def main(args: argparse.Namespace) -> None:
    print(f"inboxd search latency, {args.messages} messages in one mailbox, {os.cpu_count()} CPUs")
    print(f"  command: .venv/bin/python -m bench.search {' '.join(sys.argv[1:])}".rstrip())
    with tempfile.TemporaryDirectory(prefix="inboxd-bench-search-") as scratch:
        for backend in args.backends:
            await bench_backend(backend, args, Path(scratch))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=50, help="requests per query")
    parser.add_argument("--backends", type=lambda s: [b for b in s.split(",") if b], default=["sqlite", "postgres"])
    parser.add_argument("--pg-url", default=os.environ.get("INBOXD_BENCH_PG_URL", DEFAULT_PG_URL))
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
