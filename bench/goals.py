"""`python -m bench goals` (what `make bench` runs): the performance goals, each measured side by
side with its peer or baseline in the same run, every measure repeated (median and spread).

- SMTP ingest, 4 KB, 32 connections, inboxd in exactly the configuration `make run` starts: msg/s
  and the server's CPU-seconds from /proc (counted until the server is idle again, so work left
  behind, such as search indexing, is included), on SQLite and PostgreSQL, and MailDev.
- List page and one message at 16 connections (wrk), beside a bare Starlette app on the same
  uvicorn setup (`bench/hello.py`). These servers lift inboxd's request-rate limits, or the
  figure would be the limiter's 429s.
- Start to /healthz 200, resident memory idle, and after `--heavy` messages and 10,000 API
  requests (measured once: it is a level, not a rate).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.api import measure_inboxd as measure_api
from bench.httpload import run_wrk
from bench.ingest import measure_maildev
from bench.rig import INBOXD_SQLITE, Rig
from bench.servers import HOST, OWN_BUILD, BenchError, Build, Hello, Inboxd, cpu_seconds, rss_mb, wait_http

CONNECTIONS = 32
HTTP_CONNECTIONS = 16
IDLE_CPU_SHARE = 0.05  # below this share of a core over a quarter second, the server is idle
API_REQUESTS = 10_000


@dataclass
class Series:
    """One measure over the repetitions."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def shown(self) -> str:
        if not self.values:
            return "not measured"
        spread = f" ({num(min(self.values))}–{num(max(self.values))})" if len(self.values) > 1 else ""
        return f"{num(self.median)} {self.unit}{spread}"


def num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def settle(pid: int, *, limit: float = 60.0) -> float:
    """CPU-seconds the server spends until it is idle (work queued behind the load, e.g. indexing)."""
    start = cpu_seconds(pid)
    deadline = time.monotonic() + limit
    last = start
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_seconds(pid)
        if now - last < IDLE_CPU_SHARE * 0.25:
            break
        last = now
    return cpu_seconds(pid) - start


def ingest(
    rig: Rig,
    *,
    backend: str,
    messages: int,
    workers: int = 1,
    build: Build = OWN_BUILD,
) -> tuple[float, float]:
    """(msg/s, msg per server CPU-second) for inboxd as `make run` starts it (plus `--workers`)."""
    server = Inboxd(
        backend=backend, workdir=rig.workdir, pg_url=rig.pg_url, defaults=True, workers=workers, build=build
    )
    try:
        server.start()
        warmup = server.create_mailbox("warmup@inboxd.localhost")
        rig.send(port=server.smtp_port, recipient=warmup.address, connections=8, messages=200)
        settle(server.pid)
        mailbox = server.create_mailbox("bench@inboxd.localhost")
        before = cpu_seconds(server.pid)
        run = rig.send(port=server.smtp_port, recipient=mailbox.address, connections=CONNECTIONS, messages=messages)
        cpu = cpu_seconds(server.pid) - before + settle(server.pid)
        if run.failure:
            raise BenchError(f"ingest ({backend}): {run.failure}")
        stored = server.count(mailbox)
        if stored != messages:
            raise BenchError(f"ingest ({backend}): {messages} sent, {stored} stored")
        return run.messages / run.elapsed, run.messages / cpu
    finally:
        server.stop()


def hello_rps(rig: Rig, *, duration: float) -> float:
    assert rig.tools.wrk is not None
    server = Hello(workdir=rig.workdir)
    try:
        server.start()
        result = run_wrk(rig.tools.wrk, f"{server.base}/", connections=HTTP_CONNECTIONS, duration=duration)
        if result.failure or result.errors:
            raise BenchError(f"hello: {result.failure or f'{result.errors} errors'}")
        return result.rps
    finally:
        server.stop()


