"""The servers under measurement, each run as its own OS process: inboxd and MailDev.

Every process is started in a session of its own, stopped by its process group id, and waited
for; nothing outlives the benchmark. PostgreSQL runs get a schema of their own, dropped after.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
START_TIMEOUT = 90.0  # the first MailDev start runs `npm install`
STOP_TIMEOUT = 20.0


class BenchError(Exception):
    """A server that would not start or answered wrongly; the message says what happened."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def http_json(method: str, url: str, *, token: str = "", body: object = None, timeout: float = 60.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    # A server in its default configuration limits request rates: a 429 is waited out, not failed.
    for _attempt in range(30):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise BenchError(f"{method} {url} answered {exc.code}: {exc.read()[:300]!r}") from exc
            time.sleep(min(5.0, float(exc.headers.get("Retry-After") or 1)))
    raise BenchError(f"{method} {url} kept answering 429")


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, *, timeout: float) -> None:
    """Until `url` answers 200; a server that exits first, or does not answer in time, fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"{url}: the server exited with {process.returncode}; log tail:\n{tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.01)
    raise BenchError(f"{url} did not answer within {timeout:.0f} s; log tail:\n{tail(log)}")


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, its threads and its live child processes (a supervisor's
    workers) so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(int(child)) for child in children)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_model() -> str:
    """The processor's name from /proc/cpuinfo (empty when it is not there)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@dataclass(frozen=True, slots=True)
class Build:
    """Which inboxd a server runs: an interpreter, and the PYTHONPATH it gets (None: the bench's
    own environment, unchanged). `python -m bench compare` runs a commit's build from a virtual
    environment of its own with an empty PYTHONPATH, and the working tree's with its `src` first."""

    python: str = sys.executable
    pythonpath: str | None = None

    def command(self, *args: str) -> list[str]:
        # -P: the current directory is not put on the path, so an `inboxd` there cannot stand in
        # for the build's own.
        return [self.python, *(["-P"] if self.pythonpath is not None else []), "-m", "inboxd", *args]

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        if self.pythonpath is None:
            return env
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return env


# The bench's own interpreter and environment: what every server ran before `compare`.
OWN_BUILD = Build()


@dataclass(frozen=True, slots=True)
class Mailbox:
    id: str
    address: str


