"""Hot-path database access on the drivers themselves: `sqlite3` threads or an asyncpg pool.

Queries are written once, as SQL with `?` placeholders, against the `Tx` interface:

    async def add(tx: Tx) -> None:
        await tx.execute("INSERT INTO t (a) VALUES (?)", 1)
    await db.write(add)

A unit of work is an `async def` taking a `Tx` that awaits nothing but `Tx` calls. On
PostgreSQL it runs on the event loop inside an asyncpg transaction. On SQLite no `Tx` call
ever suspends, so the coroutine is driven to its end synchronously: reads on the event loop
(WAL lets them run beside the writer, and they are shorter than a thread hop), and every
write goes to the one writer thread, which runs all writes that queued up meanwhile in one
transaction (each in its own SAVEPOINT) and pays one fsync for the lot: group commit. Each
caller's future resolves only after the COMMIT that holds its work returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from inboxd.errors import DuplicateKey, InsufficientStorage, StorageError

T = TypeVar("T")


class Row(Protocol):
    """A result row: `sqlite3.Row` or asyncpg's `Record`, by column name or position."""

    def __getitem__(self, key: str | int, /) -> Any: ...


Work = Callable[["Tx"], Coroutine[Any, Any, T]]

MAX_BATCH = 512
# Several processes on one PostgreSQL lock the same mailbox rows (their `used`) in whatever order
# their batches hold; PostgreSQL breaks such a deadlock by failing one transaction, which nobody
# was answered for yet, so it runs again.
CONFLICT_RETRIES = 5
# `fetch_blob` reads SQLite blobs this much at a time.
BLOB_PIECE = 1024 * 1024
log = logging.getLogger("inboxd.store")


class Tx(Protocol):
    """What a unit of work may call. `dialect` is "sqlite" or "postgresql"."""

    dialect: str

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...
    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...
    async def fetchval(self, sql: str, *args: Any) -> Any: ...
    async def execute(self, sql: str, *args: Any) -> int: ...
    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...
    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
        """`column` of the `table` row whose `key_column` is `key` (None when there is no such
        row), for values of megabytes: SQLite reads it in pieces, letting go of the GIL between
        them, where fetching it whole holds the GIL while it reads every page."""
        ...


class Database(Protocol):
    dialect: str
    # Called with the number of units in each group commit (the metrics' batch histogram).
    on_batch: Callable[[int], None] | None

    def pool_usage(self) -> tuple[int, int, int]:
        """(connections held, connections in use, units of work waiting for the writer)."""
        ...

    async def read(self, work: Work[T]) -> T: ...
    async def read_large(self, work: Work[T]) -> T:
        """A read whose rows may be megabytes (message sources): kept off the event loop."""
        ...

    async def write(self, work: Work[T]) -> T: ...
    async def close(self) -> None: ...


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (SQLite `Tx` calls) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a unit of work awaited something other than its Tx")


# --- SQLite ---------------------------------------------------------------------------------


class _SqliteTx:
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return self._conn.execute(sql, args).fetchall()

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = self._conn.execute(sql, args).fetchone()
        return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = self._conn.execute(sql, args).fetchone()
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        return self._conn.execute(sql, args).rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
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
# to 100 ms while the other process holds the lock for a commit of a millisecond or two.
_BUSY_PAUSE = 0.0002
_BUSY_PAUSE_MAX = 0.002
_BUSY_SECONDS = 30.0


def _begin_write(conn: sqlite3.Connection) -> None:
    deadline = time.monotonic() + _BUSY_SECONDS
    pause = _BUSY_PAUSE
    conn.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, _BUSY_PAUSE_MAX)
    finally:
        conn.execute("PRAGMA busy_timeout=30000")


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


