"""The group-commit writer, on which durability rests, on SQLite and PostgreSQL.

Several callers' units of work share one transaction, each in its own SAVEPOINT, and each caller
hears back only after the COMMIT. These tests hold the writer on a first unit so that the units
under test queue up behind it and are run as one batch, then check:
- a unit that fails is rolled back alone, the others of its batch commit;
- a COMMIT that fails (a deferred foreign key, checked only then) fails every caller of the batch;
- nobody is told "done" for data that a fresh connection cannot see;
- a closed store answers a storage error at once rather than leaving the caller waiting forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from inboxd.errors import StorageError
from inboxd.store.db import Database, Joinable, Tx
from inboxd.store.postgres import PostgresDatabase
from inboxd.store.sql import Statement
from inboxd.store.sqlite import SqliteDatabase
from tests.conftest import PG_URL

TABLES = (
    "CREATE TABLE t (v TEXT PRIMARY KEY)",
    "CREATE TABLE parent (id TEXT PRIMARY KEY)",
    "CREATE TABLE child (id TEXT PRIMARY KEY, "
    "parent_id TEXT NOT NULL REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
)

# The TABLES as Core tables, for the statements the units of work run.
t = sa.table("t", sa.column("v", sa.Text))
child = sa.table("child", sa.column("id", sa.Text), sa.column("parent_id", sa.Text))

INSERT_T = Statement(lambda: sa.insert(t).values(v=sa.bindparam("v")))
ALL_T = Statement(lambda: sa.select(t.c.v))
APPEND_T = Statement(lambda: sa.update(t).values(v=t.c.v + "y"))
ONE_T = Statement(lambda: sa.select(t.c.v).where(t.c.v == sa.bindparam("v")))
INSERT_CHILD = Statement(lambda: sa.insert(child).values(id=sa.bindparam("id"), parent_id=sa.bindparam("parent_id")))
COUNT_CHILD = Statement(lambda: sa.select(sa.func.count()).select_from(child))
TXID = Statement(lambda: sa.select(sa.func.txid_current()))
Unit = Callable[[Tx], Coroutine[Any, Any, Any]]


@contextlib.asynccontextmanager
async def fresh_store(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Database, Callable[[str], int]]]:
    """A store holding TABLES on `backend`, and a count of a table's rows through a connection of
    its own (so what it sees is what was committed, even after the store is closed)."""
    if backend == "sqlite":
        path = tmp_path / "writer.sqlite3"
        with sqlite3.connect(path) as setup:
            for statement in TABLES:
                setup.execute(statement)

        def count_sqlite(table: str) -> int:
            with sqlite3.connect(path) as check:
                return int(check.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

        sqlite_db = SqliteDatabase(str(path))
        try:
            yield sqlite_db, count_sqlite
        finally:
            await sqlite_db.close()
        return
    schema = f"w_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        for statement in TABLES:
            conn.execute(statement)

    def count_pg(table: str) -> int:
        with psycopg.connect(PG_URL, autocommit=True) as check:
            row = check.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
            assert row is not None
            return int(row[0])

    pg_db = await PostgresDatabase.connect(PG_URL, schema=schema, size=4)
    try:
        yield pg_db, count_pg
    finally:
        await pg_db.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with fresh_store(request.param, tmp_path) as (store, _):
        yield store


@pytest.fixture(params=["sqlite", "postgres"])
async def counted_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Database, Callable[[str], int]]]:
    async with fresh_store(request.param, tmp_path) as found:
        yield found


def insert(
    value: str, *, then: Callable[[Tx], Coroutine[Any, Any, Any]] | None = None
) -> Callable[[Tx], Coroutine[Any, Any, Any]]:
    async def work(tx: Tx) -> Any:
        await tx.execute(INSERT_T, v=value)
        return None if then is None else await then(tx)

    return work


async def visible(tx: Tx) -> list[str]:
    return sorted(str(r[0]) for r in await tx.fetch(ALL_T))


async def fail(tx: Tx) -> None:
    raise ValueError("this unit fails")


async def txid(tx: Tx) -> int | None:
    """PostgreSQL's transaction id (so a test can see that units shared one); None on SQLite."""
    if tx.dialect != "postgresql":
        return None
    return int(await tx.fetchval(TXID))


