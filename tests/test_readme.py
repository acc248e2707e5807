"""The README's examples run as shown: the signature checks, and the three-command local
webhook recipe (`make run` with INBOXD_WEBHOOK_ALLOW_HTTP, `python -m inboxd.devhook`, one mail)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
SIGNATURE = "sha256=76c83fd0acdf22faed320674fe8e04d528cfe8a17905e720a9611e40677c03b7"


def section(title: str) -> str:
    start = README.index(f"### {title}")
    end = README.find("\n## ", start)
    following = README.find("\n### ", start + 4)
    return README[start : min(x for x in (end, following) if x != -1)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_signature_examples_run_as_shown(tmp_path: Path) -> None:
    verifying = section("Verifying the signature")
    python = blocks(verifying, "python")
    assert len(python) == 2
    outputs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        for code in python
    ]
    assert outputs == ["verified evt_example\n", "True\n"]
    (shell,) = blocks(verifying, "sh")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.strip() == SIGNATURE


def test_local_webhook_recipe_runs_as_shown(tmp_path: Path) -> None:
    (recipe,) = blocks(section("A receiver on your laptop, in three commands"), "sh")
    commands = [line.split("  #")[0].strip() for line in recipe.strip().splitlines()]
    assert len(commands) == 3
    http, smtp, hook = free_port(), free_port(), free_port()

    def ports(command: str) -> str:
        return command.replace("8025", str(http)).replace("2525", str(smtp)).replace("8787", str(hook))

    # 1. make run, on free ports and a fresh data directory (ARGS passes through).
    data = tmp_path / "data"
    serve = subprocess.Popen(
        ["bash", "-c", commands[0] + f' ARGS="--port {http} --smtp-port {smtp} --data-dir {data}"'],
        cwd=ROOT,
        env={**os.environ, "INBOXD_SUBMISSION_PORT": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            if f":{http}" in line and "HTTP on" in line:
                break
        # 2. the receiver, run from a directory whose data/bootstrap-token is this inboxd's.
        devhook = subprocess.Popen(
            ["bash", "-c", ports(commands[1]).replace(".venv/bin/python", sys.executable) + " --once"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert devhook.stdout is not None
        first = devhook.stdout.readline()
        assert "devhook: listening" in first, first + devhook.stdout.read()
        # 3. one mail.
        subprocess.run(["bash", "-c", ports(commands[2]).replace("python3", sys.executable)], check=True, timeout=60)
        out, _ = devhook.communicate(timeout=60)
        assert devhook.returncode == 0, out
        assert re.search(r"devhook: verified evt_\w+: from 'me@example.org', subject 'hello'", out), out
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)
