"""`inboxd backup` while SMTP load runs, `inboxd export` (mbox, maildir), the streamed export.mbox,
and `inboxd doctor`: the commands an operator runs, run as they would."""

from __future__ import annotations

import asyncio
import mailbox
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import send_mail, simple_message
from tests.serverproc import ServerProcess


def inboxd(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    variables = {**os.environ, "INBOXD_DATA_DIR": str(data_dir), **env}
    return subprocess.run(
        [sys.executable, "-m", "inboxd", *args], env=variables, capture_output=True, text=True, timeout=120
    )


async def test_backup_under_smtp_load_then_export(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await ServerProcess.start(data, INBOXD_PRO_RPS="1000", INBOXD_PRO_CREATE_INTERVAL="0")
    accepted: list[float] = []  # when each 250 came back
    stop = threading.Event()

    def load(port: int, address: str) -> None:
        n = 0
        while not stop.is_set() and n < 2000:
            send_mail(port, address, simple_message(subject=f"load {n}", body=f"From here\nline {n}"))
            accepted.append(time.monotonic())
            n += 1

    try:
        token = server.bootstrap_token
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            box: dict[str, Any] = (
                await http.post(
                    "/api/accounts",
                    json={"address": "load@inboxd.localhost", "password": "secret123"},
                    headers={"Authorization": f"Bearer {token}"},
                )
            ).json()
            sender = threading.Thread(target=load, args=(server.smtp_port, box["address"]))
            sender.start()
            while len(accepted) < 20:
                await asyncio.sleep(0.05)
            began = time.monotonic()
            before = sum(1 for t in accepted if t < began)
            done = await asyncio.to_thread(inboxd, "backup", str(tmp_path / "copy.sqlite3"), data_dir=data)
            stop.set()
            await asyncio.to_thread(sender.join)
            assert done.returncode == 0, done.stderr
            # Every message acknowledged before the backup began is in the copy; load went on meanwhile.
            copy = sqlite3.connect(tmp_path / "copy.sqlite3")
            held = copy.execute("SELECT count(*) FROM messages").fetchone()[0]
            assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)
            copy.close()
            assert before <= held <= len(accepted), (before, held, len(accepted))
            assert f"({held} messages)" in done.stdout
            total = len(accepted)

            # The API's export: one streamed mbox, with the mailbox token, counted as one operation.
            me = await http.get("/api/user/me", headers={"Authorization": f"Bearer {token}"})
            used_before = me.json()["ops_used"]
            exported = await http.get(
                f"/api/accounts/{box['address']}/export.mbox", headers={"Authorization": f"Bearer {box['token']}"}
            )
            assert exported.status_code == 200
            assert exported.headers["content-type"].startswith("application/mbox")
            assert 'filename="load@inboxd.localhost.mbox"' in exported.headers["content-disposition"]
            me = await http.get("/api/user/me", headers={"Authorization": f"Bearer {token}"})
            assert me.json()["ops_used"] == used_before + 2  # the export and the first /me
            other = await http.get(
                "/api/accounts/nobody@inboxd.localhost/export.mbox", headers={"Authorization": f"Bearer {box['token']}"}
            )
            assert other.status_code == 404
    finally:
        stop.set()
        await server.stop()

    (tmp_path / "api.mbox").write_bytes(exported.content)
    from_api = mailbox.mbox(tmp_path / "api.mbox")
    subjects = [m["Subject"] for m in from_api]
    assert len(subjects) == total and subjects[0] == "load 0" and subjects[-1] == f"load {total - 1}"
    # mboxrd: a body line starting "From " is quoted, so it cannot split the message.
    assert b"\n>From here\n" in exported.content and b"\nFrom here\n" not in exported.content

    cli = await asyncio.to_thread(
        inboxd, "export", "--mailbox", "LOAD@inboxd.localhost", "--output", str(tmp_path / "cli.mbox"), data_dir=data
    )
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "cli.mbox").read_bytes() == exported.content
    maildir = await asyncio.to_thread(
        inboxd,
        "export",
        "--mailbox",
        "load@inboxd.localhost",
        "--format",
        "maildir",
        "--output",
        str(tmp_path / "md"),
        data_dir=data,
    )
    assert maildir.returncode == 0, maildir.stderr
    assert len(mailbox.Maildir(tmp_path / "md")) == total
    missing = await asyncio.to_thread(inboxd, "export", "--mailbox", "none@inboxd.localhost", data_dir=data)
    assert missing.returncode != 0 and "No mailbox" in missing.stderr


def test_backup_on_postgres_points_to_pg_dump(tmp_path: Path) -> None:
    done = inboxd(
        "backup", str(tmp_path / "x"), data_dir=tmp_path, INBOXD_DATABASE_URL="postgresql://inboxd:pw@db.example/inboxd"
    )
    assert done.returncode != 0
    assert "pg_dump" in done.stderr and "pw" not in done.stderr


def test_doctor_says_what_is_wrong(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        done = inboxd(
            "doctor",
            data_dir=tmp_path / "data",
            INBOXD_HTTP_PORT=str(port),
            INBOXD_SMTP_PORT="0",
            INBOXD_REDIS_URL="redis://127.0.0.1:1/0",
            INBOXD_DNS_NAMESERVERS="127.0.0.1:1",
            INBOXD_DNS_TIMEOUT="0.5",
            INBOXD_MIN_FREE_BYTES="0",
        )
    finally:
        busy.close()
    assert done.returncode == 1
    out = done.stdout
    assert f"fail  http port: 127.0.0.1:{port} is already in use" in out
    assert "ok    smtp port" in out
    assert "fail  redis: cannot reach Redis" in out
    assert "fail  dns: 127.0.0.1:1 did not answer" in out
    assert "ok    database: no database yet" in out
    assert "problem(s) found" in out

    healthy = inboxd(
        "doctor",
        data_dir=tmp_path / "data",
        INBOXD_HTTP_PORT="0",
        INBOXD_SMTP_PORT="0",
        INBOXD_MIN_FREE_BYTES="0",
        INBOXD_REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert "ok    redis: Redis answers." in healthy.stdout
    huge = inboxd(
        "doctor", data_dir=tmp_path, INBOXD_HTTP_PORT="0", INBOXD_SMTP_PORT="0", INBOXD_MIN_FREE_BYTES=str(10**18)
    )
    assert "fail  disk: only" in huge.stdout and huge.returncode == 1
