"""The per-user mailbox cap holds when two inboxd processes create for one user at the same time
(PostgreSQL: each process has its own writer, so their transactions interleave)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from inboxd.config import Settings
from inboxd.events import LocalBus
from inboxd.services.users import UserService
from inboxd.store.connect import open_database
from inboxd.store.db import Tx
from inboxd.store.schema import mailboxes
from inboxd.store.sql import Statement
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

CAP = 3


async def test_cap_holds_across_two_processes(make_settings: Any, tmp_path: Path) -> None:
    settings: Settings = make_settings()
    env = {
        "INBOXD_DATABASE_URL": settings.database_url,
        "INBOXD_DATABASE_SCHEMA": settings.database_schema,
        "INBOXD_FREE_MAX_MAILBOXES": str(CAP),
        "INBOXD_FREE_RPS": "1000",
        "INBOXD_FREE_CREATE_INTERVAL": "0",
    }
    servers = [await ServerProcess.start(tmp_path / name, **env) for name in ("a", "b")]
    try:
        db = await open_database(settings)
        try:
            users = UserService(db, clock=time.time, bus=LocalBus())
            user = await users.create_user(f"cap-{uuid.uuid4().hex[:6]}@example.test", plan="free")
            token = (await users.create_token(user, "cap")).value
        finally:
            await db.close()
        auth = {"Authorization": f"Bearer {token}"}
        clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{s.http_port}", timeout=60) for s in servers]
        try:
            for round_ in range(2):
                answers = await asyncio.gather(
                    *(
                        clients[n % 2].post(
                            "/api/accounts",
                            json={"address": f"r{round_}n{n}@{settings.default_domain}", "auth_key": "ab" * 32},
                            headers=auth,
                        )
                        for n in range(40)
                    )
                )
                codes = [a.status_code for a in answers]
                assert set(codes) <= {201, 403}, [a.text for a in answers]
                created = sum(code == 201 for code in codes)
                assert created <= (CAP if round_ == 0 else 0), codes
        finally:
            for client in clients:
                await client.aclose()
        db = await open_database(settings)
        try:
            count = await db.read(_count_mailboxes(user.id))
        finally:
            await db.close()
        assert count == CAP
    finally:
        for server in servers:
            await server.stop()


COUNT_MAILBOXES = Statement(
    lambda: sa.select(sa.func.count()).select_from(mailboxes).where(mailboxes.c.user_id == sa.bindparam("user_id"))
)


def _count_mailboxes(user_id: str) -> Any:
    async def count(tx: Tx) -> int:
        return int(await tx.fetchval(COUNT_MAILBOXES, user_id=user_id))

    return count
