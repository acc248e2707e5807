"""deploy/: the Dockerfile is linted (hadolint), its entrypoint and health check run here as the
container would run them, and the systemd unit passes `systemd-analyze verify`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent.parent
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--format", "json", str(DEPLOY / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout or "[]") == []
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^USER 10001", text, re.M) and "VOLUME" in text and "HEALTHCHECK" in text


def test_entrypoint_serves_and_the_healthcheck_passes(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "INBOXD_DATA_DIR": str(tmp_path / "data"),
        "INBOXD_HTTP_HOST": "127.0.0.1",
        "INBOXD_SMTP_HOST": "127.0.0.1",
        "INBOXD_HTTP_PORT": "0",
        "INBOXD_SMTP_PORT": "0",
        "INBOXD_SUBMISSION_PORT": "0",
    }
    proc = subprocess.Popen(
        [str(DEPLOY / "entrypoint.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        port = ""
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            found = re.search(r"HTTP on http://[^:]+:(\d+)", line)
            if found:
                port = found.group(1)
                break
            assert time.monotonic() < deadline
        assert port, "the entrypoint did not start inboxd serve"
        assert (tmp_path / "data" / "bootstrap-token").exists()
        # The Dockerfile's HEALTHCHECK command, exactly as written there.
        command = re.search(r'CMD \["python", "-c", "(.+)"\]\n', (DEPLOY / "Dockerfile").read_text())
        assert command is not None
        check = subprocess.run(
            [sys.executable, "-c", command.group(1)], env={**env, "INBOXD_HTTP_PORT": port}, timeout=30
        )
        assert check.returncode == 0
        # exec: inboxd is the process itself, so SIGTERM stops it in order.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    failed = subprocess.run(
        [sys.executable, "-c", command.group(1)], env={**env, "INBOXD_HTTP_PORT": port}, capture_output=True, timeout=30
    )
    assert failed.returncode != 0


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = (DEPLOY / "inboxd.service").read_text().replace("/opt/inboxd/venv", sys.prefix)
    unit = unit.replace("User=inboxd", "User=root").replace("Group=inboxd", "Group=root")
    path = tmp_path / "inboxd.service"
    path.write_text(unit)
    assert shutil.which("systemd-analyze")
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "inboxd.service" not in done.stderr, done.stderr


def test_the_wheel_holds_every_file_the_package_reads(tmp_path: Path) -> None:
    """A non-editable install (the Dockerfile's, `pip install inboxd`, `bench compare`'s REF) has
    only what package-data names: every template, static asset, migration and data file is in it."""
    src = ROOT / "src" / "inboxd"
    wanted = {
        str(path.relative_to(src.parent))
        for folder in ("web/templates", "web/static", "api/docs_assets", "mail/checks/data", "store/migrations")
        for path in (src / folder).rglob("*")
        # Alembic's template for writing a new revision is a developer's tool, not read at run time.
        if path.is_file() and "__pycache__" not in path.parts and path.name != "script.py.mako"
    }
    # Built from a copy, so the build leaves nothing in the checkout.
    tree = tmp_path / "tree"
    shutil.copytree(src, tree / "src" / "inboxd", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(tree)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("inboxd-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    assert sorted(wanted - shipped) == []
