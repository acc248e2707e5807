"""The inboxd a test session talks to: one started for the session, or one already running.

An embedded inboxd is `python -m inboxd serve` as a child process, on free ports, with SQLite in a
temporary data directory: a process of its own keeps its event loop out of the tests' (pytest-asyncio,
Playwright's sync API) and dies with nothing left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import smtplib
import subprocess
import sys
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

from inboxd.client import ApiError, AsyncClient, Client

_LISTENING = re.compile(r"HTTP on (http://\S+)\s+SMTP on (\S+):(\d+)")
_START_TIMEOUT = 60.0
# The embedded server serves one test suite: no request rates or creation intervals to run into.
_EMBEDDED_SETTINGS = {
    "INBOXD_HTTP_PORT": "0",
    "INBOXD_SMTP_PORT": "0",
    "INBOXD_SUBMISSION_PORT": "0",
    "INBOXD_LOG_LEVEL": "warning",
    "INBOXD_PRO_RPS": "10000",
    "INBOXD_FREE_RPS": "10000",
    "INBOXD_PUBLIC_RPS": "10000",
    "INBOXD_PRO_CREATE_INTERVAL": "0",
    "INBOXD_FREE_CREATE_INTERVAL": "0",
}


@dataclass
class InboxdServer:
    """The `inboxd` fixture: where the server is, an API token for it, and a client."""

    url: str
    token: str = field(repr=False)  # kept out of failure reports and logs
    smtp_host: str | None = None
    smtp_port: int | None = None
    embedded: bool = False
    # Whether the `sandbox` fixture may empty the token's user's sandbox: the embedded server's
    # is the run's own; a running server's only when the run is told so (`--inboxd-empty-sandbox`).
    sandbox_ours: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_path: Path | None = field(default=None, repr=False)
    _client: Client | None = field(default=None, repr=False)

    @property
    def client(self) -> Client:
        """A synchronous client with the session's token."""
        if self._client is None:
            self._client = Client(self.url, self.token)
        return self._client

    def async_client(self) -> AsyncClient:
        """A new asyncio client with the session's token (close it, or use `async with`)."""
        return AsyncClient(self.url, self.token)

    def send(
        self,
        to: str,
        *,
        subject: str = "",
        text: str = "",
        html: str | None = None,
        sender: str = "sender@example.com",
    ) -> None:
        """Send a message to the server's SMTP port (the code under test usually does this)."""
        if self.smtp_port is None or self.smtp_host is None:
            raise RuntimeError("the SMTP address of this inboxd is unknown: pass --inboxd-smtp host:port")
        message = EmailMessage()
        message["From"] = sender
        message["To"] = to
        message["Subject"] = subject
        message.set_content(text)
        if html is not None:
            message.add_alternative(html, subtype="html")
        with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=30) as smtp:
            smtp.send_message(message)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_embedded(data_dir: Path) -> InboxdServer:
    """Start `python -m inboxd serve` on free ports with its data in `data_dir`; returns once it listens."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # The suite's own INBOXD_* (a developer's database URL, say) must not leak into the embedded server.
    env = {name: value for name, value in os.environ.items() if not name.startswith("INBOXD_")}
    env.update(_EMBEDDED_SETTINGS, INBOXD_DATA_DIR=str(data_dir))
    log_path = data_dir / "inboxd.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "inboxd", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        output = log_path.read_text(errors="replace")
        found = _LISTENING.search(output)
        token_file = data_dir / "bootstrap-token"
        if found and token_file.exists():
            token = token_file.read_text().strip()
            if token:
                break
        if process.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                process.kill()
            raise RuntimeError(f"the embedded inboxd did not start:\n{output}")
        time.sleep(0.05)
    return InboxdServer(
        url=found.group(1),
        token=token,
        smtp_host=found.group(2),
        smtp_port=int(found.group(3)),
        embedded=True,
        sandbox_ours=True,
        process=process,
        log_path=log_path,
    )


def connect(url: str, token: str, smtp: str | None = None) -> InboxdServer:
    """A running inboxd. `smtp` (`host:port`) says where its SMTP listener is; without it, the
    server says so itself (`GET /api/server`)."""
    server = InboxdServer(url=url.rstrip("/"), token=token)
    server.client.health()
    if smtp:
        host, _, port_text = smtp.rpartition(":")
        server.smtp_host, server.smtp_port = host.strip("[]") or None, int(port_text)
    else:
        try:
            info = server.client.server()
        except ApiError as exc:
            # An inboxd older than `GET /api/server` answers 404: the address stays unknown, and
            # `send` asks for --inboxd-smtp.
            if exc.status != 404:
                raise
        else:
            server.smtp_host, server.smtp_port = info.smtp_host, info.smtp_port
    return server
