"""A new user's first hour (issue 23): every command inboxd prints at start, or for an MCP client,
runs as printed; `inboxd --version` answers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Harness, free_port, simple_message
from tests.serverproc import ServerProcess
from tests.test_observability import samples, value
from tests.test_search import restart, run_sql

VERSION = version("inboxd")
Done = subprocess.CompletedProcess[str]
SIGN_IN_HINT = re.compile(r"`([^`]*users sign-in-link --email \S+)`")


def run(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None) -> Done:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, cwd=cwd, env=env)


def test_version_from_the_script_and_the_module() -> None:
    script = Path(sys.executable).parent / "inboxd"
    for command in ([str(script)], [sys.executable, "-m", "inboxd"]):
        done = run(*command, "--version")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"inboxd, version {VERSION}"


def start_and_read_hint(env: dict[str, str], cwd: Path) -> tuple[list[str], str]:
    """Start `python -m inboxd serve` in `cwd`, read its banner up to the sign-in hint, stop it.
    Started outside the checkout, the interpreter is not under the working directory, so the
    hint names it by its absolute path (from the checkout it is `.venv/bin/...`, relative)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "inboxd", "serve"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = SIGN_IN_HINT.search(line)
            if found:
                return lines, found.group(1)
        raise AssertionError("no sign-in hint:\n" + "".join(lines))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_every_start_prints_a_sign_in_command_that_runs(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("INBOXD_")},
        "INBOXD_DATA_DIR": str(tmp_path / "data"),
        "INBOXD_HTTP_PORT": str(free_port()),
        "INBOXD_SMTP_PORT": str(free_port()),
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_LOG_LEVEL": "warning",
    }
    for start in ("first", "second"):
        lines, command = start_and_read_hint(env, tmp_path)
        # The data directory came from the environment: the command sets it, so it runs in any shell.
        assert command.startswith(f"INBOXD_DATA_DIR={tmp_path / 'data'} {sys.executable} -m inboxd "), command
        if start == "second":
            assert not any("bootstrap" in line for line in lines)
        done = run("bash", "-c", command, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].startswith("http"), done.stdout


