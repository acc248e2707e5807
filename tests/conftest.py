"""Shared test harness: a real inboxd (SMTP + HTTP) per test on SQLite or PostgreSQL.

Every test gets fresh storage: SQLite copies a database migrated once per session; PostgreSQL
works in a schema of its own per test run (so parallel runs never meet) and truncates between
tests. Time is a `Clock` that runs with the wall clock but can be moved forward.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import smtplib
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvloop

from inboxd.app import Inboxd
from inboxd.config import Settings
from inboxd.store import migrate
from inboxd.store.schema import metadata
from tests.webhook_receiver import Receiver

# Browser fixtures (Playwright with Debian's chromium), for the dashboard's tests.
pytest_plugins = ["tests.browser", "pytester"]

# Every inboxd a test starts, in this process or as a child that inherits the environment, binds
# its submission listener to a free port: the default 2587 would collide between parallel runs.
os.environ.setdefault("INBOXD_SUBMISSION_PORT", "0")

PG_URL = os.environ.get("INBOXD_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("INBOXD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def free_port() -> int:
    """A port nothing listens on, for a server a test starts on a port of its own choosing.

    Taken below the kernel's ephemeral range (ip_local_port_range, 32768 and up here), so no
    `bind(("127.0.0.1", 0))` and no outgoing connection of another test running meanwhile can take
    it between this check and its use, as happened with ports the kernel handed out.
    """
    low, _ = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


# Another client address on this machine: the servers listen on 127.0.0.1 only, and on Linux a
# client socket bound to any 127.x address reaches them, so "per IP" rules are tested with two IPs.
OTHER_CLIENT_IP = "127.0.0.2"


def http_client_from(source: str, base_url: str) -> httpx.AsyncClient:
    """An HTTP client whose connections come from `source` (e.g. OTHER_CLIENT_IP)."""
    return httpx.AsyncClient(base_url=base_url, timeout=30, transport=httpx.AsyncHTTPTransport(local_address=source))


class Clock:
    """Wall-clock time plus an offset that tests move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        import time

        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Tests run on uvloop, as `inboxd serve` does."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[str]:
    schema = f"t_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    migrate.upgrade(PG_URL, schema=schema)
    yield schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "inboxd.sqlite3"
    migrate.alembic_upgrade(f"sqlite:///{path}")
    return path


def truncate_all(schema: str) -> None:
    tables = ", ".join(f'"{schema}"."{t.name}"' for t in metadata.sorted_tables)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables}")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest, sqlite_template: Path) -> Iterator[Any]:
    """Settings for a test's inboxd; call with overrides. Storage is fresh for every test."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    base: dict[str, Any] = {
        "data_dir": data_dir,
        "http_port": 0,
        "smtp_port": 0,
        "submission_port": 0,
        "sweep_interval": 3600.0,
        "redis_prefix": f"inboxd-test:{uuid.uuid4().hex[:8]}:",
        # Generous limits, so tests that fire requests quickly are not refused; the limit tests
        # (tests/test_limits.py) pass the real values.
        "free_rps": 1000.0,
        "pro_rps": 1000.0,
        "free_create_interval": 0.0,
        "pro_create_interval": 0.0,
        "public_rps": 1000.0,
        "web_rps": 1000.0,
        "domain_verify_interval": 0.0,
    }
    schema = ""
    if backend == "postgres":
        schema = request.getfixturevalue("pg_schema")
        truncate_all(schema)
        base.update(database_url=PG_URL, database_schema=schema)
    else:
        shutil.copy(sqlite_template, data_dir / "inboxd.sqlite3")

    def build(**overrides: Any) -> Settings:
        return Settings(**{**base, **overrides})

    yield build


@dataclass
class Harness:
    """A running inboxd and the clients a test talks to it with."""

    server: Inboxd
    http: httpx.AsyncClient
    clock: Clock
    admin_token: str
    counter: int = 0
    extra: list[Inboxd] = field(default_factory=list)

    @property
    def domain(self) -> str:
        return self.server.settings.default_domain

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.admin_token}"}

    async def new_user(self, plan: str = "pro", email: str | None = None) -> str:
        """A user with one API token; returns the token."""
        users = self.server.services.users
        self.counter += 1
        user = await users.create_user(email or f"user{self.counter}-{uuid.uuid4().hex[:6]}@example.test", plan=plan)
        return (await users.create_token(user, "test")).value

    async def new_mailbox(self, token: str | None = None, local: str | None = None) -> dict[str, Any]:
        self.counter += 1
        address = f"{local or f'box{self.counter}'}@{self.domain}"
        response = await self.http.post(
            "/api/accounts", json={"address": address, "password": "secret123"}, headers=self.auth(token)
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    async def send(self, to: str | list[str], message: EmailMessage | bytes | None = None, **kw: str) -> dict[str, Any]:
        return await asyncio.to_thread(send_mail, self.server.smtp_port, to, message, **kw)


def simple_message(
    subject: str = "Hello", body: str = "Your code is 123456.", sender: str = "alice@example.org"
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = f"Alice <{sender}>"
    msg["To"] = "someone@example.test"
    msg["Subject"] = subject
    msg.set_content(body)
    return msg


def send_mail(
    port: int, to: str | list[str], message: EmailMessage | bytes | None = None, sender: str = "alice@example.org"
) -> dict[str, Any]:
    recipients = [to] if isinstance(to, str) else to
    payload = message if message is not None else simple_message(sender=sender)
    raw = payload if isinstance(payload, bytes) else payload.as_bytes(policy=SMTP)
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        refused: dict[str, Any] = client.sendmail(sender, recipients, raw)
    return refused


@pytest.fixture
async def harness(make_settings: Any, clock: Clock) -> AsyncIterator[Harness]:
    server = Inboxd(make_settings(), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        h = Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
        try:
            yield h
        finally:
            for other in h.extra:
                await other.stop()
            await server.stop()


@pytest.fixture
async def receiver(tmp_path: Path) -> AsyncIterator[Receiver]:
    """A real HTTPS webhook receiver with a CA of its own (`receiver.ca_path`)."""
    found = Receiver.create(tmp_path)
    await found.start()
    try:
        yield found
    finally:
        await found.stop()