class _ServerProcess:
    """A server under test in its own session (so it is stopped as a process group)."""

    def __init__(self, *, log: Path) -> None:
        self.log = log
        self.http_port = free_port()
        self.smtp_port = free_port()
        self.submission_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _launch(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        """Start the process, logging to `self.log`, and wait until it answers /healthz."""
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        wait_http(f"{self.base}/healthz", self._process, self.log, timeout=START_TIMEOUT)


class Inboxd(_ServerProcess):
    """`python -m inboxd serve` on SQLite (defaults: WAL, synchronous=FULL, group commit) or PostgreSQL."""

    def __init__(
        self,
        *,
        backend: str,
        workdir: Path,
        pg_url: str,
        defaults: bool = False,
        workers: int = 1,
        build: Build = OWN_BUILD,
    ) -> None:
        # `defaults`: exactly the configuration `make run` starts (request-rate limits included).
        self.defaults = defaults
        self.build = build
        self.workers = workers
        self.backend = backend
        self.data_dir = workdir / f"inboxd-{backend}-{uuid.uuid4().hex[:6]}"
        super().__init__(log=self.data_dir.with_suffix(".log"))
        self.pg_url = pg_url
        self.pg_schema = f"bench_{uuid.uuid4().hex[:10]}" if backend == "postgres" else ""
        self.token = ""

    def environment(self) -> dict[str, str]:
        env = {
            **os.environ,
            "INBOXD_DATA_DIR": str(self.data_dir),
            "INBOXD_HTTP_HOST": HOST,
            "INBOXD_HTTP_PORT": str(self.http_port),
            "INBOXD_SMTP_HOST": HOST,
            "INBOXD_SMTP_PORT": str(self.smtp_port),
            "INBOXD_SUBMISSION_HOST": HOST,
            "INBOXD_SUBMISSION_PORT": str(self.submission_port),
        }
        if not self.defaults:
            # The bench user is the bootstrap admin (plan pro); request-rate limits would turn an
            # HTTP throughput figure into a measure of the limiter, so they are lifted here.
            env.update(
                INBOXD_LOG_LEVEL="warning",
                INBOXD_PRO_RPS="1000000",
                INBOXD_PRO_OPS_LIMIT="1000000000",
                INBOXD_PRO_CREATE_INTERVAL="0",
            )
        if self.workers > 1:
            env["INBOXD_WORKERS"] = str(self.workers)
        if self.backend == "postgres":
            env["INBOXD_DATABASE_URL"] = self.pg_url
            env["INBOXD_DATABASE_SCHEMA"] = self.pg_schema
        return self.build.environment(env)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=self.token != "")
        self._launch(self.build.command("serve"), env=self.environment())
        self.token = self.token or (self.data_dir / "bootstrap-token").read_text().strip()

    def halt(self) -> None:
        """Stop the process and keep its data, to `start` it again on the same data."""
        if self._process is not None:
            _stop(self._process)
            self._process = None

    def copy(self) -> Inboxd:
        """A server of its own (other ports and directory) on a copy of this one's halted SQLite
        data, its bootstrap token included."""
        assert self.backend == "sqlite" and self._process is None
        twin = Inboxd(
            backend="sqlite", workdir=self.data_dir.parent, pg_url=self.pg_url, defaults=self.defaults, build=self.build
        )
        shutil.copytree(self.data_dir, twin.data_dir)
        twin.token = self.token
        return twin

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process)
        if self.pg_schema:
            import psycopg

            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.pg_schema}" CASCADE')

    def create_mailbox(self, address: str) -> Mailbox:
        created = http_json(
            "POST", f"{self.base}/api/accounts", token=self.token, body={"address": address, "password": "secret123"}
        )
        return Mailbox(id=created["id"], address=created["address"])

    def messages_url(self, mailbox: Mailbox) -> str:
        return f"{self.base}/api/accounts/{mailbox.id}/messages"

    def page(self, mailbox: Mailbox, page: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = http_json("GET", f"{self.messages_url(mailbox)}?page={page}", token=self.token)[
            "messages"
        ]
        return items

    def count(self, mailbox: Mailbox) -> int:
        return count_pages(lambda n: self.page(mailbox, n))

    def sandbox(self) -> dict[str, Any]:
        """The bench user's SMTP sandbox settings (`GET /api/user/sandbox`)."""
        info: dict[str, Any] = http_json("GET", f"{self.base}/api/user/sandbox", token=self.token)
        return info

    def purge_sandbox(self) -> int:
        """Empty the sandbox; how many messages it held."""
        deleted: int = http_json("DELETE", f"{self.base}/api/user/sandbox/messages", token=self.token)["deleted"]
        return deleted


def count_pages(page: Callable[[int], Sequence[object]]) -> int:
    """Items in a paged list, counted through the pages alone: a search for the last full page."""
    first = page(1)
    if not first or not page(2):
        return len(first)
    per_page = len(first)
    full, empty = 2, 4
    while page(empty):
        full, empty = empty, empty * 2
    while empty - full > 1:
        middle = (full + empty) // 2
        if page(middle):
            full = middle
        else:
            empty = middle
    return (full - 1) * per_page + len(page(full))


class Hello(_ServerProcess):
    """The baseline: a bare Starlette app (bench/hello.py) on uvicorn with inboxd's loop and parser."""

    def __init__(self, *, workdir: Path) -> None:
        super().__init__(log=workdir / f"hello-{uuid.uuid4().hex[:6]}.log")

    def start(self) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        argv = [sys.executable, "-m", "uvicorn", "bench.hello:app", "--host", HOST, "--port", str(self.http_port)]
        argv += ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]
        self._launch(argv, env={**os.environ, "PYTHONPATH": root})

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process)


class MailDev(_ServerProcess):
    """MailDev 2.2.1 (mail kept in memory and in unsynced temp files: not durable), via the peers script."""

    def __init__(self, *, script: Path, workdir: Path, incoming: tuple[str, str] | None = None) -> None:
        super().__init__(log=workdir / f"maildev-{uuid.uuid4().hex[:6]}.log")
        self.script = script
        self.incoming = incoming

    def start(self) -> None:
        if self.incoming is None:
            self._launch([str(self.script), str(self.smtp_port), str(self.http_port)])
            return
        # With SMTP AUTH: the peers script takes no options, so run the MailDev it installed with
        # the script's own options plus the incoming credentials (a plain start installs it first).
        binary = Path(os.environ.get("MAILDEV_HOME", "/tmp/peer-maildev-2.2.1")) / "node_modules/.bin/maildev"
        if not binary.exists():
            installer = MailDev(script=self.script, workdir=self.log.parent)
            try:
                installer.start()
            finally:
                installer.stop()
        user, password = self.incoming
        self._launch(
            [
                str(binary),
                *("--ip", HOST, "--web-ip", HOST, "-s", str(self.smtp_port), "-w", str(self.http_port), "--silent"),
                *("--incoming-user", user, "--incoming-pass", password),
            ]
        )

    def exit_note(self) -> str:
        """Why the process is gone, from its exit status and the last line of its log."""
        assert self._process is not None
        last = tail(self.log, 1).strip()
        return f"MailDev exited ({self._process.returncode}): {last[:160]}"

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process)
            # MailDev writes every message, unsynced, under <tmp>/maildev-<pid>; it never removes it.
            shutil.rmtree(Path(tempfile.gettempdir()) / f"maildev-{self._process.pid}", ignore_errors=True)

    def emails(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = http_json("GET", f"{self.base}/email")
        return listed