def test_mcp_config_names_a_command_that_runs_from_anywhere(tmp_path: Path) -> None:
    for started in ([str(Path(sys.executable).parent / "inboxd")], [sys.executable, "-m", "inboxd"]):
        done = run(*started, "mcp", "--config", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        entry = json.loads(done.stdout)["mcpServers"]["inboxd"]
        assert os.path.isabs(entry["command"]) and entry["args"][-1] == "mcp"
        assert set(entry["env"]) == {"INBOXD_URL", "INBOXD_TOKEN"}
        answered = run(entry["command"], *entry["args"][:-1], "--version", cwd="/")
        assert answered.stdout.strip() == f"inboxd, version {VERSION}", answered.stderr


def laptop_env(tmp_path: Path) -> dict[str, str]:
    """`make run`'s settings (the defaults), on free ports and a fresh data directory."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("INBOXD_")},
        "INBOXD_DATA_DIR": str(tmp_path / "data"),
        "INBOXD_HTTP_PORT": str(free_port()),
        "INBOXD_SMTP_PORT": str(free_port()),
        "INBOXD_SUBMISSION_PORT": str(free_port()),
    }


def test_doctor_is_content_with_a_healthy_make_run(tmp_path: Path) -> None:
    env = laptop_env(tmp_path)
    inboxd = str(Path(sys.executable).parent / "inboxd")
    serve = subprocess.Popen(
        [inboxd, "serve"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            if SIGN_IN_HINT.search(line):
                break
        doctor = run(inboxd, "doctor", env=env, cwd=tmp_path)
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    assert doctor.returncode == 0, doctor.stdout
    lines = doctor.stdout.splitlines()
    assert all(line.startswith(("ok ", "info ")) for line in lines[:-1]), doctor.stdout
    # The optional parts `make run` leaves off are information, each with how to turn it on.
    optional = {line.split(":")[0].split(maxsplit=1)[1]: line for line in lines if line.startswith("info ")}
    assert sorted(optional) == ["release", "render", "rspamd"], doctor.stdout
    assert "off: " in optional["rspamd"] and "INBOXD_RSPAMD_URL" in optional["rspamd"]
    assert "off: " in optional["release"] and "INBOXD_RELAY_HOST" in optional["release"]
    running = [line for line in lines if "inboxd is running there" in line]
    assert [line.split(":")[0].split(maxsplit=1)[1] for line in running] == [
        "http port",
        "smtp port",
        "submission port",
    ]
    assert lines[-1] == "inboxd doctor: all checks passed."


def test_doctor_reports_pending_migrations(tmp_path: Path) -> None:
    from inboxd.store import migrate

    env = laptop_env(tmp_path)
    assert run(sys.executable, "-m", "inboxd", "migrate", env=env).returncode == 0
    head = migrate.head_revision()
    older = "0001"  # the first migration: always known, never the head
    with sqlite3.connect(tmp_path / "data" / "inboxd.sqlite3") as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (older,))
    doctor = run(sys.executable, "-m", "inboxd", "doctor", env=env)
    assert (
        "warn  database: " in doctor.stdout
        and f"migrations are pending (schema {older}, this inboxd's is {head})" in doctor.stdout
    ), doctor.stdout


@pytest.fixture
def info_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """INFO records of inboxd's loggers, from before the server starts (list it before `harness`)."""
    caplog.set_level(logging.INFO, logger="inboxd")
    return caplog


REBUILT = "search index format changed"


async def indexed(http: httpx.AsyncClient, harness: Harness, box: dict[str, Any], word: str) -> None:
    """Returns once `word` is found by full-text search: the indexer has passed its start-up check."""
    found = await http.get(
        f"/api/accounts/{box['id']}/messages/wait", params={"q": word, "timeout": "20"}, headers=harness.auth()
    )
    assert found.status_code == 200, found.text


async def test_first_start_says_nothing_of_the_search_index_format(
    info_logs: pytest.LogCaptureFixture, harness: Harness
) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Hello", body="the quokka waits\n"))
    await indexed(harness.http, harness, box, "quokka")
    assert not [r for r in info_logs.records if REBUILT in r.getMessage()]

    # An index an older inboxd built is rebuilt, and that is said.
    await harness.server.stop()
    run_sql(harness, {"sqlite": [STALE, "DELETE FROM message_fts"], "postgres": [STALE]})
    again = await restart(harness)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{again.http_port}", timeout=30) as http:
        await indexed(http, harness, box, "quokka")
    assert [r for r in info_logs.records if REBUILT in r.getMessage()]


STALE = "UPDATE meta SET value = '1' WHERE key = 'search_format'"


async def test_page_routes_counted_by_template_and_no_created_series(tmp_path: Path) -> None:
    server = await ServerProcess.start(tmp_path / "data", INBOXD_METRICS_TOKEN="metrics-secret-value")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            assert (await http.get("/auth/sign-in")).status_code == 200
            assert (await http.get("/healthz")).status_code == 200
            scraped = await http.get("/metrics", headers={"Authorization": "Bearer metrics-secret-value"})
    finally:
        await server.stop()
    found = samples(scraped.text)
    counted = "inboxd_http_requests_total"
    assert value(found, counted, method="GET", route="/auth/sign-in", status="200") == 1
    assert value(found, counted, method="GET", route="/healthz", status="200") == 1
    assert not [labels for name, labels in found if ("route", "unmatched") in labels]
    assert not [name for name, _ in found if name.endswith("_created")]


LOG_LINE = {
    "text": re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<logger>\S+): "),
    "json": re.compile(r'\{"time": "[^"]+Z", "level": "\w+", "logger": "(?P<logger>[^"]+)", "message": '),
}


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_uvicorn_lines_come_out_in_inboxd_s_format(tmp_path: Path, fmt: str) -> None:
    """Start, an error uvicorn reports itself (a request it cannot parse), stop: every line on
    the console is the banner or one of our log lines, uvicorn's included."""
    server = await ServerProcess.start(tmp_path / "data", INBOXD_LOG_LEVEL="info", INBOXD_LOG_FORMAT=fmt)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"NOT HTTP AT ALL\x01\r\n\r\n")
        await writer.drain()
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
        writer.close()
    finally:
        await server.stop()
    uvicorn_said = []
    for line in "".join(server.output).splitlines():
        if line.startswith(("inboxd: ", "ibx_", "http://")):  # the banner (standard output)
            continue
        found = LOG_LINE[fmt].match(line)
        assert found, f"not in inboxd's {fmt} format: {line!r}"
        if found.group("logger").startswith("uvicorn"):
            uvicorn_said.append(json.loads(line)["message"] if fmt == "json" else line.split(": ", 1)[1])
    for expected in ("Started server process", "Invalid HTTP request received.", "Shutting down", "Finished server"):
        assert any(said.startswith(expected) for said in uvicorn_said), (expected, uvicorn_said)


