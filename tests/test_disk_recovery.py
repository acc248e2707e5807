"""A disk that recovers, on a small file system of the test's own (a tmpfs; the suite runs as
root): the free-space guard stops before its threshold under load, deleting mail frees space
the guard counts (SQLite's free pages), and a server that met a truly full disk answers
deletes, first reads and mail again once space is back, without a restart."""

from __future__ import annotations

import asyncio
import os
import random
import smtplib
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ForkedServer
from tests.test_crash import DOMAIN, message
from tests.test_disk_full import fill, small_disk, storage, tablespace_cleanup

__all__ = ["small_disk", "storage", "tablespace_cleanup"]  # fixtures this module uses

MIN_FREE = 16_000_000
MAX_MESSAGE = 256 * 1024
SENDERS = 3


@pytest.fixture
def disk_40m() -> Iterator[Path]:
    mount = Path(tempfile.mkdtemp(prefix="inboxd-recover-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m,mode=0755", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
        mount.rmdir()


def free_on(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def deliver_until(
    port: int, rcpt: str, *, name: str, codes: list[int], stop: threading.Event, lock: threading.Lock
) -> None:
    """Deliver messages of 40-100 KB over one connection until `stop`; every answer is kept."""
    rng = random.Random(name)
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        for n in range(100_000):
            if stop.is_set():
                return
            body = message(f"{name}m{n}", rng) + message(f"{name}m{n}", rng)[-60_000:]
            try:
                client.sendmail("sender@example.org", [rcpt], body)
                code = 250
            except smtplib.SMTPResponseException as exc:
                code = exc.smtp_code
            with lock:
                codes.append(code)


async def ids_of(http: httpx.AsyncClient, auth: dict[str, str], box: dict[str, Any]) -> list[str]:
    ids: list[str] = []
    for page in range(1, 1000):
        found = await http.get(f"/api/accounts/{box['id']}/messages", params={"page": page}, headers=auth)
        assert found.status_code == 200, found.text
        batch = [m["id"] for m in found.json()["messages"]]
        ids += batch
        if len(batch) < 30:
            return ids
    raise AssertionError("too many pages")


async def mailbox(http: httpx.AsyncClient, auth: dict[str, str], name: str) -> dict[str, Any]:
    created = await http.post(
        "/api/accounts", json={"address": f"{name}@{DOMAIN}", "auth_key": "ef" * 32}, headers=auth
    )
    assert created.status_code == 201, created.text
    box: dict[str, Any] = created.json()
    return box


@pytest.mark.alone  # many writers against a small disk: what lands between the guard's looks moves with the load
@pytest.mark.timeout(240)
async def test_the_guard_stops_before_its_threshold_and_deletes_free_space(disk_40m: Path) -> None:
    env = {
        "INBOXD_PRO_RPS": "10000",
        "INBOXD_PRO_CREATE_INTERVAL": "0",
        "INBOXD_MIN_FREE_BYTES": str(MIN_FREE),
        "INBOXD_MAX_MESSAGE_SIZE": str(MAX_MESSAGE),
    }
    server = await ForkedServer.start(disk_40m / "data", **env)
    try:
        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            box = await mailbox(http, auth, "guarded")
            codes: list[int] = []
            lock, stop = threading.Lock(), threading.Event()
            senders = [
                threading.Thread(
                    target=deliver_until,
                    args=(server.smtp_port, box["address"]),
                    kwargs={"name": f"s{n}", "codes": codes, "stop": stop, "lock": lock},
                    daemon=True,
                )
                for n in range(SENDERS)
            ]
            for sender in senders:
                sender.start()
            for _ in range(1200):  # until every sender has been refused a few times (or 120 s)
                await asyncio.sleep(0.1)
                with lock:
                    if sum(1 for c in codes if c != 250) >= 5 * SENDERS:
                        break
            stop.set()
            for sender in senders:
                await asyncio.to_thread(sender.join, 60)
            stored, refused = codes.count(250), [c for c in codes if c != 250]
            assert stored > 50 and refused, (stored, refused)
            assert set(refused) == {452}, sorted(set(refused))
            # Mail accepted just before the refusals is written too, and the threshold is still free.
            await asyncio.sleep(0.5)
            left = free_on(disk_40m)
            assert left >= MIN_FREE, f"{left:,} bytes free under a threshold of {MIN_FREE:,}"

            # Deleting mail frees space the guard counts (the file keeps its size: its pages are free):
            # all but 10 messages, well over the reserve (4.5 MB here) the guard keeps above its threshold.
            ids = await ids_of(http, auth, box)
            for message_id in ids[10:]:
                gone = await http.delete(f"/api/accounts/{box['id']}/messages/{message_id}", headers=auth)
                assert gone.status_code == 204, gone.text
            again: list[int] = []
            for _ in range(30):
                again.clear()
                await asyncio.to_thread(_one, server.smtp_port, box["address"], again)
                if again == [250]:
                    break
                await asyncio.sleep(0.2)
            assert again == [250], f"mail still refused after deleting {len(ids) - 10} of {len(ids)} messages"
        print(f"guard: {stored} stored, then {len(refused)} answered 452 with {left:,} bytes free")
    finally:
        await server.stop()


def _one(port: int, rcpt: str, codes: list[int]) -> None:
    body = message("one", random.Random(0))
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        try:
            client.sendmail("sender@example.org", [rcpt], body)
            codes.append(250)
        except smtplib.SMTPResponseException as exc:
            codes.append(exc.smtp_code)


@pytest.mark.timeout(240)
async def test_after_a_full_disk_deletes_and_first_reads_answer_again(
    storage: dict[str, Any], small_disk: Path
) -> None:
    """The guard off, so the writes meet ENOSPC: while the disk is full a delete and a message's
    may answer 507 and a message's first open answers; once space is back deletes answer again, with
    the same process."""
    env = {"INBOXD_PRO_RPS": "10000", "INBOXD_PRO_CREATE_INTERVAL": "0", "INBOXD_MIN_FREE_BYTES": "0", **storage["env"]}
    server = await ForkedServer.start(storage["data_dir"], **env)
    try:
        if storage["after_start"] is not None:
            await asyncio.to_thread(storage["after_start"])
        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            box = await mailbox(http, auth, "full")
            codes: list[int] = []
            for _ in range(20):
                await asyncio.to_thread(_one, server.smtp_port, box["address"], codes)
            assert codes == [250] * 20
            await asyncio.to_thread(fill, small_disk / "filler", leave=0)
            # Mail is refused with 4xx, never dropped.
            codes.clear()
            for _ in range(5):
                await asyncio.to_thread(_one, server.smtp_port, box["address"], codes)
            ids = await ids_of(http, auth, box)
            during = []
            for message_id in ids[:6]:
                # A first open reads: keeping its parse is a cache, so a full disk does not fail it.
                opened = await http.get(f"/api/accounts/{box['id']}/messages/{message_id}", headers=auth)
                assert opened.status_code == 200, opened.text
                during.append(
                    (await http.delete(f"/api/accounts/{box['id']}/messages/{message_id}", headers=auth)).status_code
                )
            assert set(during) <= {204, 507}, during
            assert server.alive

            (small_disk / "filler").unlink()
            await asyncio.sleep(1.5)
            for message_id in ids[6:12]:
                opened = await http.get(f"/api/accounts/{box['id']}/messages/{message_id}", headers=auth)
                assert opened.status_code == 200, opened.text
                gone = await http.delete(f"/api/accounts/{box['id']}/messages/{message_id}", headers=auth)
                assert gone.status_code == 204, gone.text
            codes.clear()
            for _ in range(3):
                await asyncio.to_thread(_one, server.smtp_port, box["address"], codes)
            assert codes == [250, 250, 250], codes
        print(f"full disk: while full {during}; after, reads, deletes and mail answered again")
    finally:
        await server.stop()
