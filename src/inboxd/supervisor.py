"""`inboxd serve --workers N`: N worker processes on the same HTTP and SMTP ports.

The supervisor migrates the database once, starts worker 0 (which bootstraps a new database and
runs the retention sweep) and, once it answers, the others; each worker is a plain
`python -m inboxd serve` that binds its listeners with SO_REUSEPORT, so the kernel spreads
connections across them. A worker that dies is started again after a pause that doubles from 1 s
up to 30 s while it keeps dying (and starts over once it ran for a minute). SIGTERM or SIGINT
passes SIGTERM to every worker, which stops as a single server does (SMTP transactions under way
finish or get 421; nothing acknowledged is lost), and waits for them.

Events (WebSocket pushes, waits) and request limits are shared through Redis
(`INBOXD_REDIS_URL`); without it each worker has its own, which the supervisor says at start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from inboxd.config import Settings
from inboxd.store import migrate

RESTART_FIRST = 1.0
RESTART_MAX = 30.0
HEALTHY_AFTER = 60.0  # a worker that ran this long restarts without the accumulated pause
STOP_GRACE = 30.0


class SupervisorError(RuntimeError):
    """`--workers` cannot run here (no SO_REUSEPORT, or a port of 0 that workers cannot share)."""


@dataclass
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    pause: float = RESTART_FIRST
    due: float = 0.0  # when a dead worker is started again
    restarts: int = field(default=0)


def _say(text: str) -> None:
    print(f"inboxd supervisor: {text}", file=sys.stderr, flush=True)


def check(settings: Settings) -> None:
    if not hasattr(socket, "SO_REUSEPORT"):
        raise SupervisorError("--workers needs SO_REUSEPORT, which this platform lacks; run one process per port")
    for name in ("http_port", "smtp_port", "submission_port"):
        if getattr(settings, name) == 0:
            raise SupervisorError(f"--workers needs a fixed {name.replace('_', ' ')}, not 0")


def run(settings: Settings, *, env: dict[str, str]) -> int:
    """Supervise `settings.workers` workers until SIGTERM or SIGINT; the exit status."""
    check(settings)
    if not settings.is_postgres:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade_in_child(settings.resolved_database_url, schema=settings.database_schema)
    if not settings.redis_url:
        _say(
            "no INBOXD_REDIS_URL: each worker keeps its own WebSocket events, waits and request "
            "limits (a client sees only mail its own worker accepted live; limits are per worker)"
        )
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    slots = [_Slot(i) for i in range(settings.workers)]
    base = f"http://{settings.http_host}:{settings.http_port}/healthz"
    _start(slots[0], env)
    if not _wait_ready(slots[0], base, stopping):
        _stop_all(slots)
        return 1
    for slot in slots[1:]:
        _start(slot, env)
    _say(
        f"{settings.workers} workers on HTTP {settings.http_host}:{settings.http_port}, SMTP port {settings.smtp_port}"
    )
    while not stopping:
        now = time.monotonic()
        for slot in slots:
            process = slot.process
            if process is not None and process.poll() is not None:
                ran = now - slot.started
                slot.pause = RESTART_FIRST if ran >= HEALTHY_AFTER else min(RESTART_MAX, slot.pause * 2)
                slot.due = now + (0.0 if ran >= HEALTHY_AFTER else slot.pause / 2)
                _say(f"worker {slot.index} (pid {process.pid}) exited with {process.returncode}; restarting")
                slot.process = None
            if slot.process is None and now >= slot.due:
                _start(slot, env)
                slot.restarts += 1
        time.sleep(0.1)
    _stop_all(slots)
    return 0


def _start(slot: _Slot, env: dict[str, str]) -> None:
    worker_env = {**env, "INBOXD_WORKERS": "1", "INBOXD_WORKER_INDEX": str(slot.index), "INBOXD_REUSE_PORT": "true"}
    slot.process = subprocess.Popen([sys.executable, "-m", "inboxd", "serve"], env=worker_env)
    slot.started = time.monotonic()


def _wait_ready(slot: _Slot, url: str, stopping: list[int], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping:
        assert slot.process is not None
        if slot.process.poll() is not None:
            _say(f"worker 0 exited with {slot.process.returncode} before it answered")
            return False
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def _stop_all(slots: list[_Slot]) -> None:
    running = [s.process for s in slots if s.process is not None and s.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for process in running:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def environment(overrides: Mapping[str, object]) -> dict[str, str]:
    """The workers' environment: this one, plus the command line's options as variables."""
    env = dict(os.environ)
    for name, value in overrides.items():
        env[f"INBOXD_{name.upper()}"] = str(value)
    return env
