"""The SQLite engine behind `Database`: reads on the event loop (a thread for large ones), writes
group-committed by one writer thread, one SAVEPOINT per unit of work once one of the batch
failed (see `store/db.py` and `SqliteDatabase._run_whole`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from inboxd.errors import DuplicateKey, IndexBehind, InsufficientStorage, StorageError
from inboxd.store.db import MAX_BATCH, Row, Work, read_caught_up, run_joined, run_sync
from inboxd.store.sql import Statement

T = TypeVar("T")
log = logging.getLogger("inboxd.store")

# `fetch_blob` reads SQLite blobs this much at a time.
BLOB_PIECE = 1024 * 1024


class _SqliteTx:
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # A `Statement`'s named parameters become the tuple of its `?` (`Compiled.args`, which also
    # makes a list parameter JSON, `store/sql.py`).

    async def fetch(self, statement: Statement, /, **params: Any) -> list[Row]:
        c = statement.compiled("sqlite")
        return self._conn.execute(c.sql, c.args(params)).fetchall()

    async def fetchrow(self, statement: Statement, /, **params: Any) -> Row | None:
        c = statement.compiled("sqlite")
        row: Row | None = self._conn.execute(c.sql, c.args(params)).fetchone()
        return row

    async def fetchval(self, statement: Statement, /, **params: Any) -> Any:
        c = statement.compiled("sqlite")
        row = self._conn.execute(c.sql, c.args(params)).fetchone()
        return None if row is None else row[0]

    async def execute(self, statement: Statement, /, **params: Any) -> int:
        c = statement.compiled("sqlite")
        return self._conn.execute(c.sql, c.args(params)).rowcount

    async def executemany(self, statement: Statement, rows: Iterable[Mapping[str, Any]], /) -> None:
        c = statement.compiled("sqlite")
        self._conn.executemany(c.sql, map(c.args, rows))

    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
        # The names are the caller's constants (never data), and `blobopen` takes them as names
        # anyway; the key is a parameter.
        row = self._conn.execute(f"SELECT rowid FROM {table} WHERE {key_column} = ?", (key,)).fetchone()
        if row is None:
            return None
        with self._conn.blobopen(table, column, row[0], readonly=True) as blob:
            # Into one buffer of the blob's size: the value is held once, not as pieces and their join.
            value = bytearray(len(blob))
            for start in range(0, len(value), BLOB_PIECE):
                value[start : start + BLOB_PIECE] = blob.read(BLOB_PIECE)
        return value


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """A connection with our pragmas. The journal mode is not among them: switching to WAL takes
    an exclusive lock without waiting on the busy handler, so two connections opening a fresh
    file at once could fail with "database is locked". `_enable_wal` does it once, first."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    # SQLite's own lower() and LIKE fold ASCII only; the message filters need the rest too.
    conn.create_function("inboxd_lower", 1, _lower, deterministic=True)
    return conn


def _lower(value: str | None) -> str | None:
    return value.lower() if isinstance(value, str) else value


def _enable_wal(conn: sqlite3.Connection) -> None:
    """WAL is a property of the file and persists, so setting it on the first connection, before
    any other exists, is enough for every later one."""
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise sqlite3.OperationalError(f"cannot switch the database to WAL (journal mode is {mode})")


# Taking the write lock that another process holds (`inboxd serve --workers N` on one file): tried
# again after these pauses rather than through SQLite's busy handler, whose sleeps grow from 1 ms
# to 100 ms while the other process holds the lock for a commit of a millisecond or two. The
# writer's connection has no busy timeout at all: once BEGIN IMMEDIATE holds the lock, nothing in
# the transaction waits for another (WAL's commit and its passive checkpoint never do).
_BUSY_PAUSE = 0.0002
_BUSY_PAUSE_MAX = 0.002
_BUSY_SECONDS = 30.0


def _begin_write(conn: sqlite3.Connection) -> None:
    deadline = time.monotonic() + _BUSY_SECONDS
    pause = _BUSY_PAUSE
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _BUSY_PAUSE_MAX)


