"""`inboxd serve` that cannot start says why in one line, naming the setting to change."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("taken", "setting", "label"),
    [
        ("INBOXD_HTTP_PORT", "INBOXD_HTTP_PORT", "HTTP port"),
        ("INBOXD_SMTP_PORT", "INBOXD_SMTP_PORT", "SMTP port"),
        ("INBOXD_SUBMISSION_PORT", "INBOXD_SUBMISSION_PORT", "submission port"),
    ],
)
def test_a_port_in_use_ends_the_start_with_one_line(tmp_path: Path, taken: str, setting: str, label: str) -> None:
    with socket.socket() as other:  # another program on the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {
            **os.environ,
            "INBOXD_DATA_DIR": str(tmp_path / "data"),
            "INBOXD_HTTP_HOST": "127.0.0.1",
            "INBOXD_SMTP_HOST": "127.0.0.1",
            "INBOXD_SUBMISSION_HOST": "127.0.0.1",
            "INBOXD_HTTP_PORT": "0",
            "INBOXD_SMTP_PORT": "0",
            "INBOXD_SUBMISSION_PORT": "0",
            taken: str(port),
        }
        done = subprocess.run(
            [sys.executable, "-m", "inboxd", "serve"], env=env, capture_output=True, text=True, timeout=120
        )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    naming = [line for line in output.splitlines() if str(port) in line]
    assert len(naming) == 1, output
    assert naming[0] == done.stderr.splitlines()[-1]  # the last thing it says
    assert f"{label} {port} on 127.0.0.1 is already in use" in naming[0] and setting in naming[0]
