"""Where the server's threads wait for the GIL during ingest: `python -m bench.handovers`.

One `inboxd serve` as `make run` starts it (SQLite), 200 unmeasured mails, then `--messages` 4 KB
mails over 32 connections, while `perf record -e sched:sched_switch --call-graph dwarf` records
every time one of its threads leaves a CPU, with the stack it left from. A thread that lets go of
the GIL (for a system call, a SQLite statement, a compression) while another waits for it hands it
over, and then waits to take it back: those waits show as switches out of `take_gil`, named here
after the call that let go (docs/performance.md, "The writer's hand-overs"). Every other switch is
counted by what it waited on (a queue, the disk, epoll) or as preempted. The counts depend on
timing, so repeat them; they need Linux `perf` (Debian's `linux-perf`) allowed to trace the
server (`/proc/sys/kernel/perf_event_paranoid` at most 2 for one's own processes, or root).

    .venv/bin/python -m bench.handovers [--messages 3000] [--python PY --src DIR] [--top 8]
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.goals import settle
from bench.servers import Build
from bench.smtpload import run_smtp_source
from bench.threads import CONNECTIONS, warmed_up

_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(?P<symbol>\S+?)(?:\+0x[0-9a-f]+)?\s+\(")
# The frames between a GIL wait and the call that let go of the GIL: the interpreter's own.
_GIL_PLUMBING = ("take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "_PyEval", "PyGILState_Ensure")


def classify(stack: list[str]) -> str:
    """What a switch out of a CPU, with its stack innermost first, was waiting for."""
    if "take_gil" in stack:
        after = [f for f in stack[stack.index("take_gil") + 1 :] if not f.startswith(_GIL_PLUMBING)]
        return "GIL, after " + (after[0] if after else "?")
    for marker, name in (
        ("fdatasync", "the disk (fdatasync)"),
        ("epoll_pwait", "epoll (idle)"),
        ("epoll_wait", "epoll (idle)"),
        ("_queue_SimpleQueue_get_impl", "a queue"),
        ("time_sleep", "a sleep"),
        ("lock_PyThread_acquire_lock", "a lock"),
    ):
        if any(marker in frame for frame in stack):
            return name
    if any(f in ("exit_to_user_mode_loop", "irqentry_exit_to_user_mode") for f in stack):
        return "preempted"
    return "other"


def tally(script: str) -> dict[str, Counter[str]]:
    """`perf script` text of sched_switch events → per thread id, the switches by `classify`."""
    threads: dict[str, Counter[str]] = {}
    for event in script.split("\n\n"):
        lines = event.strip().splitlines()
        if not lines or "sched:sched_switch" not in lines[0]:
            continue
        thread = lines[0].split()[1]
        stack = [m.group("symbol") for line in lines[1:] if (m := _FRAME.match(line))]
        threads.setdefault(thread, Counter())[classify(stack)] += 1
    return threads


def record(build: Build, *, messages: int, workdir: Path) -> tuple[int, dict[str, Counter[str]], float]:
    """Run the load under perf; (the server's pid, the switches by thread, msg/s)."""
    smtp_source = shutil.which("smtp-source") or "/usr/sbin/smtp-source"
    data = workdir / "perf.data"
    with warmed_up(build, smtp_source=smtp_source, workdir=workdir) as (server, mail, mailbox):
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-e", "sched:sched_switch", "--call-graph", "dwarf,32768",
             "-p", str(server.pid), "-o", str(data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # perf attaches
        try:
            run = run_smtp_source(
                smtp_source, port=server.smtp_port, connections=CONNECTIONS, messages=messages,
                message_file=mail, recipient=mailbox.address, timeout=600,
            )  # fmt: skip
            settle(server.pid)
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=120)
        if run.failure:
            raise SystemExit(f"the load failed: {run.failure}")
        pid = server.pid
    script = subprocess.run(
        ["perf", "script", "-i", str(data)], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    return pid, tally(script), messages / run.elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--python", default=sys.executable, help="the build's interpreter")
    parser.add_argument("--src", default=None, help="put this source tree first on the path (the working tree's src)")
    parser.add_argument("--top", type=int, default=8, help="causes shown per thread")
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        print("perf not found: apt-get install -y linux-perf", file=sys.stderr)
        return 2
    build = Build(python=args.python, pythonpath=args.src if args.src is not None else "")
    with tempfile.TemporaryDirectory(prefix="inboxd-handovers-") as scratch:
        pid, threads, rate = record(build, messages=args.messages, workdir=Path(scratch))
    print(f"{args.messages:,} mails of 4 KB over {CONNECTIONS} connections at {rate:,.0f} msg/s; switches per message")
    print(f"build: {args.python}" + (f", PYTHONPATH={args.src}" if args.src else ""))
    # The main thread's id is the process's; the others by how often they switched.
    order = sorted(threads, key=lambda t: (t != str(pid), -sum(threads[t].values())))
    for n, thread in enumerate(order):
        counts = threads[thread]
        name = "main thread (event loop)" if thread == str(pid) else f"thread {n + 1}"
        print(f"  {name}: {sum(counts.values()) / args.messages:.2f}")
        for cause, count in counts.most_common(args.top):
            print(f"    {count / args.messages:6.2f}  {cause}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