async def committed_values(db: Database) -> list[str]:
    return await db.read(visible)


class HeldWriter:
    """Holds the writer busy on a first unit until released, so what is queued meanwhile is run
    afterwards as one batch. On SQLite the unit waits in the writer thread; on PostgreSQL it
    sleeps in the database (a unit may await only its `Tx`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.started = threading.Event()
        self.release = threading.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HeldWriter:
        pause = Statement(lambda: sa.select(sa.func.pg_sleep(0.02)))

        async def hold(tx: Tx) -> None:
            self.started.set()
            if tx.dialect == "sqlite":
                self.release.wait(10)
            else:
                while not self.release.is_set():
                    await tx.execute(pause)

        self.task = asyncio.get_running_loop().create_task(self.db.write(hold))
        for _ in range(1000):
            if self.started.is_set():
                return self
            await asyncio.sleep(0.01)
        raise AssertionError("the writer never started the holding unit")

    async def queue(self, *works: Callable[[Tx], Coroutine[Any, Any, Any]]) -> list[asyncio.Task[Any]]:
        tasks = [asyncio.get_running_loop().create_task(self.db.write(w)) for w in works]
        await asyncio.sleep(0.05)  # every task has run up to its queued write
        return tasks

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self.task is not None
        await self.task


async def test_a_failing_unit_rolls_back_alone(db: Database) -> None:
    async with HeldWriter(db) as held:
        first, failing, last = await held.queue(insert("a", then=txid), insert("b", then=fail), insert("c", then=txid))
    results = await asyncio.gather(first, failing, last, return_exceptions=True)
    assert isinstance(results[1], ValueError)
    assert results[0] == results[2]  # PostgreSQL: one transaction for the batch (None on SQLite)
    assert await committed_values(db) == ["a", "c"]


async def test_a_unit_sees_the_earlier_units_of_its_batch_but_not_a_failed_one(db: Database) -> None:
    async with HeldWriter(db) as held:
        tasks = await held.queue(insert("a"), insert("b", then=fail), insert("c", then=visible))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[2] == ["a", "c"]


async def orphan(tx: Tx) -> None:
    # Passes its own SAVEPOINT: the deferred foreign key is checked only at COMMIT.
    await tx.execute(INSERT_CHILD, id="orphan", parent_id="missing")


async def test_a_failed_commit_fails_every_caller_of_the_batch(db: Database) -> None:
    async with HeldWriter(db) as held:
        tasks = await held.queue(insert("a"), orphan, insert("c"))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results), results
    assert await committed_values(db) == []
    assert await db.read(lambda tx: tx.fetchval(COUNT_CHILD)) == 0
    # The writer goes on: the next batch commits.
    await db.write(insert("after"))
    assert await committed_values(db) == ["after"]


async def test_nobody_hears_done_before_a_fresh_connection_sees_the_data(db: Database) -> None:
    async def one(n: int) -> bool:
        value = f"v{n:04d}"
        await db.write(insert(value))
        # The read runs on another connection than the writer's: it sees only what is committed.
        found = await db.read(lambda tx: tx.fetchval(ONE_T, v=value))
        return bool(found == value)

    assert all(await asyncio.gather(*(one(n) for n in range(300))))
    assert len(await committed_values(db)) == 300


async def test_a_closed_store_raises_instead_of_hanging(db: Database) -> None:
    await db.write(insert("before"))
    await db.close()
    with pytest.raises(StorageError):
        await asyncio.wait_for(db.write(insert("after")), 5)
    with pytest.raises(StorageError):
        await asyncio.wait_for(db.read(visible), 5)
    await db.close()  # closing twice is harmless (the fixture closes again)


async def test_writes_racing_close_all_get_an_answer(counted_db: tuple[Database, Callable[[str], int]]) -> None:
    """Writes queued around the moment of close either commit or fail; none waits forever."""
    store, count = counted_db
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(store.write(insert(f"v{n}"))) for n in range(100)]
    closing = loop.create_task(store.close())
    for n in range(100, 200):  # some queue before the close mark, some after it
        tasks.append(loop.create_task(store.write(insert(f"v{n}"))))
        await asyncio.sleep(0)
    await closing
    done, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending
    outcomes = [t.exception() for t in done]
    assert all(o is None or isinstance(o, StorageError) for o in outcomes)
    assert await asyncio.to_thread(count, "t") == sum(1 for o in outcomes if o is None)


async def test_a_deadlock_with_another_process_is_retried_not_reported() -> None:
    """Two processes' writers lock the same rows in opposite orders; PostgreSQL fails one of the
    transactions to break the deadlock. Nobody was answered for it yet, so the writer runs that
    batch again and both callers hear success (before, one heard a storage failure: a 451 for
    mail that a sender would then send again)."""
    schema = f"w_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".rows (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)')
        conn.execute(f'INSERT INTO "{schema}".rows VALUES (1, 0), (2, 0)')
    first = await PostgresDatabase.connect(PG_URL, schema=schema, size=2)
    second = await PostgresDatabase.connect(PG_URL, schema=schema, size=2)
    holding = {1: asyncio.Event(), 2: asyncio.Event()}
    rows_table = sa.table("rows", sa.column("id", sa.Integer), sa.column("n", sa.Integer))
    bump = Statement(
        lambda: sa.update(rows_table).values(n=rows_table.c.n + 1).where(rows_table.c.id == sa.bindparam("id"))
    )
    read = Statement(lambda: sa.select(rows_table.c.id, rows_table.c.n).order_by(rows_table.c.id))

    def crosswise(mine: int, theirs: int) -> Callable[[Tx], Coroutine[Any, Any, None]]:
        async def work(tx: Tx) -> None:
            await tx.execute(bump, id=mine)
            holding[mine].set()
            await holding[theirs].wait()  # both hold one row and now ask for the other's
            await tx.execute(bump, id=theirs)

        return work

    try:
        async with asyncio.timeout(30):
            await asyncio.gather(first.write(crosswise(1, 2)), second.write(crosswise(2, 1)))
        rows = await first.read(lambda tx: tx.fetch(read))
        assert [(r[0], r[1]) for r in rows] == [(1, 2), (2, 2)]  # each ran once, in the end
    finally:
        await first.close()
        await second.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def pg() -> AsyncIterator[PostgresDatabase]:
    schema = f"w_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".t (v TEXT PRIMARY KEY)')
    pg_db = await PostgresDatabase.connect(PG_URL, schema=schema, size=4)
    try:
        yield pg_db
    finally:
        await asyncio.wait_for(pg_db.close(), 10)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def test_a_terminated_writer_connection_fails_its_batch_at_once_and_writing_goes_on(
    pg: PostgresDatabase,
) -> None:
    """pg_terminate_backend on the writer's connection mid-batch (an administrator, a failover):
    that batch's callers hear a storage error at once, and the next batch runs on a new connection."""
    backend: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    backend_pid = Statement(lambda: sa.select(sa.func.pg_backend_pid()))
    sleep = Statement(lambda: sa.select(sa.func.pg_sleep(60)))

    async def hold(tx: Tx) -> None:
        backend.set_result(int(await tx.fetchval(backend_pid)))
        await tx.execute(sleep)

    held = asyncio.get_running_loop().create_task(pg.write(hold))
    pid = await asyncio.wait_for(backend, 10)
    queued = asyncio.get_running_loop().create_task(pg.write(insert("queued")))
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    with pytest.raises(StorageError):
        await asyncio.wait_for(held, 5)
    await asyncio.wait_for(queued, 5)
    await asyncio.wait_for(pg.write(insert("after")), 5)
    assert await committed_values(pg) == ["after", "queued"]