class SqliteDatabase:
    """SQLite in WAL mode with `synchronous=FULL`: one group-committing writer thread, reads on the loop."""

    dialect = "sqlite"
    on_batch: Callable[[int], None] | None = None

    def pool_usage(self) -> tuple[int, int, int]:
        # One writer connection and one reader, both always held; reads run on the event loop.
        return 2, 1, self._queue.qsize()

    def __init__(self, path: str) -> None:
        self._path = path
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._reader: sqlite3.Connection | None = None
        # Set by `close` under the lock, so no job is queued behind the writer's stop mark
        # (a job there would never run and its caller would wait forever).
        self._closed = False
        self._lock = threading.Lock()
        try:
            conn = _sqlite_connect(path)
            _enable_wal(conn)
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc
        self._writer = threading.Thread(target=self._write_loop, args=(conn,), name="sqlite-write", daemon=True)
        self._writer.start()

    # Reads ------------------------------------------------------------------------------------

    async def read(self, work: Work[T]) -> T:
        """Run a read on the event loop itself. The reads are indexed and bounded (a page, a row),
        so they take tens of microseconds, less than a hop to a thread and back; WAL keeps them
        from ever waiting on the writer (docs/performance.md has the figures)."""
        if self._closed:
            raise StorageError("The database is closed.")
        if self._reader is None:
            self._reader = _sqlite_connect(self._path)
            self._reader.execute("PRAGMA query_only=ON")
        return _read_on(self._reader, work)

    async def read_large(self, work: Work[T]) -> T:
        """Run a read in a thread, on a connection of its own: stepping through megabytes of blob
        pages and copying them into `bytes` would hold the event loop for milliseconds each."""
        if self._closed:
            raise StorageError("The database is closed.")
        return await asyncio.to_thread(self._read_in_thread, work)

    def _read_in_thread(self, work: Work[T]) -> T:
        try:
            conn = _sqlite_connect(self._path)
        except sqlite3.Error as exc:
            raise _sqlite_error(exc) from exc
        try:
            conn.execute("PRAGMA query_only=ON")
            return _read_on(conn, work)
        except sqlite3.Error as exc:
            raise _sqlite_error(exc) from exc
        finally:
            conn.close()

    # Writes -----------------------------------------------------------------------------------

    async def write(self, work: Work[T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StorageError("The database is closed.")
            self._queue.put(_Job(work, future, loop))
        return await future

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        """The writer thread. It never dies while jobs can arrive: a job left waiting here would
        hang its caller for good, so every failure is handed to the jobs it concerns."""
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                batch = [job]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
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
            if job is not None:
                _settle(job, None, StorageError("The database is closed."))

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        if self.on_batch is not None:
            self.on_batch(len(batch))
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
            failure = _sqlite_error(exc)
            failure.__cause__ = exc
            for job in batch:
                _settle(job, None, failure)
            return
        for job, (result, error) in zip(batch, outcomes, strict=True):
            _settle(job, result, error)

    async def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._writer.join)
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


# --- PostgreSQL -----------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\?")


@lru_cache(maxsize=2048)
def to_postgres(sql: str) -> str:
    """`?` placeholders to `$1…$n` (our SQL never holds a literal question mark)."""
    counter = iter(range(1, 10_000))
    return _PLACEHOLDER.sub(lambda _m: f"${next(counter)}", sql)


class _PgTx:
    dialect = "postgresql"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        rows: list[Row] = await self._conn.fetch(to_postgres(sql), *args)
        return rows

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = await self._conn.fetchrow(to_postgres(sql), *args)
        return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._conn.fetchval(to_postgres(sql), *args)

    async def execute(self, sql: str, *args: Any) -> int:
        status: str = await self._conn.execute(to_postgres(sql), *args)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._conn.executemany(to_postgres(sql), rows)

    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
        value = await self._conn.fetchval(f"SELECT {column} FROM {table} WHERE {key_column} = $1", key)
        return None if value is None else bytes(value)


class PostgresDatabase:
    """asyncpg: reads on the pool, writes group-committed by one writer task.

    Each write waits in a queue; the writer runs whatever queued up meanwhile in one transaction,
    each unit in its own SAVEPOINT, and resolves the callers after the COMMIT: one WAL flush for
    the lot, as on SQLite. One writer also means this process's writes never deadlock each other.
    """

    dialect = "postgresql"
    on_batch: Callable[[int], None] | None = None

    def pool_usage(self) -> tuple[int, int, int]:
        size = int(self._pool.get_size())
        return size, size - int(self._pool.get_idle_size()), self._queue.qsize()

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._queue: asyncio.Queue[tuple[Work[Any], asyncio.Future[Any]] | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        # The batch the writer is running, so that a writer that dies can fail its callers too.
        self._running: list[tuple[Work[Any], asyncio.Future[Any]]] = []
        # Set when the writer task ended other than by `close`: every write then fails at once.
        self._writer_gone: str | None = None

    @classmethod
    async def connect(cls, url: str, *, schema: str = "", size: int = 20) -> PostgresDatabase:
        import asyncpg

        settings = {"search_path": schema} if schema else {}
        pool = await asyncpg.create_pool(
            url, min_size=1, max_size=size, server_settings=settings, statement_cache_size=512
        )
        return cls(pool)

    async def read(self, work: Work[T]) -> T:
        # No BEGIN/COMMIT around reads: under READ COMMITTED a transaction gives a multi-statement
        # read no common snapshot anyway, and it costs two round trips per read.
        try:
            async with self._pool.acquire() as conn:
                return await work(_PgTx(conn))
        except Exception as exc:
            mapped = _pg_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def read_large(self, work: Work[T]) -> T:
        # asyncpg receives rows on the event loop whatever the caller does.
        return await self.read(work)

    async def write(self, work: Work[T]) -> T:
        if self._closed:
            raise StorageError("The database is closed.")
        if self._writer_gone is not None:
            raise StorageError(self._writer_gone)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop(), name="postgres-write")
            self._writer.add_done_callback(self._writer_ended)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((work, future))
        return await future

    async def _write_loop(self) -> None:
        """The writer task. Like SQLite's writer thread it outlives any batch's failure: a job left
        in the queue would hang its caller for good, so every failure goes to the jobs it concerns."""
        while True:
            job = await self._queue.get()
            if job is None:
                return
            batch = [job]
            stop = False
            while len(batch) < MAX_BATCH and not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._running = batch
            try:
                await self._run_batch(batch)
            except Exception as exc:  # a bug must fail its jobs, not end the writer
                log.exception("write batch failed")
                _fail(batch, exc if isinstance(exc, StorageError) else _storage_error(exc))
            self._running = []
            if stop:
                return

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        """Supervision: a writer that ended without `close` (cancelled, or a BaseException out of
        a unit of work) fails the batch it ran and every queued write, and every later write
        fails at once, rather than each waiting for a COMMIT that will never come."""
        if self._closed and not task.cancelled() and task.exception() is None:
            return
        why = "it was cancelled" if task.cancelled() else f"{task.exception()!r}"
        self._writer_gone = "The database writer stopped; restart inboxd."
        log.error("the PostgreSQL writer stopped (%s): every write fails until inboxd restarts", why)
        failure = StorageError(self._writer_gone)
        _fail(self._running, failure)
        self._running = []
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if job is not None:
                _fail([job], failure)

    async def _run_batch(self, batch: list[tuple[Work[Any], asyncio.Future[Any]]]) -> None:
        if self.on_batch is not None:
            self.on_batch(len(batch))
        # A SAVEPOINT and its RELEASE are two round trips per unit, a third of an ingest's. Units
        # rarely fail, so the batch first runs without them; if one does fail, that transaction is
        # rolled back whole (nothing of it was committed, nobody was answered) and the batch runs
        # again with a SAVEPOINT per unit, so the failure stays its own unit's.
        for attempt in range(CONFLICT_RETRIES + 1):
            outcomes = await self._run_units(batch, savepoints=False)
            if outcomes is None:
                outcomes = await self._run_units(batch, savepoints=True)
                assert outcomes is not None, "with savepoints, every unit's outcome is kept"
            if outcomes is not _CONFLICT:
                break
            log.warning("write batch of %d hit a deadlock with another process; retrying", len(batch))
            await asyncio.sleep(0.01 * (attempt + 1))
        else:
            conflict = StorageError()
            outcomes = [(None, conflict)] * len(batch)
        for (_work, future), (result, error) in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    async def _run_units(
        self, batch: list[tuple[Work[Any], asyncio.Future[Any]]], *, savepoints: bool
    ) -> list[tuple[Any, BaseException | None]] | None:
        """Each unit's result or error, after the COMMIT; None when, without savepoints, a unit
        of a batch of several failed and the whole transaction was rolled back; `_CONFLICT` when
        PostgreSQL rolled it back for a deadlock or serialization failure."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            async with self._pool.acquire() as conn:
                transaction = conn.transaction()
                await transaction.start()
                try:
                    for work, _future in batch:
                        if not savepoints:
                            outcomes.append((await work(_PgTx(conn)), None))
                            continue
                        try:
                            async with conn.transaction():  # nested: a SAVEPOINT
                                outcomes.append((await work(_PgTx(conn)), None))
                        except Exception as exc:  # handed to its caller; the others go on
                            if _is_conflict(exc):
                                raise  # not the unit's fault: the whole batch runs again
                            outcomes.append((None, _pg_error(exc)))
                except Exception as exc:
                    await transaction.rollback()
                    if _is_conflict(exc):
                        return _CONFLICT
                    if savepoints:
                        raise  # not a unit's own failure: the batch fails below
                    if len(batch) > 1:
                        return None
                    return [(None, _pg_error(exc))]  # alone in its transaction: the error is its own
                except BaseException:
                    await transaction.rollback()
                    raise
                await transaction.commit()
        except Exception as exc:  # the batch as a whole failed (connection, COMMIT)
            if _is_conflict(exc):
                return _CONFLICT
            # Every caller fails, with a storage error: the units that ran cleanly did nothing
            # wrong, and a deferred constraint's error at COMMIT is not theirs to see.
            failure = _pg_error(exc)
            if not isinstance(failure, StorageError):
                failure = StorageError()
                failure.__cause__ = exc
            outcomes = [(None, failure)] * len(batch)
        return outcomes

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._queue.put_nowait(None)
            # A writer that died has had its failure logged and its callers answered.
            await asyncio.wait([self._writer])
            self._writer = None
        await self._pool.close()


def _fail(batch: list[tuple[Work[Any], asyncio.Future[Any]]], error: BaseException) -> None:
    for _work, future in batch:
        if not future.done():
            future.set_exception(error)


def _storage_error(exc: BaseException) -> StorageError:
    failure = StorageError()
    failure.__cause__ = exc
    return failure


# The outcome list of a batch that PostgreSQL rolled back for a conflict with another process.
_CONFLICT: list[tuple[Any, BaseException | None]] = []


def _is_conflict(exc: BaseException) -> bool:
    import asyncpg

    return isinstance(exc, asyncpg.DeadlockDetectedError | asyncpg.SerializationError)


def _pg_error(exc: BaseException) -> BaseException:
    """asyncpg's failures → ours; anything else (our own errors) passes through unchanged."""
    import asyncpg

    if isinstance(exc, asyncpg.UniqueViolationError):
        wrapped: BaseException = DuplicateKey()
    elif isinstance(exc, asyncpg.DiskFullError) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        wrapped = InsufficientStorage()
    elif isinstance(exc, asyncpg.PostgresConnectionError | asyncpg.InterfaceError | OSError):
        wrapped = StorageError()
    else:
        return exc
    wrapped.__cause__ = exc
    return wrapped
