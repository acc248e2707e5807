"""Where inboxd spends its time under SMTP load: py-spy samples the server process during an
ingest run and the stacks are folded into self and inclusive time per function.

Self time is the share of samples whose innermost frame is the function; inclusive time the
share of samples that have the function anywhere on the stack. Samples are counted per thread,
so the event loop and the SQLite writer each add their own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.httpload import run_wrk
from bench.rig import Rig
from bench.servers import Inboxd, Mailbox, cpu_seconds

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True, slots=True)
class Hotspot:
    function: str
    share: float


@dataclass(frozen=True, slots=True)
class Profile:
    samples: int
    self_time: list[Hotspot]
    inclusive: list[Hotspot]
    threads: list[Hotspot]
    rate: float
    server_cpu: float
    elapsed: float
    command: str
    raw: Path | None
    rate_hz: int = 250
    failure: str = ""


def _short(frame: str) -> str:
    """`func (path/to/module.py:12)` → `func (module.py)`, line numbers dropped so lines merge."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match.group('func')} ({path})"


def _thread_name(label: str) -> str:
    """`thread (123): sqlite-read_2` → `sqlite-read` (a pool's threads counted together)."""
    name = label.split(": ", 1)[-1]
    return re.sub(r"_\d+$", "", name)


def fold(collapsed: str, *, top: int = 25) -> tuple[int, list[Hotspot], list[Hotspot], list[Hotspot]]:
    """Totals from py-spy's raw (collapsed) output: `thread;frame;frame count` lines."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread, frames = frames[0], [_short(f) for f in frames[1:]]
        total += count
        threads[_thread_name(thread)] += count
        if frames:
            self_counts[frames[-1]] += count
            for name in set(frames):
                inclusive[name] += count

    def ranked(counter: Counter[str]) -> list[Hotspot]:
        return [Hotspot(name, n / total) for name, n in counter.most_common(top)] if total else []

    return total, ranked(self_counts), ranked(inclusive), ranked(threads)


def measure(
    rig: Rig,
    *,
    workload: str,
    connections: int,
    messages: int,
    backend: str = "sqlite",
    gil: bool = False,
    rate_hz: int = 250,
) -> Profile:
    """Sample inboxd during an SMTP ingest run (`ingest`) or a wrk run on a list page (`list`)."""
    assert rig.tools.py_spy is not None
    server = Inboxd(backend=backend, workdir=rig.workdir, pg_url=rig.pg_url)
    raw = rig.workdir / f"profile-{workload}-{backend}.txt"
    try:
        server.start()
        mailbox = server.create_mailbox("bench@inboxd.localhost")
        if workload == "list":
            rig.send(port=server.smtp_port, recipient=mailbox.address, connections=32, messages=messages)
        record = [rig.tools.py_spy, "record", "--pid", str(server.pid), "--rate", str(rate_hz), "--threads"]
        record += ["--nonblocking", "--format", "raw", "--output", str(raw), *(["--gil"] if gil else [])]
        with subprocess.Popen(
            record, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        ) as spy:
            time.sleep(1.0)  # py-spy attaches
            cpu_before = cpu_seconds(server.pid)
            done, elapsed, failure = _load(rig, server, mailbox, workload=workload, connections=connections, n=messages)
            server_cpu = cpu_seconds(server.pid) - cpu_before
            os.kill(spy.pid, signal.SIGINT)
            try:
                output, _ = spy.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                output, _ = spy.communicate()
        gil_flag = " --gil" if gil else ""
        command = (
            f"python -m bench profile --workload {workload} --connections {connections} --messages {messages}"
            f"{gil_flag}{' --backend postgres' if backend == 'postgres' else ''}{rig.client_flag()}"
            f"   (py-spy record --pid PID --rate {rate_hz} --threads --nonblocking --format raw{gil_flag})"
        )
        if not raw.exists():
            text = output.decode(errors="replace").strip()
            return Profile(0, [], [], [], 0.0, 0.0, 0.0, command, None, failure=f"py-spy wrote nothing: {text[-300:]}")
        total, self_time, inclusive, threads = fold(raw.read_text())
        return Profile(
            samples=total,
            self_time=self_time,
            inclusive=inclusive,
            threads=threads,
            rate=done / elapsed if elapsed else 0.0,
            server_cpu=server_cpu,
            elapsed=elapsed,
            command=command,
            raw=raw,
            rate_hz=rate_hz,
            failure=failure,
        )
    finally:
        server.stop()


def _load(
    rig: Rig, server: Inboxd, mailbox: Mailbox, *, workload: str, connections: int, n: int
) -> tuple[int, float, str]:
    """(operations done, seconds, failure) of the sampled load."""
    if workload == "list":
        assert rig.tools.wrk is not None
        result = run_wrk(
            rig.tools.wrk, server.messages_url(mailbox), connections=connections, duration=10, token=server.token
        )
        return result.requests, 10.0, result.failure or (f"{result.errors} errors" if result.errors else "")
    run = rig.send(port=server.smtp_port, recipient=mailbox.address, connections=connections, messages=n)
    stored = server.count(mailbox)
    return n, run.elapsed, run.failure or ("" if stored == n else f"{n} sent, {stored} stored")