async def test_a_writer_task_that_dies_fails_every_write_at_once(pg: PostgresDatabase) -> None:
    """A unit of work that raises a BaseException (here CancelledError, as one awaiting something
    that was cancelled would) ends the writer task. Its batch, the writes queued behind it and
    every later write fail at once with a storage error that says so, instead of waiting for
    good for a COMMIT that will never come (before, each of them hung)."""
    release = asyncio.Event()
    started = asyncio.Event()

    async def dying(tx: Tx) -> None:
        await tx.execute(INSERT_T, v="dying")
        started.set()
        await release.wait()
        raise asyncio.CancelledError

    loop = asyncio.get_running_loop()
    first = loop.create_task(pg.write(dying))
    await asyncio.wait_for(started.wait(), 10)
    queued = [loop.create_task(pg.write(insert(f"q{n}"))) for n in range(3)]
    await asyncio.sleep(0)  # every queued write is in the queue
    release.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, *queued, return_exceptions=True), 5)
    assert all(isinstance(o, StorageError) for o in outcomes), outcomes
    assert all("writer stopped" in str(o) for o in outcomes[1:]), outcomes
    with pytest.raises(StorageError, match="writer stopped"):
        await asyncio.wait_for(pg.write(insert("later")), 1)
    assert await committed_values(pg) == []  # reads go on; nothing half-written was committed


