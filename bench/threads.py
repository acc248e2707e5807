"""Where a message's server CPU goes, thread by thread, and what it writes: `python -m bench.threads`.

One `inboxd serve` as `make run` starts it (SQLite), 200 unmeasured mails, then `--messages`
4 KB mails over 32 connections with smtp-source; the server is read from /proc before the load
and once it is idle again (so the indexer's work counts): each thread's user and system CPU and
context switches (the main thread, then the others by the CPU they spent: the SQLite writer,
then the indexer's worker), and the process's I/O counters per message (`wchar`: bytes handed to write
calls, `syscw`: write calls; sockets, the log, the WAL and checkpoints alike). The write calls
do not depend on the machine's load, so two builds compare on them exactly; the CPU does, so
repeat and alternate (`--rounds`). `--python`/`--src` pick a build as `bench compare` does
(`--python ~/.cache/inboxd-bench/COMMIT/bin/python` with no `--src` for a kept commit).

    .venv/bin/python -m bench.threads [--rounds 3] [--messages 6000] [--python PY] [--src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.goals import settle
from bench.message import build_message, write_for_smtp_source
from bench.servers import Build, Inboxd, Mailbox
from bench.smtpload import run_smtp_source

CONNECTIONS = 32
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ThreadCpu:
    name: str
    user: float
    system: float
    voluntary: int
    involuntary: int


def threads_of(pid: int) -> dict[int, ThreadCpu]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(task.name)] = ThreadCpu(
            name=name,
            user=int(fields[11]) / TICK,
            system=int(fields[12]) / TICK,
            voluntary=int(status["voluntary_ctxt_switches"]),
            involuntary=int(status["nonvoluntary_ctxt_switches"]),
        )
    return out


def io_of(pid: int) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())}


@contextlib.contextmanager
def warmed_up(build: Build, *, smtp_source: str, workdir: Path) -> Iterator[tuple[Inboxd, Path, Mailbox]]:
    """A server of `build` as `make run` starts it (SQLite), 200 unmeasured mails sent and the
    server idle again; with the bench's 4 KB mail written for smtp-source and a fresh mailbox for
    the measured load. Stopped on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = Inboxd(backend="sqlite", workdir=workdir, pg_url="", defaults=True, build=build)
    message_file = write_for_smtp_source(
        build_message(4096, sender="bench-sender@example.test", recipient="bench@inboxd.localhost"), workdir / "msg.eml"
    )
    try:
        server.start()
        warmup = server.create_mailbox("warmup@inboxd.localhost")
        run_smtp_source(
            smtp_source, port=server.smtp_port, connections=8, messages=200, message_file=message_file,
            recipient=warmup.address, timeout=300,
        )  # fmt: skip
        settle(server.pid)
        yield server, message_file, server.create_mailbox("bench@inboxd.localhost")
    finally:
        server.stop()


def one_round(build: Build, *, messages: int, smtp_source: str, workdir: Path) -> dict[str, float]:
    with warmed_up(build, smtp_source=smtp_source, workdir=workdir) as (server, message_file, mailbox):
        threads, io = threads_of(server.pid), io_of(server.pid)
        run = run_smtp_source(
            smtp_source, port=server.smtp_port, connections=CONNECTIONS, messages=messages,
            message_file=message_file, recipient=mailbox.address, timeout=600,
        )  # fmt: skip
        if run.failure:
            raise SystemExit(f"the load failed: {run.failure}")
        settle(server.pid)
        after, io_after = threads_of(server.pid), io_of(server.pid)
    figures: dict[str, float] = {"msg/s": messages / run.elapsed}
    spent: list[tuple[float, str, ThreadCpu, ThreadCpu]] = []
    for tid, now in after.items():
        then = threads.get(tid, ThreadCpu(now.name, 0, 0, 0, 0))
        cpu = (now.user - then.user) + (now.system - then.system)
        spent.append((cpu, "main" if tid == server.pid else "", now, then))
    # /proc names every thread of a Python process after the interpreter, so the others are told
    # apart by what they spent: in inboxd the busiest is the SQLite writer, the next the indexer's
    # worker (docs/performance.md).
    others = sorted((item for item in spent if item[1] != "main"), key=lambda item: -item[0])
    labelled = [item for item in spent if item[1] == "main"] + [
        (cpu, f"thread {n + 2}" if n < 2 else "other threads", now, then)
        for n, (cpu, _, now, then) in enumerate(others)
    ]
    total = 0.0
    for cpu, label, now, then in labelled:
        total += cpu
        for key, value in (
            ("user", now.user - then.user),
            ("system", now.system - then.system),
            ("switches", now.voluntary - then.voluntary + now.involuntary - then.involuntary),
        ):
            figures[f"{label} {key}"] = figures.get(f"{label} {key}", 0.0) + value
    figures["msg per CPU-second"] = messages / total if total else float("nan")
    for key in ("wchar", "syscw", "syscr"):
        figures[f"{key} per message"] = (io_after[key] - io[key]) / messages
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--python", default=sys.executable, help="the build's interpreter")
    parser.add_argument("--src", default=None, help="put this source tree first on the path (the working tree's src)")
    args = parser.parse_args(argv)
    smtp_source = shutil.which("smtp-source") or "/usr/sbin/smtp-source"
    if not Path(smtp_source).exists():
        print("smtp-source not found: apt-get install -y postfix", file=sys.stderr)
        return 2
    build = Build(python=args.python, pythonpath=args.src if args.src is not None else "")
    rounds = []
    with tempfile.TemporaryDirectory(prefix="inboxd-threads-") as scratch:
        for n in range(args.rounds):
            rounds.append(
                one_round(build, messages=args.messages, smtp_source=smtp_source, workdir=Path(scratch) / str(n))
            )
    print(f"{args.messages:,} mails of 4 KB over {CONNECTIONS} connections, {args.rounds} rounds (median, min-max)")
    print(f"build: {args.python}" + (f", PYTHONPATH={args.src}" if args.src else ""))
    for key in sorted({k for r in rounds for k in r}, key=lambda k: (k.split(" ")[0] != "msg/s", k)):
        values = [r.get(key, 0.0) for r in rounds]
        print(f"  {key:32s} {statistics.median(values):10,.2f}   ({min(values):,.2f}-{max(values):,.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
