"""A full disk under SMTP load, for real: the storage sits on a small tmpfs (the suite runs as
root) that fills while several senders deliver to a child-process inboxd.

SQLite keeps its data directory there; PostgreSQL keeps the `message_sources` table there (a
tablespace on the tmpfs; its WAL stays on the main disk, so PostgreSQL itself stays up). While
the disk is full SMTP answers 4xx, never 250 for what was not stored, and never drops the client;
the process stays up; once a filler file is deleted mail is taken again, and every message that
got a 250 is there with its exact bytes.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import pwd
import random
import smtplib
import subprocess
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import PG_URL
from tests.serverproc import ForkedServer
from tests.test_crash import DOMAIN, Ledger, Sent, message, verify

SENDERS = 3


dropped_tablespaces: list[str] = []
mounts_in_use: list[Path] = []


def _unmount(mount: Path) -> None:
    subprocess.run(["umount", "-l", str(mount)], check=True)
    mount.rmdir()


@pytest.fixture(scope="session")
def tablespace_cleanup() -> Iterator[None]:
    """At the session's end: drop the tablespaces the tests emptied, then unmount their disks."""
    yield
    # Taken off the lists as they go: another module that uses these fixtures (test_disk_recovery)
    # has its own instance of this one, which then finds nothing left to do.
    if dropped_tablespaces:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            while dropped_tablespaces:
                conn.execute(f"DROP TABLESPACE IF EXISTS {dropped_tablespaces.pop()}")
    while mounts_in_use:
        _unmount(mounts_in_use.pop())


@pytest.fixture
def small_disk(tablespace_cleanup: None) -> Iterator[Path]:
    """A 12 MiB tmpfs, writable by PostgreSQL's user too (a tablespace must be owned by it)."""
    mount = Path(tempfile.mkdtemp(prefix="inboxd-full-", dir="/tmp"))
    os.chmod(mount, 0o755)
    pg = pwd.getpwnam("postgres")
    options = f"size=12m,mode=0755,uid={pg.pw_uid},gid={pg.pw_gid}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    yield mount
    if (mount / "pg").exists():
        mounts_in_use.append(mount)  # a tablespace lives there until the session's end
    else:
        _unmount(mount)