async def test_sqlite_writes_of_one_loop_turn_reach_the_writer_together(tmp_path: Path) -> None:
    """The writes an event loop's turn makes are handed to the writer thread in one put (one
    wake-up), and so commit as one batch, in the order they were made."""
    async with fresh_store("sqlite", tmp_path) as (store, _):
        assert isinstance(store, SqliteDatabase)
        sizes: list[int] = []
        store.on_batch = sizes.append
        await asyncio.gather(*(store.write(insert(f"v{n:02d}")) for n in range(20)))
        assert sizes == [20]
        assert await committed_values(store) == [f"v{n:02d}" for n in range(20)]


def _open_temporary_files() -> list[str]:
    """The files this process holds open that SQLite made as temporary ones (`etilqs_*`)."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if "etilqs_" in os.readlink(fd):
                found.append(os.readlink(fd))
    return found


async def test_sqlite_units_keep_their_savepoint_journal_in_memory(tmp_path: Path) -> None:
    """When a unit of a batch fails, the batch runs again with each unit in a savepoint, whose
    statement journal keeps the pages the unit changes as they were. Past 64 KiB SQLite would spill
    it into a temporary file (an open, an unlink, two writes a page); the writer keeps it in memory.
    The unit looks for such a file while its savepoint is open."""
    async with fresh_store("sqlite", tmp_path) as (store, count):
        seen: list[list[str]] = []

        async def fill(tx: Tx) -> None:
            for n in range(300):  # about 600 KiB of pages, committed
                await tx.execute(INSERT_T, v=f"{n:04d}" + "x" * 2000)

        async def change_every_page(tx: Tx) -> None:
            await tx.execute(APPEND_T)
            seen.append(_open_temporary_files())

        async def fail(tx: Tx) -> None:
            raise ValueError("so the batch runs again, unit by unit")

        await store.write(fill)
        answers = await asyncio.gather(store.write(change_every_page), store.write(fail), return_exceptions=True)
        assert answers[0] is None and isinstance(answers[1], ValueError)
        assert seen == [[], []]  # the whole batch, then its unit in a savepoint
        assert count("t") == 300


async def test_sqlite_a_batch_runs_whole_and_again_unit_by_unit_only_when_a_unit_fails(tmp_path: Path) -> None:
    """A batch runs in one transaction without savepoints; when a unit fails it is rolled back and
    run again with a savepoint per unit, so the others commit once and the failed one not at all.
    A lone unit that fails is not run again: its failure is its answer."""
    async with fresh_store("sqlite", tmp_path) as (store, _):
        runs: list[str] = []

        def unit(value: str, *, fail: bool = False) -> Callable[[Tx], Coroutine[Any, Any, None]]:
            async def work(tx: Tx) -> None:
                runs.append(value)
                await tx.execute(INSERT_T, v=value)
                if fail:
                    raise ValueError(value)

            return work

        await asyncio.gather(store.write(unit("a")), store.write(unit("b")))
        assert runs == ["a", "b"]
        runs.clear()
        answers = await asyncio.gather(
            store.write(unit("c")), store.write(unit("d", fail=True)), store.write(unit("e")), return_exceptions=True
        )
        assert isinstance(answers[1], ValueError) and answers[0] is None and answers[2] is None
        assert runs == ["c", "d", "c", "d", "e"]
        assert await committed_values(store) == ["a", "b", "c", "e"]
        runs.clear()
        with pytest.raises(ValueError):
            await store.write(unit("f", fail=True))
        assert runs == ["f"]
        assert await committed_values(store) == ["a", "b", "c", "e"]


async def test_sqlite_a_batch_whose_commit_fails_is_not_run_again(tmp_path: Path) -> None:
    """A COMMIT that fails (here a deferred foreign key) is the transaction's failure, not a
    unit's: every unit of the batch fails with it, and none runs a second time."""
    async with fresh_store("sqlite", tmp_path) as (store, _):
        runs: list[str] = []

        def counted(
            name: str, work: Callable[[Tx], Coroutine[Any, Any, Any]]
        ) -> Callable[[Tx], Coroutine[Any, Any, Any]]:
            async def run(tx: Tx) -> Any:
                runs.append(name)
                return await work(tx)

            return run

        answers = await asyncio.gather(
            store.write(counted("a", insert("a"))), store.write(counted("orphan", orphan)), return_exceptions=True
        )
        assert all(isinstance(a, StorageError) for a in answers), answers
        assert runs == ["a", "orphan"]
        assert await committed_values(store) == []


