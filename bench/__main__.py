"""`python -m bench goals|ingest|api|all|profile|compare`: inboxd's figures beside MailDev's, or
the working tree's beside a commit's (`compare`), measured in one run.

Every server is a separate OS process on 127.0.0.1, every load is bounded in count and time,
and every process the benchmark starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import api, compare, goals, hotspots, ingest, report, submission
from bench.rig import INBOXD_POSTGRES, INBOXD_SQLITE, LABELS, MAILDEV, TARGETS, Rig
from bench.servers import BenchError, cpu_model
from bench.tools import INSTALL_LOAD_TOOLS, INSTALL_PY_SPY, Tools, find_tools

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_MAILDEV = "/work/shared/peers/maildev"


def _csv_ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _csv_targets(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [t for t in chosen if t not in TARGETS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    return chosen


def parse_args(argv: list[str]) -> argparse.Namespace:
    load = argparse.ArgumentParser(add_help=False)
    load.add_argument("--client", choices=["auto", "smtp-source", "python"], default="auto", help="SMTP load client")
    load.add_argument("--load-timeout", type=float, default=120.0, help="seconds before a load run is cut off")
    load.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, data)")
    common = argparse.ArgumentParser(add_help=False, parents=[load])
    common.add_argument("--targets", type=_csv_targets, default=TARGETS, help=f"comma-separated: {', '.join(TARGETS)}")
    common.add_argument("--pg-url", default=os.environ.get("INBOXD_BENCH_PG_URL", DEFAULT_PG_URL))
    common.add_argument("--maildev", type=Path, default=Path(os.environ.get("INBOXD_BENCH_MAILDEV", DEFAULT_MAILDEV)))

    ingest_opts = argparse.ArgumentParser(add_help=False)
    ingest_opts.add_argument("--connections", type=_csv_ints, default=(1, 8, 32))
    ingest_opts.add_argument("--messages", type=int, default=5000, help="messages per ingest run")

    submission_opts = argparse.ArgumentParser(add_help=False)
    submission_opts.add_argument(
        "--submission-connections", type=_csv_ints, default=submission.DEFAULT_CONNECTIONS, help="sandbox runs"
    )
    submission_opts.add_argument("--submission-messages", type=int, default=2000, help="messages per sandbox run")

    api_opts = argparse.ArgumentParser(add_help=False)
    api_opts.add_argument("--fill", type=int, default=10000, help="messages in the mailbox")
    api_opts.add_argument("--http-connections", type=int, default=16)
    api_opts.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ingest", parents=[common, ingest_opts], help="SMTP ingest messages/s")
    sub.add_parser("api", parents=[common, api_opts], help="list-page and single-message requests/s")
    sub.add_parser("submission", parents=[common, submission_opts], help="SMTP sandbox submission messages/s")
    sub.add_parser("all", parents=[common, ingest_opts, submission_opts, api_opts], help="ingest, submission, api")
    goal = sub.add_parser("goals", parents=[common], help="the performance goals, repeated (make bench)")
    goal.add_argument("--repeats", type=int, default=3)
    goal.add_argument("--messages", type=int, default=5000, help="messages per ingest run")
    goal.add_argument("--fill", type=int, default=10000, help="messages in the mailbox for the API reads")
    goal.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")
    goal.add_argument("--heavy", type=int, default=100_000, help="messages before the memory-after-load figure")
    goal.add_argument(
        "--scale", type=int, default=1_000_000, help="messages for the list-at-scale figure (0: not measured)"
    )
    guard = sub.add_parser(
        "compare",
        parents=[load],
        help="the working tree against a commit: ingest, list, message, idle memory, and their ratios",
    )
    guard.add_argument("ref", help="the commit to compare against, e.g. the base of the change (origin/main)")
    guard.add_argument("--repeats", type=int, default=3, help="rounds (each measures both builds)")
    guard.add_argument("--messages", type=int, default=6000, help="messages per ingest run")
    guard.add_argument("--fill", type=int, default=10000, help="messages in the mailbox for the reads")
    guard.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")
    guard.add_argument(
        "--keep-venv",
        action="store_true",
        help="keep REF's virtual environment in --venv-cache for the next run (one is reused whenever found)",
    )
    guard.add_argument("--venv-cache", type=Path, default=compare.DEFAULT_CACHE, help="where kept environments live")
    guard.add_argument(
        "--backend",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="where ingest and the reads store (postgres: --pg-url); idle memory is always SQLite's",
    )
    guard.add_argument("--pg-url", default=os.environ.get("INBOXD_BENCH_PG_URL", DEFAULT_PG_URL))
    profile = sub.add_parser("profile", parents=[common], help="py-spy profile of inboxd under SMTP load")
    profile.add_argument("--workload", choices=["ingest", "list"], default="ingest")
    profile.add_argument("--connections", type=int, default=32, help="SMTP or HTTP connections")
    profile.add_argument("--messages", type=int, default=20000, help="messages sent (ingest) or in the mailbox (list)")
    profile.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    profile.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL (Python CPU)")
    return parser.parse_args(argv)


def _postgres_reachable(url: str) -> str:
    """Empty when PostgreSQL answers, else why not."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3):
            return ""
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {url} ({str(exc).strip().splitlines()[0]}); try `make services`"


def _available(targets: tuple[str, ...], args: argparse.Namespace) -> tuple[tuple[str, ...], list[str]]:
    chosen, notes = [], []
    for target in targets:
        reason = ""
        if target == INBOXD_POSTGRES:
            reason = _postgres_reachable(args.pg_url)
        elif target == MAILDEV and not os.access(args.maildev, os.X_OK):
            reason = f"{args.maildev} not found (it runs npm maildev@2.2.1; set INBOXD_BENCH_MAILDEV)"
        elif target == MAILDEV and shutil.which("npm") is None:
            reason = "npm not found (MailDev is maildev@2.2.1 from npm)"
        if reason:
            notes.append(f"{LABELS[target]} skipped: {reason}")
        else:
            chosen.append(target)
    return tuple(chosen), notes


