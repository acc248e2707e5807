"""The free-space guard on a real small tmpfs: 452 at MAIL and DATA, 507 on API writes, reads go
on, and everything resumes once space returns (the guard looks at most once a second)."""

from __future__ import annotations

import asyncio
import os
import smtplib
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.config import Settings
from tests.conftest import send_mail, simple_message

DISK = 16 * 1024 * 1024
MIN_FREE = 6 * 1024 * 1024
WAIT = 1.2  # past the guard's one-second look


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
async def server(small_disk: Path) -> AsyncIterator[Inboxd]:
    settings = Settings(
        data_dir=small_disk,
        http_port=0,
        smtp_port=0,
        submission_port=0,
        min_free_bytes=MIN_FREE,
        # The guard keeps twice the largest message (and 4 MB of SQLite's WAL) above its threshold:
        # the default 25 MiB would not fit this 16 MiB disk.
        max_message_size=1024 * 1024,
        pro_rps=1000.0,
        pro_create_interval=0.0,
        sweep_interval=3600.0,
    )
    inboxd = Inboxd(settings)
    await inboxd.start()
    try:
        yield inboxd
    finally:
        await inboxd.stop()


def open_envelope(port: int, address: str) -> smtplib.SMTP:
    """A session past MAIL and RCPT (smtplib blocks: run it off the server's event loop)."""
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    client.ehlo()
    assert client.mail("alice@example.org")[0] == 250
    assert client.rcpt(address)[0] == 250
    return client


def fill(disk: Path) -> Path:
    """A ballast file that leaves less than MIN_FREE free."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    ballast = disk / "ballast"
    with ballast.open("wb") as handle:
        handle.write(b"\0" * (free - MIN_FREE // 2))
    return ballast


async def test_low_space_refuses_new_work_and_resumes(server: Inboxd, small_disk: Path) -> None:
    token = server.bootstrap_token
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        box = await http.post(
            "/api/accounts", json={"address": "disk@inboxd.localhost", "password": "secret123"}, headers=auth
        )
        assert box.status_code == 201
        address = box.json()["address"]
        await asyncio.to_thread(send_mail, server.smtp_port, address)
        listing = (await http.get(f"/api/accounts/{address}/messages", headers=auth)).json()["messages"]
        message_id = listing[0]["id"]

        # A session that passed MAIL and RCPT before space ran low is refused at DATA.
        client = await asyncio.to_thread(open_envelope, server.smtp_port, address)
        ballast = fill(small_disk)
        await asyncio.sleep(WAIT)
        code, text = await asyncio.to_thread(client.docmd, "DATA")
        assert code == 452 and b"4.3.1" in text
        # The envelope was dropped: a new transaction starts at MAIL, which is refused too.
        code, _ = await asyncio.to_thread(client.mail, "alice@example.org")
        assert code == 452
        await asyncio.to_thread(client.quit)
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:
            await asyncio.to_thread(send_mail, server.smtp_port, address)
        assert refused.value.smtp_code == 452

        created = await http.post(
            "/api/accounts", json={"address": "late@inboxd.localhost", "password": "secret123"}, headers=auth
        )
        assert created.status_code == 507
        assert created.json()["error"] == "insufficient_storage"
        assert "ratelimit-limit" in created.headers
        marked = await http.put(f"/api/accounts/{address}/messages/{message_id}/read", headers=auth)
        assert marked.status_code == 507
        # Reads go on, and a delete (which frees space) is let through.
        assert (await http.get(f"/api/accounts/{address}/messages/{message_id}", headers=auth)).status_code == 200
        assert (await http.get(f"/api/accounts/{address}/messages", headers=auth)).status_code == 200
        assert (await http.get("/api/domains")).status_code == 200

        ballast.unlink()
        await asyncio.sleep(WAIT)
        await asyncio.to_thread(send_mail, server.smtp_port, address, simple_message(subject="after"))
        again = await http.post(
            "/api/accounts", json={"address": "late@inboxd.localhost", "password": "secret123"}, headers=auth
        )
        assert again.status_code == 201
        subjects = [
            m["subject"] for m in (await http.get(f"/api/accounts/{address}/messages", headers=auth)).json()["messages"]
        ]
        assert subjects == ["after", "Hello"]
        assert (await http.delete(f"/api/accounts/{address}/messages/{message_id}", headers=auth)).status_code == 204
