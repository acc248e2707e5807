"""Printing the figures: one table per measurement, each row with the command that reproduces it."""

from __future__ import annotations

from collections.abc import Sequence

from bench.api import ApiFigure
from bench.hotspots import Profile
from bench.ingest import IngestFigure
from bench.rig import INBOXD_SQLITE, LABELS, MESSAGE_SIZE

INGEST_TARGET = 1000.0  # msg/s at 32 connections
LIST_TARGET = 2000.0  # list requests/s at 16 connections


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"


def _pct(cpu: float, elapsed: float) -> str:
    return f"{100 * cpu / elapsed:.0f}%" if elapsed else "-"


def ingest(figures: Sequence[IngestFigure], notes: Sequence[str] = (), *, title: Sequence[str] = ()) -> str:
    out = [
        *(
            title
            or (
                f"SMTP ingest: {MESSAGE_SIZE}-byte message, persistent connections, one transaction at a time "
                "per connection",
                "(inboxd answers 250 after its commit; MailDev keeps mail in memory and unsynced temp files).",
            )
        ),
        "CPU 100% = one core.",
        "",
    ]
    rows = []
    for i, f in enumerate(figures, 1):
        rate = _rate(f.rate) if f.ok else ("crashed" if f.failure.startswith("crashed") else "failed")
        rows.append(
            [
                f"[{i}] {LABELS[f.target]}",
                str(f.connections),
                f"{f.sent:,}",
                f"{f.stored:,}",
                f"{f.elapsed:.2f}",
                rate,
                _pct(f.server_cpu, f.elapsed),
                _pct(f.client_cpu, f.elapsed),
                f.client,
            ]
        )
    header = ["target", "conns", "sent", "stored", "seconds", "msg/s", "server CPU", "client CPU", "client"]
    out += _table(header, rows)
    out.append("")
    for i, f in enumerate(figures, 1):
        out.append(f"[{i}] {f.bench_command}")
        out.append(f"    load: {f.load_command}")
        if f.failure:
            out.append(f"    NOTE: {f.failure}")
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


def api(figures: Sequence[ApiFigure], *, connections: int, notes: Sequence[str] = ()) -> str:
    out = [f"HTTP reads: wrk, 1 thread, {connections} connections, keep-alive", ""]
    rows = []
    for i, f in enumerate(figures, 1):
        r = f.result
        rows.append(
            [
                f"[{i}] {LABELS[f.target]}",
                f.request,
                _rate(r.rps) if r and f.ok else ("crashed" if f.failure.startswith("crashed") else "failed"),
                f"{r.p50_ms:.1f}" if r else "-",
                f"{r.p99_ms:.1f}" if r else "-",
                f"{r.errors}" if r else "-",
                f"{f.server_rss_mb:.0f}" if f.server_rss_mb else "-",
            ]
        )
    out += _table(["target", "request", "req/s", "p50 ms", "p99 ms", "errors", "server RSS MB"], rows)
    out.append("")
    for i, f in enumerate(figures, 1):
        out.append(f"[{i}] {f.bench_command}")
        if f.result:
            out.append(f"    load: {f.result.command}  ({f.path})")
            if f.result.failure:
                out.append(f"    NOTE: {f.result.failure}")
        if f.failure:
            out.append(f"    NOTE: {f.failure}")
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


def targets(ingest_figures: Sequence[IngestFigure], api_figures: Sequence[ApiFigure]) -> str:
    out = ["Targets (inboxd on SQLite):"]
    at32 = [f for f in ingest_figures if f.target == INBOXD_SQLITE and f.connections == 32 and f.ok]
    if at32:
        rate = at32[0].rate
        verdict = "met" if rate >= INGEST_TARGET else "NOT met"
        out.append(f"  ingest at 32 connections >= {INGEST_TARGET:,.0f} msg/s: {rate:,.0f} msg/s -> {verdict}")
    else:
        out.append("  ingest at 32 connections: not measured in this run")
    lists = [f for f in api_figures if f.target == INBOXD_SQLITE and f.request.startswith("list page") and f.ok]
    if lists and lists[0].result:
        rps = lists[0].result.rps
        verdict = "met" if rps >= LIST_TARGET else "NOT met"
        out.append(f"  list page at 16 connections >= {LIST_TARGET:,.0f} req/s: {rps:,.0f} req/s -> {verdict}")
    else:
        out.append("  list page at 16 connections: not measured in this run")
    return "\n".join(out)


def profile(p: Profile, *, workload: str, backend: str, connections: int, top: int = 25) -> str:
    what = "SMTP ingest" if workload == "ingest" else "GET list page (wrk)"
    unit = "msg/s" if workload == "ingest" else "req/s"
    store = "SQLite" if backend == "sqlite" else "PostgreSQL"
    out = [f"Profile: inboxd ({store}), {what} at {connections} connections, sampled by py-spy", ""]
    if p.failure:
        out.append(f"NOTE: {p.failure}")
    out.append(
        f"{p.rate:,.0f} {unit} while sampled (py-spy slows the server a little); server CPU "
        f"{_pct(p.server_cpu, p.elapsed)}; {p.samples:,} samples"
    )
    out += ["", "threads (share of samples, seconds sampled active):"]
    out += [f"  {100 * s.share:5.1f}%  {s.share * p.samples / p.rate_hz:6.1f} s  {s.function}" for s in p.threads]
    for title, spots in (("self time", p.self_time), ("inclusive", p.inclusive)):
        out += ["", title + ":"]
        out += [f"  {100 * s.share:5.1f}%  {s.function}" for s in spots[:top]]
    out += ["", f"reproduce: {p.command}"]
    if p.raw:
        out.append(f"collapsed stacks (for flamegraph.pl or speedscope): {p.raw}")
    return "\n".join(out)