def test_the_pytest_extra_and_a_clear_message_without_pytest() -> None:
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    assert [r for r in project["optional-dependencies"]["pytest"] if r.startswith("pytest")]
    assert project["entry-points"]["pytest11"]["inboxd"] == "inboxd.testing.plugin"
    without_pytest = "import sys; sys.modules['pytest'] = None; import inboxd.testing.plugin"
    done = run(sys.executable, "-c", without_pytest)
    assert done.returncode == 1
    # inboxd is not on the package index: the command names this checkout, for this environment.
    root = Path(__file__).resolve().parent.parent
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: inboxd's pytest plugin needs pytest: make -C {root} install EXTRAS=pytest"
    )


def _readme_command(name: str) -> str:
    """The shell block under `<!-- readme-command: NAME -->` in the README, as printed."""
    text = (Path(__file__).parent.parent / "README.md").read_text()
    block = text.split(f"<!-- readme-command: {name} -->\n```sh\n", 1)[1].split("\n```", 1)[0]
    return block


@pytest.mark.timeout(900)  # pip resolves and downloads about 130 packages from the index
def test_the_readme_install_command_runs_as_printed(tmp_path: Path) -> None:
    """The README's install command, copied out of it, run in a new virtual environment in the
    checkout's directory: the plugin and the client import, and pytest finds the plugin."""
    command = _readme_command("install-pytest")
    assert command == "pip install '.[pytest]'"
    venv = tmp_path / "project-venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, timeout=300, check=False)
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INBOXD_", "PIP_CONSTRAINT", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    # This machine's pip caps some packages by a site constraint file; a user's machine has none.
    env["PIP_CONFIG_FILE"] = os.devnull
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["sh", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    python = str(venv / "bin" / "python")
    check = run(python, "-c", "import inboxd.testing.plugin, inboxd.client; print('ok')", env=env, cwd=tmp_path)
    assert check.stdout.strip() == "ok", check.stderr
    plugins = run(python, "-m", "pytest", "--version", "--version", env=env, cwd=tmp_path)
    said = plugins.stdout + plugins.stderr
    assert "registered third-party plugins:" in said and "inboxd-0.1.0" in said, said


def test_the_cli_outside_the_project_says_where_it_looked_and_creates_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOXD_")}
    inboxd = str(Path(sys.executable).parent / "inboxd")
    made = run(inboxd, "users", "create", "--email", "ci@example.org", env=env, cwd=tmp_path)
    assert made.returncode == 1
    looked = str(tmp_path.resolve() / "data" / "inboxd.sqlite3")
    assert f"no inboxd database at {looked}" in made.stderr, made.stderr
    assert "INBOXD_DATA_DIR" in made.stderr
    assert not (tmp_path / "data").exists()
    # Pointed at the server's data directory, the same command works.
    env["INBOXD_DATA_DIR"] = str(tmp_path / "server-data")
    assert run(inboxd, "migrate", env=env, cwd=tmp_path).returncode == 0
    assert run(inboxd, "users", "create", "--email", "ci@example.org", env=env, cwd=tmp_path).returncode == 0
