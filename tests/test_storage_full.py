"""A full disk: API writes answer 507 `insufficient_storage`, SMTP answers 451, both recover.

SQLite runs for real on a small tmpfs that the test fills (the suite runs as root). PostgreSQL's
disk cannot be filled from here, so its driver's errors are checked at the mapping itself.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import smtplib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.errors import InsufficientStorage, StorageError
from inboxd.http.errors import error_response
from inboxd.store.postgres import _pg_error
from tests.conftest import Clock, send_mail


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(path: Path) -> None:
    """Write until the file system refuses, in ever smaller pieces: ENOSPC is the point."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                size //= 2
    finally:
        os.close(fd)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_full_disk_answers_507_then_recovers(
    small_disk: Path, make_settings: Any, sqlite_template: Path, clock: Clock
) -> None:
    shutil.copy(sqlite_template, small_disk / "inboxd.sqlite3")
    # The free-space guard off (tests/test_space_guard.py covers it): this test fills the disk for real.
    server = Inboxd(make_settings(data_dir=small_disk, min_free_bytes=0), clock=clock)
    await server.start()
    try:
        assert server.bootstrap_token is not None
        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            box = await http.post(
                "/api/accounts",
                json={"address": f"ok@{server.settings.default_domain}", "password": "secret123"},
                headers=auth,
            )
            assert box.status_code == 201, box.text
            fill(small_disk / "filler")
            # The WAL may still have room from before; write until the disk is really in the way.
            answers: list[int] = []
            for n in range(200):
                address = f"{'x' * 40}{n}@{server.settings.default_domain}"
                response = await http.post(
                    "/api/accounts", json={"address": address, "password": "secret123"}, headers=auth
                )
                answers.append(response.status_code)
                if response.status_code != 201:
                    assert response.status_code == 507, response.text
                    assert response.json() == {
                        "error": "insufficient_storage",
                        "message": InsufficientStorage.default_message,
                    }
                    break
            assert answers[-1] == 507, answers
            with pytest.raises(smtplib.SMTPDataError) as refused:
                await asyncio.to_thread(send_mail, server.smtp_port, box.json()["address"])
            assert refused.value.smtp_code == 451
            os.unlink(small_disk / "filler")
            again = await http.post(
                "/api/accounts",
                json={"address": f"later@{server.settings.default_domain}", "password": "secret123"},
                headers=auth,
            )
            assert again.status_code == 201, again.text
            assert await asyncio.to_thread(send_mail, server.smtp_port, box.json()["address"]) == {}
    finally:
        await server.stop()


def test_postgres_disk_full_is_insufficient_storage() -> None:
    full = asyncpg.DiskFullError("could not extend file: No space left on device")
    assert isinstance(_pg_error(full), InsufficientStorage)
    assert isinstance(_pg_error(OSError(errno.ENOSPC, "No space left on device")), InsufficientStorage)
    other = _pg_error(OSError(errno.ECONNRESET, "reset"))
    assert isinstance(other, StorageError) and not isinstance(other, InsufficientStorage)
    response = error_response(InsufficientStorage())
    assert response.status_code == 507