def start_seconds(rig: Rig, *, build: Build = OWN_BUILD) -> tuple[float, float, float]:
    """(first start, restart) seconds from exec to /healthz 200, and the idle RSS in MB."""
    server = Inboxd(backend="sqlite", workdir=rig.workdir, pg_url=rig.pg_url, defaults=True, build=build)
    server.data_dir.mkdir(parents=True)
    env = server.environment()
    timings = []
    idle = 0.0
    for _ in range(2):
        started = time.monotonic()
        with server.log.open("wb") as log:
            process = subprocess.Popen(
                build.command("serve"),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_http(f"http://{HOST}:{server.http_port}/healthz", process, server.log, timeout=30)
            timings.append(time.monotonic() - started)
            time.sleep(2.0)
            idle = rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(30)
    return timings[0], timings[1], idle


def memory_after_load(rig: Rig, *, messages: int, duration: float) -> tuple[float, int]:
    """RSS in MB after `messages` arrived and at least 10,000 list requests were answered."""
    assert rig.tools.wrk is not None
    server = Inboxd(backend="sqlite", workdir=rig.workdir, pg_url=rig.pg_url)
    try:
        server.start()
        mailbox = server.create_mailbox("heavy@inboxd.localhost")
        sent = 0
        while sent < messages:  # in rounds, so one slow round does not hit the load timeout
            step = min(20_000, messages - sent)
            run = rig.send(port=server.smtp_port, recipient=mailbox.address, connections=CONNECTIONS, messages=step)
            if run.failure:
                raise BenchError(f"memory fill: {run.failure}")
            sent += step
        settle(server.pid, limit=300.0)
        requests = 0
        while requests < API_REQUESTS:
            result = run_wrk(
                rig.tools.wrk,
                server.messages_url(mailbox),
                connections=HTTP_CONNECTIONS,
                duration=duration,
                token=server.token,
            )
            if result.failure or not result.requests:
                raise BenchError(f"memory requests: {result.failure or 'no answers'}")
            requests += result.requests
        settle(server.pid)
        return rss_mb(server.pid), requests
    finally:
        server.stop()


# Copies of a stored message, older than every real one, added straight into a halted server's
# SQLite file: a million messages through SMTP would take the bench most of an hour. The copies
# are indexed already (the search indexer leaves them alone) and share the message's source.
_COPIES_SQL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :copies),
     t AS (SELECT * FROM messages WHERE mailbox_id = :mailbox ORDER BY created_at LIMIT 1)
INSERT INTO messages (id, mailbox_id, sender, from_header, subject, preview_text, size, is_read,
                      deleted, expired, created_at, expires_at, indexed, source_id, envelope)
SELECT printf('%08x-0000-4000-8000-%012x', n.i, n.i), t.mailbox_id, t.sender, t.from_header,
       t.subject, t.preview_text, t.size, 0, 0, 0, t.created_at - n.i * 0.001, t.expires_at, 1,
       t.source_id, t.envelope
