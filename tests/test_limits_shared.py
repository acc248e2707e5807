"""Several inboxd instances on one PostgreSQL schema and one Redis share one set of limits.

First two `Inboxd` objects in this process, then two `python -m inboxd serve` OS processes. The
free rate is 0.2/s (a token every 5 s), so no refill can land between two requests of a test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.config import Settings
from inboxd.events import LocalBus
from inboxd.services.limits import month_of
from inboxd.services.users import UserService
from inboxd.store import ops_usage
from inboxd.store.connect import open_database
from tests.conftest import REDIS_URL, Clock
from tests.test_limits import REAL

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

SHARED = {**REAL, "redis_url": REDIS_URL, "free_rps": 0.2, "pro_rps": 1000.0, "pro_ops_limit": 4}


async def make_users(settings: Settings) -> tuple[str, str, str]:
    """A free and a Pro user with a token each, made before any server starts (so none bootstraps)."""
    db = await open_database(settings)
    try:
        users = UserService(db, clock=Clock(), bus=LocalBus())
        free = await users.create_user(f"f{uuid.uuid4().hex[:6]}@example.test", plan="free")
        pro = await users.create_user(f"p{uuid.uuid4().hex[:6]}@example.test", plan="pro")
        return pro.id, (await users.create_token(free, "t")).value, (await users.create_token(pro, "t")).value
    finally:
        await db.close()


async def stored_ops(settings: Settings, user_id: str, month: str) -> int:
    db = await open_database(settings)
    try:
        return await db.read(partial(ops_usage.get_count, user_id=user_id, month=month))
    finally:
        await db.close()


async def check_shared_budget(first: httpx.AsyncClient, second: httpx.AsyncClient, free: str, pro: str) -> None:
    missing = f"/api/accounts/{uuid.uuid4()}"
    free_auth, pro_auth = {"Authorization": f"Bearer {free}"}, {"Authorization": f"Bearer {pro}"}
    # One rate budget: the free user's token spent on the first instance is gone on the second.
    assert (await first.get(missing, headers=free_auth)).status_code == 404
    refused = await second.get(missing, headers=free_auth)
    assert refused.status_code == 429
    assert refused.json() == {"error": "rate_limit_exceeded"}
    # One operations budget: four operations in all, wherever they land.
    for n, client in enumerate([first, second, first, second]):
        answer = await client.get(missing, headers=pro_auth)
        assert answer.status_code == 404
        assert answer.headers["X-Ops-Used"] == str(n + 1)
    for client in (first, second):
        out = await client.get(missing, headers=pro_auth)
        assert out.status_code == 429
        assert out.json()["error"] == "ops_quota_exceeded"


async def test_two_instances_share_one_redis_budget(make_settings: Any, clock: Clock) -> None:
    settings: Settings = make_settings(**SHARED)
    pro_id, free, pro = await make_users(settings)
    servers = [Inboxd(settings, clock=clock), Inboxd(settings, clock=clock)]
    for server in servers:
        await server.start()
    try:
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{servers[0].http_port}") as first,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{servers[1].http_port}") as second,
        ):
            await check_shared_budget(first, second, free, pro)
        user = await servers[0].services.users.user_by_email(await _email_of(servers[0], pro))
        assert await servers[1].services.admission.usage(user) == (4, 4)
    finally:
        for server in servers:
            await server.stop()
    # Each instance flushed its own share at stop; together they make the whole count.
    assert await stored_ops(settings, pro_id, month_of(clock())) == 4


async def _email_of(server: Inboxd, token: str) -> str:
    principal = await server.services.users.authenticate(token, server.services.mailbox_tokens)
    return principal.user.email


class Processes:
    """`python -m inboxd serve` processes this test started, stopped with SIGTERM as an operator would."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[asyncio.subprocess.Process] = []

    async def spawn(self, settings: Settings, name: str) -> int:
        env = {
            **os.environ,
            "INBOXD_DATA_DIR": str(self.tmp_path / name),
            "INBOXD_DATABASE_URL": settings.database_url,
            "INBOXD_DATABASE_SCHEMA": settings.database_schema,
            "INBOXD_REDIS_URL": settings.redis_url,
            "INBOXD_REDIS_PREFIX": settings.redis_prefix,
            "INBOXD_HTTP_PORT": "0",
            "INBOXD_SMTP_PORT": "0",
            "INBOXD_SUBMISSION_PORT": "0",
            "INBOXD_LOG_LEVEL": "warning",
            **{f"INBOXD_{k.upper()}": str(v) for k, v in SHARED.items() if k != "redis_url"},
        }
        log_path = self.tmp_path / f"{name}.log"
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "inboxd", "serve", env=env, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        finally:
            os.close(log)
        self.started.append(proc)
        assert proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, f"inboxd exited: {log_path.read_text()}"
            if line.startswith("inboxd: HTTP on "):
                return int(line.split()[3].rsplit(":", 1)[1])

    async def stop(self) -> list[int]:
        for proc in self.started:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        return [await asyncio.wait_for(proc.wait(), 30) for proc in self.started]


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[Processes]:
    running = Processes(tmp_path)
    try:
        yield running
    finally:
        await running.stop()


async def test_two_processes_share_one_redis_budget(make_settings: Any, processes: Processes) -> None:
    settings: Settings = make_settings(**SHARED)
    pro_id, free, pro = await make_users(settings)
    ports = [await processes.spawn(settings, "a"), await processes.spawn(settings, "b")]
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[0]}") as first,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[1]}") as second,
    ):
        await check_shared_budget(first, second, free, pro)
    assert await processes.stop() == [0, 0]
    # At a clean stop each process wrote its share of the count.
    assert await stored_ops(settings, pro_id, month_of(time.time())) == 4
