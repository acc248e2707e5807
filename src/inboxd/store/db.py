"""Hot-path database access on the drivers themselves: `sqlite3` threads or an asyncpg pool.

Queries are `Statement`s (`store/sql.py`): SQLAlchemy Core constructs compiled once per
dialect, run with their parameters by name against the `Tx` interface:

    ADD = Statement(t.insert().values(a=bindparam("a")))

    async def add(tx: Tx) -> None:
        await tx.execute(ADD, a=1)
    await db.write(add)

A plain SQL string with `?` placeholders and positional arguments is still taken, for the
modules not yet written as `Statement`s and for tests and operations code off the request
path; on PostgreSQL its `?` are turned into `$n` (`store/postgres.py`). It goes once every
module is converted.

A unit of work is an `async def` taking a `Tx` that awaits nothing but `Tx` calls. On
PostgreSQL it runs on the event loop inside an asyncpg transaction. On SQLite no `Tx` call
ever suspends, so the coroutine is driven to its end synchronously: reads on the event loop
(WAL lets them run beside the writer, and they are shorter than a thread hop), and every
write goes to the one writer thread, which runs all writes that queued up meanwhile in one
transaction (each in its own SAVEPOINT) and pays one fsync for the lot: group commit. Each
caller's future resolves only after the COMMIT that holds its work returned.

This module is the interface (`Tx`, `Database`, `Row`); the engines behind it are
`store/sqlite.py` (`SqliteDatabase`) and `store/postgres.py` (`PostgresDatabase`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from inboxd.store.sql import Statement

T = TypeVar("T")


class Row(Protocol):
    """A result row: `sqlite3.Row` or asyncpg's `Record`, by column name or position."""

    def __getitem__(self, key: str | int, /) -> Any: ...


Work = Callable[["Tx"], Coroutine[Any, Any, T]]

MAX_BATCH = 512
log = logging.getLogger("inboxd.store")


class Tx(Protocol):
    """What a unit of work may call. `dialect` is "sqlite" or "postgresql".

    A `Statement` takes its parameters by name (`**params`); a SQL string (the old way, see
    above) takes positional `args` for its `?`. `executemany` takes one mapping of parameters
    per row for a `Statement`, one sequence per row for a string. `execute` returns the number
    of rows changed.
    """

    dialect: str

    async def fetch(self, sql: Statement | str, /, *args: Any, **params: Any) -> list[Row]: ...
    async def fetchrow(self, sql: Statement | str, /, *args: Any, **params: Any) -> Row | None: ...
    async def fetchval(self, sql: Statement | str, /, *args: Any, **params: Any) -> Any: ...
    async def execute(self, sql: Statement | str, /, *args: Any, **params: Any) -> int: ...
    async def executemany(
        self, sql: Statement | str, rows: Iterable[Mapping[str, Any]] | Iterable[Sequence[Any]], /
    ) -> None: ...
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