def _client(args: argparse.Namespace, tools: Tools) -> str:
    if args.client == "auto":
        return "smtp-source" if tools.smtp_source else "python"
    if args.client == "smtp-source" and tools.smtp_source is None:
        sys.exit(f"smtp-source not found; install it with: {INSTALL_LOAD_TOOLS}")
    return str(args.client)


def _machine() -> str:
    model = cpu_model()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    load = os.getloadavg()[0]
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs ({model or platform.machine()}); "
        f"Python {platform.python_version()}; inboxd commit {commit.stdout.strip() or '?'}\n"
        f"  load average at start: {load:.2f} (other processes share these cores: compare figures within one run)"
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    tools = find_tools()
    client = _client(args, tools)
    if args.command == "compare":
        return _compare(args, tools, client)
    print(f"inboxd benchmark: {_machine()}")
    for hint in tools.missing_hints():
        print(f"  {hint}")
    print(f"  SMTP load client: {client}" + ("" if client == "smtp-source" else " (smtp-source is lighter on CPU)"))
    print(flush=True)
    targets, notes = _available(args.targets, args)
    workdir = Path(tempfile.mkdtemp(prefix="inboxd-bench-"))
    rig = Rig(
        tools=tools,
        workdir=workdir,
        pg_url=args.pg_url,
        maildev_script=args.maildev,
        client=client,
        load_timeout=args.load_timeout,
    )
    started = time.monotonic()
    failed = False
    try:
        if args.command == "profile":
            return _profile(rig, args)
        if args.command == "goals":
            text, held = goals.run(
                rig,
                repeats=args.repeats,
                messages=args.messages,
                fill=args.fill,
                duration=args.duration,
                heavy=args.heavy,
                scale=args.scale,
            )
            print(text)
            print(f"\nbenchmark took {time.monotonic() - started:.0f} s")
            print(
                f"reproduce: python -m bench goals --repeats {args.repeats} --messages {args.messages} "
                f"--fill {args.fill} --duration {args.duration:g} --heavy {args.heavy} --scale {args.scale}"
            )
            return 0 if held else 1
        ingest_figures: list[ingest.IngestFigure] = []
        api_figures: list[api.ApiFigure] = []
        if args.command in ("ingest", "all"):
            for target in targets:
                result = ingest.safe_measure(rig, target=target, connections=args.connections, messages=args.messages)
                if isinstance(result, str):
                    notes.append(result)
                else:
                    ingest_figures += result
            print(report.ingest(ingest_figures, notes), end="\n\n", flush=True)
            failed |= any(not f.ok for f in ingest_figures if f.target != MAILDEV)
        if args.command in ("submission", "all"):
            sandbox_figures: list[ingest.IngestFigure] = []
            sandbox_notes = [n for n in notes if args.command == "submission"]
            for target in targets:
                found = submission.safe_measure(
                    rig, target=target, connections=args.submission_connections, messages=args.submission_messages
                )
                if isinstance(found, str):
                    sandbox_notes.append(found)
                else:
                    sandbox_figures += found
            print(report.ingest(sandbox_figures, sandbox_notes, title=submission.TITLE), end="\n\n", flush=True)
            failed |= any(not f.ok for f in sandbox_figures if f.target != MAILDEV)
        if args.command in ("api", "all"):
            api_notes = [n for n in notes if args.command == "api"]
            if tools.wrk is None:
                api_notes.append(f"wrk not found: the HTTP figures need it. Install: {INSTALL_LOAD_TOOLS}")
                failed = True
            else:
                for target in targets:
                    api_figures += api.measure(
                        rig, target=target, fill=args.fill, connections=args.http_connections, duration=args.duration
                    )
            print(report.api(api_figures, connections=args.http_connections, notes=api_notes), end="\n\n")
            failed |= any(not f.ok for f in api_figures if f.target != MAILDEV)
        if INBOXD_SQLITE in targets:
            print(report.targets(ingest_figures, api_figures))
        print(f"\nbenchmark took {time.monotonic() - started:.0f} s")
        return 1 if failed else 0
    finally:
        if args.keep or args.command == "profile":
            print(f"scratch directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _compare(args: argparse.Namespace, tools: Tools, client: str) -> int:
    if tools.wrk is None:
        print(f"wrk not found: the list and message figures need it. Install: {INSTALL_LOAD_TOOLS}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="inboxd-compare-"))
    rig = Rig(
        tools=tools,
        workdir=workdir,
        pg_url=args.pg_url,
        maildev_script=Path(DEFAULT_MAILDEV),
        client=client,
        load_timeout=args.load_timeout,
    )
    try:
        held = compare.run(
            rig,
            ref=args.ref,
            repeats=args.repeats,
            messages=args.messages,
            fill=args.fill,
            duration=args.duration,
            cache=args.venv_cache,
            keep_venv=args.keep_venv,
            backend=args.backend,
        )
        return 0 if held else 1
    except BenchError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print(f"scratch directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _profile(rig: Rig, args: argparse.Namespace) -> int:
    if rig.tools.py_spy is None:
        print(f"py-spy not found: {INSTALL_PY_SPY}")
        return 1
    result = hotspots.measure(
        rig,
        workload=args.workload,
        connections=args.connections,
        messages=args.messages,
        backend=args.backend,
        gil=args.gil,
    )
    print(report.profile(result, workload=args.workload, backend=args.backend, connections=args.connections))
    return 1 if result.failure else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