def fill(path: Path, *, leave: int) -> None:
    """Write a filler file until about `leave` bytes remain free on its file system."""
    stats = os.statvfs(path.parent)
    todo = max(0, stats.f_bavail * stats.f_frsize - leave)
    with open(path, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        while todo > 0:
            try:
                handle.write(chunk[: min(len(chunk), todo)])
                handle.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return
            todo -= min(len(chunk), todo)


@dataclass
class Replies:
    codes: list[int] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def sender(
    port: int, *, name: str, boxes: list[dict[str, Any]], ledger: Ledger, replies: Replies, until: threading.Event
) -> None:
    """Deliver over one connection until told to stop; 4xx answers are expected and go on."""
    rng = random.Random(name)
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
            for n in range(100_000):
                if until.is_set():
                    return
                token = f"{name}m{n}"
                body = message(token, rng) + message(token, rng)[-40_000:]
                targets = boxes if n % 2 else boxes[:1]
                with ledger.lock:
                    ledger.sent[token] = Sent(body, hashlib.sha256(body).hexdigest(), tuple(b["id"] for b in targets))
                try:
                    client.sendmail("sender@example.org", [b["address"] for b in targets], body)
                except smtplib.SMTPResponseException as exc:
                    with replies.lock:
                        replies.codes.append(exc.smtp_code)
                    continue
                with ledger.lock:
                    ledger.acked.add(token)
                with replies.lock:
                    replies.codes.append(250)
    except (smtplib.SMTPServerDisconnected, OSError) as exc:
        with replies.lock:
            replies.dropped.append(f"{name}: {exc!r}")


@pytest.fixture(params=["sqlite", "postgres"])
async def storage(request: pytest.FixtureRequest, small_disk: Path, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Where the bytes go: the environment for inboxd and a hook run once it has migrated."""
    if request.param == "sqlite":
        yield {"data_dir": small_disk / "data", "env": {}, "after_start": None}
        return
    schema = f"full_{uuid.uuid4().hex[:10]}"
    space = f"ts_{uuid.uuid4().hex[:10]}"
    location = small_disk / "pg"
    location.mkdir()
    pg = pwd.getpwnam("postgres")
    os.chown(location, pg.pw_uid, pg.pw_gid)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE TABLESPACE {space} LOCATION '{location}'")

    def move_sources() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{schema}".message_sources SET TABLESPACE {space}')

    try:
        yield {
            "data_dir": tmp_path / "data",
            "env": {"INBOXD_DATABASE_URL": PG_URL, "INBOXD_DATABASE_SCHEMA": schema},
            "after_start": move_sources,
        }
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            # Dropping the tablespace waits for a checkpoint of the whole (shared) cluster:
            # tens of seconds here. Take the data out of it now, and drop it at the session's end.
            dropped_tablespaces.append(space)


@pytest.mark.timeout(180)
async def test_smtp_under_load_on_a_full_disk(storage: dict[str, Any], small_disk: Path) -> None:
    # The free-space guard (INBOXD_MIN_FREE_BYTES) would refuse mail before the disk is full;
    # off here, so the writes really meet ENOSPC.
    env = {"INBOXD_PRO_RPS": "10000", "INBOXD_PRO_CREATE_INTERVAL": "0", "INBOXD_MIN_FREE_BYTES": "0", **storage["env"]}
    server = await ForkedServer.start(storage["data_dir"], **env)
    try:
        if storage["after_start"] is not None:
            await asyncio.to_thread(storage["after_start"])
        assert server.bootstrap_token is not None
        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            boxes = []
            for n in range(2):
                created = await http.post(
                    "/api/accounts", json={"address": f"full{n}@{DOMAIN}", "auth_key": "ef" * 32}, headers=auth
                )
                assert created.status_code == 201, created.text
                boxes.append(created.json())

            filler = small_disk / "filler"
            await asyncio.to_thread(fill, filler, leave=1_500_000)
            ledger, replies, until = Ledger(), Replies(), threading.Event()
            threads = [
                threading.Thread(
                    target=sender,
                    args=(server.smtp_port,),
                    kwargs={"name": f"s{n}", "boxes": boxes, "ledger": ledger, "replies": replies, "until": until},
                    daemon=True,
                )
                for n in range(SENDERS)
            ]
            for thread in threads:
                thread.start()
            # Run until the disk has been in the way for a while (or give up after 60 s).
            for _ in range(600):
                await asyncio.sleep(0.1)
                with replies.lock:
                    refused = sum(1 for c in replies.codes if c != 250)
                if refused >= 3 * SENDERS or replies.dropped:
                    break
            until.set()
            for thread in threads:
                await asyncio.to_thread(thread.join, 60)
            assert not replies.dropped, replies.dropped
            stored = replies.codes.count(250)
            temporary = [c for c in replies.codes if c != 250]
            assert temporary, f"the disk never filled: {stored} messages stored"
            assert all(400 <= c < 500 for c in temporary), sorted(set(temporary))
            assert server.alive
            assert (await http.get("/healthz")).status_code == 200

            # Space returns: mail is taken again, on the same connections' successors.
            filler.unlink()
            again = Replies()
            await asyncio.to_thread(
                sender,
                server.smtp_port,
                name="after",
                boxes=boxes,
                ledger=ledger,
                replies=again,
                until=_after(3, again),
            )
            assert again.codes[:3] == [250, 250, 250], again.codes
            checked = await verify(http, auth, boxes, ledger)
        print(
            f"full disk: {stored} stored then {len(temporary)} answered {sorted(set(temporary))}; "
            f"after space returned {again.codes.count(250)} stored; {checked} copies verified"
        )
    finally:
        await server.stop()


def _after(count: int, replies: Replies) -> threading.Event:
    """An event that is set once `replies` holds `count` answers (checked by the sender's loop)."""

    class Enough(threading.Event):
        def is_set(self) -> bool:
            return len(replies.codes) >= count

    return Enough()