async def test_joinable_neighbours_run_as_one_call_and_alone_when_the_call_fails(db: Database) -> None:
    """Adjacent `Joinable` units of one `many` run as one call with their items in order, each
    caller getting its own result; a unit of another kind between them keeps its place (the runs
    on either side of it are called apart). When the joined call fails, the batch runs again
    with each unit alone, so only the unit that fails fails."""
    calls: list[list[str]] = []

    async def many(tx: Tx, values: Sequence[str]) -> list[str]:
        calls.append(list(values))
        for value in values:
            if value.startswith("bad"):
                raise ValueError(value)
            await tx.execute(INSERT_T, v=value)
        return [f"stored {v}" for v in values]

    async def other(tx: Tx) -> str:
        calls.append(["other"])
        await tx.execute(INSERT_T, v="o")
        return "other"

    async with HeldWriter(db) as held:
        tasks = await held.queue(Joinable(many, "a"), Joinable(many, "b"), other, Joinable(many, "c"))
    assert list(await asyncio.gather(*tasks)) == ["stored a", "stored b", "other", "stored c"]
    assert calls == [["a", "b"], ["other"], ["c"]]
    assert await committed_values(db) == ["a", "b", "c", "o"]

    calls.clear()
    async with HeldWriter(db) as held:
        tasks = await held.queue(Joinable(many, "d"), Joinable(many, "bad"), Joinable(many, "e"))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert outcomes[0] == "stored d" and isinstance(outcomes[1], ValueError) and outcomes[2] == "stored e"
    assert calls == [["d", "bad", "e"], ["d"], ["bad"], ["e"]]
    assert await committed_values(db) == ["a", "b", "c", "d", "e", "o"]