FROM n, t
"""


def _add_copies(data_dir: Path, mailbox_id: str, copies: int) -> int:
    """Add `copies` messages to the mailbox; how many messages it holds then."""
    with contextlib.closing(sqlite3.connect(data_dir / "inboxd.sqlite3")) as conn, conn:
        conn.execute(_COPIES_SQL, {"copies": copies, "mailbox": mailbox_id})
        size, source = conn.execute(
            "SELECT size, source_id FROM messages WHERE mailbox_id = ? ORDER BY created_at LIMIT 1", (mailbox_id,)
        ).fetchone()
        conn.execute("UPDATE message_sources SET refs = refs + ? WHERE id = ?", (copies, source))
        conn.execute("UPDATE mailboxes SET used = used + ? WHERE id = ?", (size * copies, mailbox_id))
        (held,) = conn.execute("SELECT count(*) FROM messages WHERE mailbox_id = ?", (mailbox_id,)).fetchone()
    return int(held)


def list_at_scale(rig: Rig, *, fill: int, scale: int, repeats: int, duration: float) -> tuple[list[float], list[float]]:
    """List-page req/s of a mailbox of `fill` messages and of the same mailbox grown to `scale`
    messages, two servers measured in turn in each round."""
    assert rig.tools.wrk is not None
    small = Inboxd(backend="sqlite", workdir=rig.workdir, pg_url=rig.pg_url)
    large: Inboxd | None = None
    try:
        small.start()
        mailbox = small.create_mailbox("scale@inboxd.localhost")
        run = rig.send(port=small.smtp_port, recipient=mailbox.address, connections=CONNECTIONS, messages=fill)
        if run.failure:
            raise BenchError(f"scale fill: {run.failure}")
        settle(small.pid)
        small.halt()
        large = small.copy()
        held = _add_copies(large.data_dir, mailbox.id, scale - fill)
        if held != scale:
            raise BenchError(f"scale fill: {held} messages instead of {scale}")
        small.start()
        large.start()
        rates: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            for server, into in ((small, rates[0]), (large, rates[1])):
                url, token = server.messages_url(mailbox), server.token
                result = run_wrk(rig.tools.wrk, url, connections=HTTP_CONNECTIONS, duration=duration, token=token)
                if result.failure or result.errors or not result.requests:
                    raise BenchError(f"list at scale: {result.failure or f'{result.errors} errors'}")
                into.append(result.rps)
        return rates
    finally:
        small.stop()
        if large is not None:
            large.stop()


def _ratio(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=False) if y]


def run(
    rig: Rig, *, repeats: int, messages: int, fill: int, duration: float, heavy: int, scale: int
) -> tuple[str, bool]:
    """Measure, and the report with one verdict per goal; False when a measurement failed (a goal
    that is not met is a finding, reported as such, not a failure of the benchmark)."""
    load_start = os.getloadavg()[0]
    sqlite = Series("SMTP ingest 4 KB, 32 connections, inboxd (SQLite)", "msg/s")
    sqlite_cpu = Series("  per server CPU-second", "msg")
    postgres = Series("SMTP ingest, inboxd (PostgreSQL)", "msg/s")
    postgres_cpu = Series("  per server CPU-second", "msg")
    maildev = Series("SMTP ingest, MailDev 2.2.1", "msg/s")
    workers2 = Series("SMTP ingest, inboxd (SQLite) --workers 2", "msg/s")
    workers2_pg = Series("SMTP ingest, inboxd (PostgreSQL) --workers 2", "msg/s")
    listing = Series(f"list page (30 of {fill}), {HTTP_CONNECTIONS} connections", "req/s")
    detail = Series(f"one message, {HTTP_CONNECTIONS} connections", "req/s")
    hello = Series("bare Starlette hello (baseline)", "req/s")
    first_start = Series("start to /healthz 200, new data directory", "s")
    restart = Series("start to /healthz 200, existing data", "s")
    idle = Series("resident memory, idle (default configuration)", "MB")
    notes: list[str] = []

    def attempt(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except BenchError as exc:
            notes.append(f"{what}: {exc}")

    for round_ in range(1, repeats + 1):
        print(f"  round {round_} of {repeats} ...", flush=True)

        def sqlite_ingest() -> None:
            rate, per_cpu = ingest(rig, backend="sqlite", messages=messages)
            sqlite.values.append(rate)
            sqlite_cpu.values.append(per_cpu)

        def postgres_ingest() -> None:
            rate, per_cpu = ingest(rig, backend="postgres", messages=messages)
            postgres.values.append(rate)
            postgres_cpu.values.append(per_cpu)

        def workers_ingest() -> None:
            workers2.values.append(ingest(rig, backend="sqlite", messages=messages, workers=2)[0])

        def workers_pg_ingest() -> None:
            workers2_pg.values.append(ingest(rig, backend="postgres", messages=messages, workers=2)[0])

        def maildev_ingest() -> None:
            [figure] = measure_maildev(rig, connections=(CONNECTIONS,), messages=messages)
            if not figure.ok:
                raise BenchError(figure.failure or "MailDev lost messages")
            maildev.values.append(figure.rate)

        def api_reads() -> None:
            figures = measure_api(rig, target=INBOXD_SQLITE, fill=fill, connections=HTTP_CONNECTIONS, duration=duration)
            for figure in figures:
                if not figure.ok or figure.result is None:
                    raise BenchError(figure.failure or "wrk failed")
            listing.values.append(figures[0].result.rps)  # type: ignore[union-attr]
            detail.values.append(figures[1].result.rps)  # type: ignore[union-attr]
            hello.values.append(hello_rps(rig, duration=duration))

        def starts() -> None:
            first, again, rss = start_seconds(rig)
            first_start.values.append(first)
            restart.values.append(again)
            idle.values.append(rss)

        attempt("inboxd (SQLite) ingest", sqlite_ingest)
        attempt("inboxd (PostgreSQL) ingest", postgres_ingest)
        attempt("inboxd (SQLite) --workers 2 ingest", workers_ingest)
        attempt("inboxd (PostgreSQL) --workers 2 ingest", workers_pg_ingest)
        attempt("MailDev ingest", maildev_ingest)
        attempt("API reads", api_reads)
        attempt("start", starts)

    heavy_rss = Series(f"resident memory after {heavy:,} messages and {API_REQUESTS:,} API requests", "MB")
    if heavy:
        print(f"  memory after {heavy:,} messages ...", flush=True)

        def heavy_load() -> None:
            heavy_rss.values.append(memory_after_load(rig, messages=heavy, duration=duration)[0])

        attempt("memory after load", heavy_load)

    at_fill = Series(f"list page, {fill:,} messages (scale pair)", "req/s")
    at_scale = Series(f"list page, {scale:,} messages (scale pair)", "req/s")
    if scale:
        print(f"  list page at {scale:,} messages ...", flush=True)

        def scale_pair() -> None:
            small, large = list_at_scale(rig, fill=fill, scale=scale, repeats=repeats, duration=duration)
            at_fill.values.extend(small)
            at_scale.values.extend(large)

        attempt("list at scale", scale_pair)

    series = [
        sqlite,
        sqlite_cpu,
        postgres,
        postgres_cpu,
        workers2,
        workers2_pg,
        maildev,
        listing,
        detail,
        hello,
        first_start,
        restart,
        at_fill,
        at_scale,
    ]
    out = [f"Measures ({repeats} rounds; median, then the spread min–max):", ""]
    width = max(len(s.name) for s in [*series, idle, heavy_rss])
    out += [f"  {s.name.ljust(width)}  {s.shown()}" for s in [*series, idle, heavy_rss]]

    goals: list[tuple[str, float, float, str]] = []  # (what, measured, goal, unit)

    def goal(what: str, values: Sequence[float], target: float, *, below: bool = False, unit: str = "") -> None:
        if values:
            goals.append((what, statistics.median(values), target if not below else -target, unit))
        else:
            goals.append((what, float("nan"), target, unit))

    goal("ingest, msg per server CPU-second (SQLite) >= 3,500", sqlite_cpu.values, 3500)
    goal("ingest, inboxd (SQLite) / MailDev >= 1.5", _ratio(sqlite.values, maildev.values), 1.5, unit="x")
    goal("ingest, --workers 2 / one process (SQLite) >= 1.4", _ratio(workers2.values, sqlite.values), 1.4, unit="x")
    goal(
        "ingest, --workers 2 / one process (PostgreSQL) >= 1.4",
        _ratio(workers2_pg.values, postgres.values),
        1.4,
        unit="x",
    )
    goal("ingest, PostgreSQL / SQLite >= 0.70", _ratio(postgres.values, sqlite.values), 0.70, unit="x")
    goal("list page / bare hello >= 0.50", _ratio(listing.values, hello.values), 0.50, unit="x")
    goal("one message / bare hello >= 0.60", _ratio(detail.values, hello.values), 0.60, unit="x")
    goal("resident memory idle < 60 MB", idle.values, 60, below=True, unit="MB")
    goal("resident memory after load < 90 MB", heavy_rss.values, 90, below=True, unit="MB")
    goal("start to /healthz 200 (new data directory) < 1 s", first_start.values, 1.0, below=True, unit="s")

    out += ["", "Goals (each a median over the rounds; a ratio is taken within each round):", ""]
    for what, measured, target, unit in goals:
        if measured != measured:  # NaN: not measured
            out.append(f"  [not measured] {what}")
            continue
        met = measured < -target if target < 0 else measured >= target
        out.append(f"  [{'met' if met else 'NOT met'}] {what}: {num(measured)}{' ' + unit if unit else ''}")
    scale_goal = f"list page at {scale:,} messages / at {fill:,} >= 0.90"
    if at_fill.values and at_scale.values:
        flat = statistics.median(_ratio(at_scale.values, at_fill.values))
        out.append(f"  [{'met' if flat >= 0.90 else 'NOT met'}] {scale_goal}: {num(flat)} x")
    else:
        out.append(f"  [not measured] {scale_goal}")
    load_end = os.getloadavg()[0]
    out += ["", f"load average: {load_start:.2f} at start, {load_end:.2f} at the end; {os.cpu_count()} CPUs"]
    if notes:
        out += ["", "Problems:", *(f"  {n}" for n in notes)]
    return "\n".join(out), not notes
