"""The expiry and purge sweep runs inside the group-commit writer, so every delivery waiting for
its 250 waits behind it: its queries must be served by indexes, never by a scan of `messages`,
and it works in small batches."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql

from inboxd.store import message_sweeps as message_store
from inboxd.store import migrate
from inboxd.store.schema import message_sources, messages
from inboxd.store.sql import Statement
from tests.conftest import PG_URL, Harness

SWEEP_QUERIES: dict[str, tuple[Statement, dict[str, float]]] = {
    "expire_due": (message_store.EXPIRE_DUE, {"now": 1.0, "limit": 200}),
    "purge_deleted": (message_store.PURGE_DELETED, {"limit": 200}),
    "purge_expired": (message_store.PURGE_EXPIRED, {"before": 1.0, "limit": 200}),
}


@pytest.mark.parametrize("name", sorted(SWEEP_QUERIES))
def test_sweep_queries_use_an_index_on_sqlite(name: str, sqlite_template: Path) -> None:
    statement, params = SWEEP_QUERIES[name]
    compiled = statement.compiled("sqlite")  # the text and parameters the engine runs
    with sqlite3.connect(sqlite_template) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {compiled.sql}", compiled.args(params))]
    on_messages = [step for step in plan if " messages" in step]
    assert on_messages, plan
    for step in on_messages:
        # "SEARCH messages USING INDEX …" or a scan of a partial index only; never "SCAN messages".
        assert re.match(r"(SEARCH|SCAN) messages USING (COVERING )?INDEX ix_messages_", step), plan
        if step.startswith("SCAN"):
            assert "ix_messages_deleted" in step, plan  # the partial index holds deleted rows only


@pytest.mark.parametrize("name", sorted(SWEEP_QUERIES))
def test_sweep_queries_use_an_index_on_postgres(name: str) -> None:
    statement, params = SWEEP_QUERIES[name]
    compiled = statement.compiled("postgresql")
    schema = f"plan_{uuid.uuid4().hex[:10]}"
    migrate.upgrade(PG_URL, schema=schema)
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            # A small table is cheapest to scan; forbid that, so the plan shows whether an index
            # can serve the query at all (if none can, PostgreSQL still scans).
            conn.execute("SET enable_seqscan = off")
            # A prepared statement's generic plan, as asyncpg's is after a few runs: the
            # parameters stay parameters.
            conn.execute(f"PREPARE sweep AS {compiled.sql}")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            args = sql.SQL(", ").join(sql.Literal(a) for a in compiled.args(params))
            explain = sql.SQL("EXPLAIN EXECUTE sweep({})").format(args)
            plan = "\n".join(str(r[0]) for r in conn.execute(explain))
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert "Seq Scan" not in plan, plan
    assert "ix_messages_" in plan, plan


async def test_a_sweep_purges_more_than_one_batch(harness: Harness) -> None:
    box = await harness.new_mailbox()
    raw = b"From: a@example.org\r\nSubject: s\r\n\r\nbody\r\n"
    recipient = await harness.server.services.ingest.resolve(box["address"])
    for _ in range(450):  # more than two batches of the sweep
        await harness.server.services.ingest.deliver(sender="a@example.org", recipients=[recipient], raw=raw)
    retention = harness.server.settings.retention_pro
    harness.clock.advance(retention + harness.server.settings.expired_grace + 1)
    await harness.server._workers[0].sweep()
    db = harness.server._db
    assert db is not None
    count_messages = Statement(lambda: sa.select(sa.func.count()).select_from(messages))
    count_sources = Statement(lambda: sa.select(sa.func.count()).select_from(message_sources))
    assert await db.read(lambda tx: tx.fetchval(count_messages)) == 0
    assert await db.read(lambda tx: tx.fetchval(count_sources)) == 0
    listing = await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth())
    assert listing.json()["used"] == 0
