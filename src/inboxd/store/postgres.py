"""The PostgreSQL engine behind `Database`: reads on an asyncpg pool, writes group-committed by one
writer task, one SAVEPOINT per unit of work (see `store/db.py`). asyncpg is imported at first use."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, TypeVar

from inboxd.errors import DuplicateKey, IndexBehind, InsufficientStorage, StorageError
from inboxd.store.db import MAX_BATCH, Row, Work, read_caught_up, run_joined
from inboxd.store.sql import Statement

T = TypeVar("T")
log = logging.getLogger("inboxd.store")

# Several processes on one PostgreSQL lock the same mailbox rows (their `used`) in whatever order
# their batches hold; PostgreSQL breaks such a deadlock by failing one transaction, which nobody
# was answered for yet, so it runs again.
CONFLICT_RETRIES = 5


class _PgTx:
    dialect = "postgresql"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    # A `Statement`'s PostgreSQL text takes `$1…$n`: its `args` orders the named parameters.

    async def fetch(self, statement: Statement, /, **params: Any) -> list[Row]:
        c = statement.compiled("postgresql")
        rows: list[Row]
        if statement.replan:
            rows = await (await self._conn.prepare(c.sql)).fetch(*c.args(params))
        else:
            rows = await self._conn.fetch(c.sql, *c.args(params))
        return rows

    async def fetchrow(self, statement: Statement, /, **params: Any) -> Row | None:
        c = statement.compiled("postgresql")
        row: Row | None
        if statement.replan:
            row = await (await self._conn.prepare(c.sql)).fetchrow(*c.args(params))
        else:
            row = await self._conn.fetchrow(c.sql, *c.args(params))
        return row

    async def fetchval(self, statement: Statement, /, **params: Any) -> Any:
        c = statement.compiled("postgresql")
        if statement.replan:
            return await (await self._conn.prepare(c.sql)).fetchval(*c.args(params))
        return await self._conn.fetchval(c.sql, *c.args(params))

    async def execute(self, statement: Statement, /, **params: Any) -> int:
        c = statement.compiled("postgresql")
        status: str = await self._conn.execute(c.sql, *c.args(params))
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def executemany(self, statement: Statement, rows: Iterable[Mapping[str, Any]], /) -> None:
        c = statement.compiled("postgresql")
        await self._conn.executemany(c.sql, [c.args(r) for r in rows])

    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
        # The names are the caller's constants (never data), as on SQLite; the key is a parameter.
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
    catch_up: Callable[[str], Awaitable[None]] | None = None

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

    def reusable_bytes(self) -> int:
        # PostgreSQL's disk is not visible from here (services/space.py).
        return 0

    async def read(self, work: Work[T]) -> T:
        # A read that met mail the search index lacks (`IndexBehind`) runs again once
        # `catch_up` took it in.
        try:
            return await self._read(work)
        except IndexBehind as behind:
            return await read_caught_up(behind, self.catch_up, partial(self._read, work))

    async def _read(self, work: Work[T]) -> T:
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

    async def read_aside(self, work: Work[T]) -> T:
        # PostgreSQL walks the rows in its own process; the event loop only awaits the answer.
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
                    if not savepoints:  # joined where they may be (`Joinable`): a round trip for the lot
                        results = await run_joined(_PgTx(conn), [work for work, _future in batch])
                        outcomes = [(result, None) for result in results]
                    else:
                        for work, _future in batch:
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
