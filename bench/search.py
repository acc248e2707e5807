"""Search latency over 100,000 messages: `GET …/messages?q=…` (and the other filters), per back end.

A `python -m inboxd serve` child process runs on fresh storage. This process writes `--messages`
varied messages (a Zipf-distributed vocabulary, with planted words of known frequency) into one
mailbox through the store, as ingest does, and the server's background indexer takes them into
the search index; the fill ends when every message is indexed. Then each query is sent `--runs`
times, one at a time, over HTTP; the figures are the client's round trips (median, 10th/90th
percentile, min, max).

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
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import sqlalchemy as sa

from bench.ws_latency import _LISTENING
from inboxd.config import Settings
from inboxd.mail.message_walk import parse_summary
from inboxd.model import MessageSummary
from inboxd.services.rawcodec import compress
from inboxd.store import message_ingest as message_store
from inboxd.store.connect import open_database
from inboxd.store.schema import messages
from inboxd.store.sql import Statement

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
    ("q: 1% word, page 2", {"q": "tangerine", "page": "2"}),
    ("subject substring", {"subject": "verification"}),
    ("from substring, unread", {"from": "shop17", "unread": "true"}),
    ("to substring", {"to": "team"}),
    ("has_attachments", {"has_attachments": "true"}),
    ("q + subject + unread", {"q": "tangerine", "subject": "invoice", "unread": "true"}),
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


async def fill(settings: Settings, mailbox_id: str, count: int) -> None:
    """Store `count` messages straight through the store (as ingest would, `indexed = 0`), while
    the running server's indexer takes them in; returns once every one is indexed."""
    rng = random.Random(1)
    words = vocabulary(rng)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    db = await open_database(settings)
    try:
        started = time.monotonic()
        base = time.time() - count
        for first in range(0, count, 1000):
            batch = []
            for n in range(first, min(first + 1000, count)):
                raw = make_message(rng, words, weights, n)
                summary = parse_summary(raw)
                message_id = str(uuid.uuid4())
                batch.append(
                    message_store.NewMessage(
                        summary=MessageSummary(
                            id=message_id,
                            mailbox_id=mailbox_id,
                            sender="bench@example.com",
                            from_=summary.from_,
                            subject=summary.subject,
                            preview_text=summary.preview_text,
                            size=len(raw),
                            is_read=False,
                            created_at=base + n,
                            expires_at=base + n + 86400 * 365,
                        ),
                        raw_compressed=compress(raw),
                        source_id=message_id,
                    )
                )
            await db.write(partial(message_store.insert_many, items=batch))
        stored = time.monotonic() - started
        unindexed = Statement(lambda: sa.select(sa.func.count()).select_from(messages).where(messages.c.indexed == 0))
        while await db.read(lambda tx: tx.fetchval(unindexed)):
            await asyncio.sleep(0.5)
        indexed = time.monotonic() - started
        print(
            f"  stored {count} messages in {stored:.1f} s; the server's indexer had them all after {indexed:.1f} s "
            f"({count / indexed:.0f} messages/s while storing and indexing together)"
        )
    finally:
        await db.close()


async def serve(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, int, str]:
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
                port = int(found.group(1))
            elif line.startswith("ibx_"):
                return proc, port, line.strip()


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
            hits = "0"
            for _ in range(3):  # warm: statement caches, pages in the OS cache
                answer = await http.get(url, params=params, headers=headers)
                # 422: a filter no index answers read its bound (INBOXD_FILTER_SCAN_ROWS) of rows.
                if answer.status_code != 422:
                    answer.raise_for_status()
                hits = f"{len(answer.json()['messages']):2d}" if answer.status_code == 200 else "422 bound,"
            samples = []
            for _ in range(runs):
                begun = time.perf_counter()
                answer = await http.get(url, params=params, headers=headers)
                samples.append((time.perf_counter() - begun) * 1000)
                assert answer.status_code in (200, 422)
            print(f"  {label:30s} {hits} items  {describe(samples)}")


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
        proc, port, token = await serve(env)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                created = await http.post(
                    "/api/accounts",
                    json={"address": ADDRESS, "password": "benchpass1"},
                    headers={"Authorization": f"Bearer {token}"},
                )
                created.raise_for_status()
                mailbox_id = created.json()["id"]
            await fill(Settings(**overrides), mailbox_id, args.messages)
            if backend == "postgres":
                with psycopg.connect(args.pg_url, autocommit=True, options=f"-csearch_path={schema}") as conn:
                    conn.execute("ANALYZE")  # what autovacuum does after a bulk load, without waiting for it
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
