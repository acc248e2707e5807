"""One copy of the source per delivery: a message to many mailboxes stores its bytes once, each
copy reads them, deleting one copy keeps the others readable, and the bytes go with the last
copy. `used` still counts the size in every mailbox. Migration 0002 moves old data both ways."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command

from inboxd.store import migrate
from inboxd.store.db import Database
from inboxd.store.schema import message_sources, messages
from inboxd.store.sql import Statement
from tests.conftest import PG_URL, Harness, simple_message
from tests.test_smtp import RawSmtp


def database(harness: Harness) -> Database:
    db = harness.server._db
    assert db is not None
    return db


MESSAGES = Statement(lambda: sa.select(sa.func.count()).select_from(messages))
SOURCES = Statement(lambda: sa.select(sa.func.count()).select_from(message_sources))
# The `refs` of the one source there is.
REFS = Statement(lambda: sa.select(message_sources.c.refs))


def _references() -> Statement:
    """Each source's id, `refs`, and the number of copies not deleted that name it."""
    s, m = message_sources.alias("s"), messages.alias("m")
    copies = sa.select(sa.func.count()).where(m.c.source_id == s.c.id, m.c.deleted == 0).scalar_subquery()
    return Statement(lambda: sa.select(s.c.id, s.c.refs, copies))


REFERENCES = _references()


async def count(harness: Harness, statement: Statement) -> int:
    return int(await database(harness).read(lambda tx: tx.fetchval(statement)))


async def assert_references_hold(harness: Harness) -> None:
    """Each source's `refs` is the number of copies not deleted that name it, and no source is
    left that none names."""
    wrong = await database(harness).read(lambda tx: tx.fetch(REFERENCES))
    assert [(r[0], r[1], r[2]) for r in wrong if r[1] != r[2] or r[1] <= 0] == []