def _reading_connection(path: str) -> sqlite3.Connection:
    """A connection with our pragmas that refuses to write (every reader's: the loop's, the
    aside thread's, a large read's)."""
    try:
        conn = _sqlite_connect(path)
    except sqlite3.Error as exc:
        raise _sqlite_error(exc) from exc
    try:
        conn.execute("PRAGMA query_only=ON")
    except sqlite3.Error as exc:
        conn.close()
        raise _sqlite_error(exc) from exc
    return conn


def _read_on(conn: sqlite3.Connection, work: Work[T]) -> T:
    """`work` in one read transaction, so a multi-statement read sees one snapshot."""
    try:
        conn.execute("BEGIN")
        try:
            return run_sync(work(_SqliteTx(conn)))
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise _sqlite_error(exc) from exc


@dataclass
class _Job:
    work: Work[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    def apply() -> None:
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    # A closed loop means the caller is gone; the writer thread must live on regardless.
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(apply)


def _fail_all(batch: list[_Job], exc: sqlite3.Error) -> None:
    """A failed transaction (its BEGIN or its COMMIT) fails every unit of its batch alike."""
    failure = _sqlite_error(exc)
    failure.__cause__ = exc
    for job in batch:
        _settle(job, None, failure)


def _settle_all(outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
    """`_settle` for a whole batch: one wake-up of each caller's loop, not one per job (each
    costs the loop a syscall, and the writer thread the GIL handed back and forth)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)

    def apply(settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
        for job, result, error in settled:
            if job.future.done():
                continue
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)

    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(apply, settled)


class SqliteDatabase:
    """SQLite in WAL mode with `synchronous=FULL`: one group-committing writer thread, reads on the loop."""

    dialect = "sqlite"
    on_batch: Callable[[int], None] | None = None
    catch_up: Callable[[str], Awaitable[None]] | None = None

    def pool_usage(self) -> tuple[int, int, int]:
        # One writer connection and one reader, both always held; reads run on the event loop.
        return 2, 1, self._queue.qsize()

    def __init__(self, path: str) -> None:
        self._path = path
        # Jobs, or a list of them (what one turn of an event loop wrote), or None: the stop mark.
        self._queue: queue.SimpleQueue[_Job | list[_Job] | None] = queue.SimpleQueue()
        # Writes of the current turn of `_outbox_loop`, handed to the writer at its end in one put:
        # each put may wake the writer thread, which then takes the GIL from the loop's.
        self._outbox: list[_Job] = []
        self._outbox_loop: asyncio.AbstractEventLoop | None = None
        self._reader: sqlite3.Connection | None = None
        # `read_aside`'s one thread and the connection it keeps (made and used on that thread).
        self._aside: ThreadPoolExecutor | None = None
        self._aside_conn: sqlite3.Connection | None = None
        # Set by `close` under the lock, so no job is queued behind the writer's stop mark
        # (a job there would never run and its caller would wait forever).
        self._closed = False
        self._lock = threading.Lock()
        try:
            conn = _sqlite_connect(path)
            _enable_wal(conn)
            # A savepoint (each unit's, when a batch runs again) and a statement that may change
            # many rows keep the pages they change in a statement journal: a temporary file past
            # 64 KiB (an open, an unlink and two writes a page). In memory it costs a copy of the page.
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute("PRAGMA busy_timeout=0")  # `_begin_write` waits for the lock itself
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc
        self._writer = threading.Thread(target=self._write_loop, args=(conn,), name="sqlite-write", daemon=True)
        self._writer.start()

    def reusable_bytes(self) -> int:
        """Bytes of the free pages inside the database file (its freelist), which SQLite writes
        new rows into before it grows the file: a delete frees pages, never disk space, so the
        free-space guard counts these as free (services/space.py). Two pragmas on the loop's
        reader, a few microseconds: they read the header of the read snapshot."""
        if self._closed:
            return 0
        try:
            if self._reader is None:
                self._reader = _reading_connection(self._path)
            pages = self._reader.execute("PRAGMA freelist_count").fetchone()[0]
            size = self._reader.execute("PRAGMA page_size").fetchone()[0]
        except (sqlite3.Error, StorageError):
            return 0  # not knowing counts nothing extra as free
        return int(pages) * int(size)

    # Reads ------------------------------------------------------------------------------------

    async def read(self, work: Work[T]) -> T:
        """Run a read on the event loop itself. The reads are indexed and bounded (a page, a row),
        so they take tens of microseconds, less than a hop to a thread and back; WAL keeps them
        from ever waiting on the writer (docs/performance.md has the figures). A read that met
        mail the search index lacks (`IndexBehind`) runs again once `catch_up` took it in."""
        try:
            return self._read_here(work)
        except IndexBehind as behind:
            return await read_caught_up(behind, self.catch_up, partial(self._read_again, work))

    def _read_here(self, work: Work[T]) -> T:
        if self._closed:
            raise StorageError("The database is closed.")
        if self._reader is None:
            self._reader = _reading_connection(self._path)
        return _read_on(self._reader, work)

    async def _read_again(self, work: Work[T]) -> T:
        return self._read_here(work)

    async def read_large(self, work: Work[T]) -> T:
        """Run a read in a thread, on a connection of its own: stepping through megabytes of blob
        pages and copying them into `bytes` would hold the event loop for milliseconds each."""
        try:
            return await self._read_large(work)
        except IndexBehind as behind:
            return await read_caught_up(behind, self.catch_up, partial(self._read_large, work))

    async def _read_large(self, work: Work[T]) -> T:
        if self._closed:
            raise StorageError("The database is closed.")
        return await asyncio.to_thread(self._read_in_thread, work)

    async def read_aside(self, work: Work[T]) -> T:
        """Run a read on a thread of its own, one at a time, on a connection kept for it: a
        filter that reads rows may walk up to its bound of them (`INBOXD_FILTER_SCAN_ROWS`), which
        took up to 1.5 s on the event loop and held every other request that long."""
        try:
            return await self._read_aside(work)
        except IndexBehind as behind:
            return await read_caught_up(behind, self.catch_up, partial(self._read_aside, work))

    async def _read_aside(self, work: Work[T]) -> T:
        if self._closed:
            raise StorageError("The database is closed.")
        if self._aside is None:
            self._aside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-read-aside")
        return await asyncio.get_running_loop().run_in_executor(self._aside, self._read_aside_on_thread, work)

    def _read_aside_on_thread(self, work: Work[T]) -> T:
        if self._aside_conn is None:
            self._aside_conn = _reading_connection(self._path)
        return _read_on(self._aside_conn, work)

    def _close_aside(self) -> None:
        if self._aside_conn is not None:
            self._aside_conn.close()
            self._aside_conn = None

    def _read_in_thread(self, work: Work[T]) -> T:
        conn = _reading_connection(self._path)
        try:
            return _read_on(conn, work)
        finally:
            conn.close()

    # Writes -----------------------------------------------------------------------------------

    async def write(self, work: Work[T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed:
            raise StorageError("The database is closed.")
        job = _Job(work, future, loop)
        if self._outbox_loop is None:
            self._outbox_loop = loop
            loop.call_soon(self._post)
        if self._outbox_loop is loop:
            self._outbox.append(job)
        else:  # another loop's turn is being gathered: this one goes at once
            with self._lock:
                if self._closed:
                    raise StorageError("The database is closed.")
                self._queue.put(job)
        return await future

    def _post(self) -> None:
        """Hand the turn's writes to the writer thread, in order, in one put."""
        jobs, self._outbox, self._outbox_loop = self._outbox, [], None
        with self._lock:
            if not self._closed:
                self._queue.put(jobs)
                return
        for job in jobs:
            _settle(job, None, StorageError("The database is closed."))

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        """The writer thread. It never dies while jobs can arrive: a job left waiting here would
        hang its caller for good, so every failure is handed to the jobs it concerns."""
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                batch = job if isinstance(job, list) else [job]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    if isinstance(more, list):
                        batch.extend(more)
                    else:
                        batch.append(more)
                if not batch:
                    continue
                try:
                    self._run_batch(conn, batch)
                except Exception as exc:  # a bug must fail its jobs, not kill the thread
                    log.exception("write batch failed")
                    for failed in batch:
                        _settle(failed, None, exc)
                if stop:
                    return
        finally:
            conn.close()
            self._fail_leftovers()

    def _fail_leftovers(self) -> None:
        """Jobs still queued when the writer ends (it only ends at close) fail rather than hang."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is None:
                continue
            for left in job if isinstance(job, list) else [job]:
                _settle(left, None, StorageError("The database is closed."))

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        if self.on_batch is not None:
            self.on_batch(len(batch))
        if self._run_whole(conn, batch):
            return
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            _begin_write(conn)
            tx = _SqliteTx(conn)
            for job in batch:
                conn.execute("SAVEPOINT unit")
                try:
                    result = run_sync(job.work(tx))
                except BaseException as exc:
                    conn.execute("ROLLBACK TO unit")
                    conn.execute("RELEASE unit")
                    outcomes.append((None, _wrap(exc)))
                else:
                    conn.execute("RELEASE unit")
                    outcomes.append((result, None))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            _fail_all(batch, exc)
            return
        _settle_all([(job, result, error) for job, (result, error) in zip(batch, outcomes, strict=True)])

    def _run_whole(self, conn: sqlite3.Connection, batch: list[_Job]) -> bool:
        """The batch in one transaction without a savepoint per unit, adjacent `Joinable` units
        as one call (`run_joined`), which is how nearly every batch ends (a savepoint and its
        release are two more statements a unit, each a hand-over of the GIL): True when its
        callers were answered (it committed, or its BEGIN or COMMIT failed, which fails every unit
        alike). When a unit fails, the transaction is rolled back and False says to run the batch
        again, each unit alone in a savepoint, so the others still commit; a unit may therefore run
        twice, as a PostgreSQL unit retried after a deadlock does (units touch nothing but their
        `Tx`). A batch of one unit needs no second run: its failure is its answer."""
        try:
            _begin_write(conn)
        except sqlite3.Error as exc:
            _fail_all(batch, exc)
            return True
        tx = _SqliteTx(conn)
        try:
            results = run_sync(run_joined(tx, [job.work for job in batch]))
        except BaseException as exc:  # as a unit's failure in `_run_batch`: never the thread's end
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if len(batch) > 1:
                return False
            _settle(batch[0], None, _wrap(exc))
            return True
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # the transaction's failure, not a unit's: running again would not help
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            _fail_all(batch, exc)
            return True
        _settle_all([(job, result, None) for job, result in zip(batch, results, strict=True)])
        return True

    async def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._writer.join)
        if self._aside is not None:
            await asyncio.get_running_loop().run_in_executor(self._aside, self._close_aside)
            self._aside.shutdown(wait=True)
            self._aside = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _wrap(exc: BaseException) -> BaseException:
    if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc):
        duplicate = DuplicateKey()
        duplicate.__cause__ = exc
        return duplicate
    if isinstance(exc, sqlite3.Error):
        wrapped = _sqlite_error(exc)
        wrapped.__cause__ = exc
        return wrapped
    return exc


_SQLITE_FULL = 13  # the primary result code; extended codes keep it in their low byte


def _sqlite_error(exc: sqlite3.Error) -> StorageError:
    """A full disk or database (SQLITE_FULL) is its own error, so the API answers 507 rather than a
    fault's 500; anything else is a plain storage fault."""
    code = getattr(exc, "sqlite_errorcode", None)
    if (isinstance(code, int) and code & 0xFF == _SQLITE_FULL) or "database or disk is full" in str(exc):
        return InsufficientStorage()
    return StorageError()
