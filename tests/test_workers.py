"""`inboxd serve --workers 2`: both workers serve on shared ports, a worker killed with SIGKILL is
started again, mail sent meanwhile is kept, and SIGTERM to the supervisor stops every worker."""

from __future__ import annotations

import json
import os
import signal
import smtplib
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port, send_mail


def _children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


def _dead(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def _wait(condition: object, *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {within} s: {what}")


def _http(method: str, url: str, token: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"Bearer {token}"})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _deliver(port: int) -> None:
    """One message, taken with a 250; a connection reset or refused before any reply (a worker
    killed, or still starting) is tried again, as SMTP senders do."""
    for _attempt in range(10):
        try:
            assert send_mail(port, "w@inboxd.localhost") == {}
            return
        except (smtplib.SMTPServerDisconnected, ConnectionResetError, ConnectionRefusedError):
            time.sleep(0.2)
    raise AssertionError("ten connections in a row were reset or refused")


def test_workers_share_the_ports_restart_and_stop(tmp_path: Path) -> None:
    http, smtp, submission = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "INBOXD_DATA_DIR": str(tmp_path),
        "INBOXD_HTTP_PORT": str(http),
        "INBOXD_SMTP_PORT": str(smtp),
        "INBOXD_SUBMISSION_PORT": str(submission),
        "INBOXD_LOG_LEVEL": "warning",
    }
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "inboxd", "serve", "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{http}"
    try:
        _wait(lambda: len(_children(supervisor.pid)) == 2, within=30, what="two workers")
        _wait(lambda: urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200, within=30, what="HTTP")
        workers = _children(supervisor.pid)
        time.sleep(1.0)  # the second worker's listeners are up once it printed them; give it a moment
        token = (tmp_path / "bootstrap-token").read_text().strip()
        _http("POST", f"{base}/api/accounts", token, {"address": "w@inboxd.localhost", "password": "secret123"})

        # Connections spread over both workers; each accepted message is stored. On a busy machine
        # a worker may still be opening its listeners: a refused connection is tried again.
        for _ in range(20):
            _deliver(smtp)
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        _wait(lambda: _dead(victim), within=10, what="the killed worker gone")
        # The other worker keeps accepting while the first is restarted. A connection the kernel
        # queued on a listener that then went away is reset before any reply: the sender tries
        # again, as SMTP senders do, and only a 250 counts as accepted.
        for _ in range(20):
            _deliver(smtp)
        _wait(
            lambda: len(_children(supervisor.pid)) == 2 and victim not in _children(supervisor.pid),
            within=20,
            what="the killed worker started again",
        )
        page = _http("GET", f"{base}/api/accounts/w@inboxd.localhost/messages", token)
        assert isinstance(page, dict) and len(page["messages"]) == 30  # 40 stored; a page holds 30
        second = _http("GET", f"{base}/api/accounts/w@inboxd.localhost/messages?page=2", token)
        assert isinstance(second, dict) and len(second["messages"]) == 10
        workers = _children(supervisor.pid)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            status = supervisor.wait(40)
        except subprocess.TimeoutExpired:
            supervisor.kill()
            raise
    assert status == 0, supervisor.stderr.read() if supervisor.stderr else ""
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_workers_refuse_a_port_of_zero(tmp_path: Path) -> None:
    env = {**os.environ, "INBOXD_DATA_DIR": str(tmp_path), "INBOXD_HTTP_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "inboxd", "serve", "--workers", "2"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "fixed http port" in done.stderr