async def quick_mailbox(harness: Harness, n: int) -> dict[str, Any]:
    """A mailbox created with an `auth_key`, which skips the Argon2 derivation of a password."""
    response = await harness.http.post(
        "/api/accounts",
        json={"address": f"shared{n}-{uuid.uuid4().hex[:6]}@{harness.domain}", "auth_key": "ab" * 32},
        headers=harness.auth(),
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_one_source_for_a_hundred_recipients(harness: Harness) -> None:
    boxes = list(await asyncio.gather(*(quick_mailbox(harness, n) for n in range(100))))
    message = simple_message(subject="to a hundred")
    await harness.send([b["address"] for b in boxes], message)
    assert await count(harness, MESSAGES) == 100
    assert await count(harness, SOURCES) == 1
    assert await count(harness, REFS) == 100

    async def source_of(box: dict[str, Any]) -> tuple[int, bytes, int]:
        base = f"/api/accounts/{box['id']}"
        [item] = (await harness.http.get(f"{base}/messages", headers=harness.auth())).json()["messages"]
        source = await harness.http.get(f"{base}/messages/{item['id']}/source", headers=harness.auth())
        used = (await harness.http.get(base, headers=harness.auth())).json()["used"]
        return source.status_code, source.content, used - item["size"]

    first = await source_of(boxes[0])
    assert first[0] == 200 and first[2] == 0  # `used` is the message's size
    assert await source_of(boxes[99]) == first

    # Deleting one copy keeps the others readable.
    base = f"/api/accounts/{boxes[0]['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    assert (await harness.http.delete(f"{base}/{item['id']}", headers=harness.auth())).status_code == 204
    assert await count(harness, REFS) == 99
    await assert_references_hold(harness)
    assert await source_of(boxes[1]) == first
    # Deleting a mailbox lets go of its copy too.
    assert (await harness.http.delete(f"/api/accounts/{boxes[1]['id']}", headers=harness.auth())).status_code == 204
    assert await count(harness, REFS) == 98
    await assert_references_hold(harness)
    assert await source_of(boxes[2]) == first


async def test_the_last_copy_takes_the_bytes_with_it(harness: Harness) -> None:
    boxes = [await quick_mailbox(harness, n) for n in range(3)]
    await harness.send([b["address"] for b in boxes])
    for box in boxes:
        assert await count(harness, SOURCES) == 1
        base = f"/api/accounts/{box['id']}/messages"
        [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
        assert (await harness.http.delete(f"{base}/{item['id']}", headers=harness.auth())).status_code == 204
    assert await count(harness, SOURCES) == 0


async def test_expired_copies_let_go_at_purge(harness: Harness) -> None:
    boxes = [await quick_mailbox(harness, n) for n in range(3)]
    await harness.send([b["address"] for b in boxes])
    base = f"/api/accounts/{boxes[0]['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    assert (await harness.http.delete(f"{base}/{item['id']}", headers=harness.auth())).status_code == 204
    settings = harness.server.settings
    harness.clock.advance(settings.retention_pro + 1)
    sweeper = harness.server._workers[0]
    await sweeper.sweep()  # expired, still within the grace: the bytes stay
    assert await count(harness, REFS) == 2
    await assert_references_hold(harness)
    harness.clock.advance(settings.expired_grace + 1)
    await sweeper.sweep()
    assert await count(harness, MESSAGES) == 0
    assert await count(harness, SOURCES) == 0


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(sql).fetchall()]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migration_0002_upgrades_and_downgrades_with_data(backend: str, tmp_path: Path) -> None:
    """Old rows (one source per copy) survive the upgrade, and shared sources survive the
    downgrade: every live copy has its bytes in each direction."""
    schema = f"m_{uuid.uuid4().hex[:10]}"
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}" if backend == "sqlite" else PG_URL
    engine = migrate.sync_engine(url, schema=schema if backend == "postgres" else "")
    config = migrate.alembic_config()

    def run(step: str, target: str) -> None:
        with engine.connect() as conn:
            if backend == "postgres":
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            config.attributes["connection"] = conn
            getattr(command, step)(config, target)
            conn.commit()

    def sql(statement: str, *rows: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            if backend == "postgres":
                statement = statement.replace("?", "%s")
            cursor = driver.cursor()
            if rows:
                cursor.executemany(statement, rows)
                result: list[tuple[Any, ...]] = []
            else:
                cursor.execute(statement)
                result = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
            driver.commit()
            return result

    message_row = (
        "INSERT INTO messages (id, mailbox_id, sender, from_header, subject, preview_text, size, deleted, "
        "created_at, expires_at{extra}) VALUES (?, 'mb', 's', 'f', 'subj', 'p', 3, ?, 1.0, 9e9{marks})"
    )
    try:
        run("upgrade", "0002-1")  # the revision before ours
        sql(message_row.format(extra="", marks=""), ("old1", 0), ("old2", 0), ("gone", 1))
        sql("INSERT INTO message_sources (message_id, raw) VALUES (?, ?)", ("old1", b"one"), ("old2", b"two"))
        run("upgrade", "0002")
        assert sql("SELECT id, source_id FROM messages ORDER BY id") == [
            ("gone", "gone"),
            ("old1", "old1"),
            ("old2", "old2"),
        ]
        assert sql("SELECT id, raw, refs FROM message_sources ORDER BY id") == [
            ("old1", b"one", 1),
            ("old2", b"two", 1),
        ]
        # A delivery to three mailboxes under 0002: one source, three references.
        sql(message_row.format(extra=", source_id", marks=", ?"), ("n1", 0, "src"), ("n2", 0, "src"), ("n3", 0, "src"))
        sql("INSERT INTO message_sources (id, raw, refs) VALUES (?, ?, ?)", ("src", b"new", 3))
        run("downgrade", "0002-1")
        assert sql("SELECT message_id, raw FROM message_sources ORDER BY message_id") == [
            ("n1", b"new"),
            ("n2", b"new"),
            ("n3", b"new"),
            ("old1", b"one"),
            ("old2", b"two"),
        ]
        run("upgrade", "head")
        assert len(sql("SELECT id FROM message_sources")) == 5
    finally:
        if backend == "postgres":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        engine.dispose()


def test_sqlite_template_has_shared_sources(sqlite_template: Path) -> None:
    with sqlite3.connect(sqlite_template) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(message_sources)")}
    assert columns == {"id", "raw", "refs", "client_ip", "helo"}


async def test_one_full_mailbox_refuses_the_message_for_all_and_charges_none(make_settings: Any, clock: Any) -> None:
    """SMTP has one reply to DATA: when one recipient's mailbox is full, no copy is stored and no
    mailbox is charged (on PostgreSQL the charge and the inserts are one statement)."""
    from inboxd.app import Inboxd

    async with Inboxd(make_settings(pro_mailbox_quota=3000), clock=clock) as server:
        import httpx

        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", headers=auth) as http:
            boxes = [
                (
                    await http.post("/api/accounts", json={"address": f"{n}@inboxd.localhost", "password": "secret123"})
                ).json()
                for n in ("roomy", "cramped")
            ]
            from tests.conftest import send_mail

            await asyncio.to_thread(send_mail, server.smtp_port, boxes[1]["address"], simple_message(body="y" * 2000))
            before = [(await http.get(f"/api/accounts/{b['id']}")).json()["used"] for b in boxes]
            client = await RawSmtp.connect(server.smtp_port)  # no SIZE: refused at the end of DATA
            await client.cmd("EHLO c")
            await client.cmd("MAIL FROM:<a@example.org>")
            for box in boxes:
                assert (await client.cmd(f"RCPT TO:<{box['address']}>")).startswith("250")
            await client.cmd("DATA")
            body = simple_message(body="z" * 2000).as_bytes().replace(b"\n", b"\r\n")
            assert (await client.cmd(body + b"\r\n.\r\n")).startswith("552 5.2.2")
            await client.close()
            after = [(await http.get(f"/api/accounts/{b['id']}")).json()["used"] for b in boxes]
            counts = [len((await http.get(f"/api/accounts/{b['id']}/messages")).json()["messages"]) for b in boxes]
    assert after == before and before[0] == 0
    assert counts == [0, 1]
