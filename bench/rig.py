"""The test rig shared by every measurement: tools, scratch directory, the 4 KB message, and
the choice of SMTP load client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.message import build_message, write_for_smtp_source
from bench.smtpload import SENDER, LoadRun, run_python_client, run_smtp_source
from bench.tools import Tools

MESSAGE_SIZE = 4096
INBOXD_SQLITE = "inboxd-sqlite"
INBOXD_POSTGRES = "inboxd-postgres"
MAILDEV = "maildev"
TARGETS = (INBOXD_SQLITE, INBOXD_POSTGRES, MAILDEV)
LABELS = {INBOXD_SQLITE: "inboxd (SQLite)", INBOXD_POSTGRES: "inboxd (PostgreSQL)", MAILDEV: "MailDev 2.2.1"}


@dataclass(frozen=True, slots=True)
class Rig:
    tools: Tools
    workdir: Path
    pg_url: str
    maildev_script: Path
    client: str  # "smtp-source" or "python"
    load_timeout: float

    @property
    def message(self) -> bytes:
        return build_message(MESSAGE_SIZE, sender=SENDER, recipient="bench@inboxd.localhost")

    def client_flag(self) -> str:
        """The option that makes a reproducing command use the same client."""
        return " --client python" if self.client == "python" else ""

    def send(self, *, port: int, recipient: str, connections: int, messages: int) -> LoadRun:
        if self.client == "smtp-source":
            assert self.tools.smtp_source is not None
            message_file = self.workdir / "msg.eml"
            if not message_file.exists():
                write_for_smtp_source(self.message, message_file)
            return run_smtp_source(
                self.tools.smtp_source,
                port=port,
                connections=connections,
                messages=messages,
                message_file=message_file,
                recipient=recipient,
                timeout=self.load_timeout,
            )
        return run_python_client(
            port=port,
            connections=connections,
            messages=messages,
            message=self.message,
            recipient=recipient,
            timeout=self.load_timeout,
        )
