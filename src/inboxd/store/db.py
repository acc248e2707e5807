"""Hot-path database access on the drivers themselves: `sqlite3` threads or an asyncpg pool.

Every query is a `Statement` (`store/sql.py`): a SQLAlchemy Core construct over the tables of
`store/schema.py` (made by a builder), compiled once per dialect, ahead of time for the store's
own, run with its parameters by name against the `Tx` interface:

    SET = Statement(lambda: sa.insert(schema.meta).values(values_of(schema.meta)))
    GET = Statement(lambda: sa.select(schema.meta.c.value).where(schema.meta.c.key == param(schema.meta.c.key)))

    async def remember(tx: Tx) -> str:
        await tx.execute(SET, key="greeting", value="hello")
        return str(await tx.fetchval(GET, key="greeting"))
    await db.write(remember)

No SQL string is taken: what the drivers run is the text a `Statement` compiled to, as it is
(`sa.text(...)` with named parameters, in a `Statement`, for SQL that no construct says well).

A unit of work is an `async def` taking a `Tx` that awaits nothing but `Tx` calls. On
PostgreSQL it runs on the event loop inside an asyncpg transaction. On SQLite no `Tx` call
ever suspends, so the coroutine is driven to its end synchronously: reads on the event loop
(WAL lets them run beside the writer, and they are shorter than a thread hop), and every
write goes to the one writer thread, which runs all writes that queued up meanwhile in one
transaction and pays one fsync for the lot: group commit (when a unit fails, the batch runs
again with each unit in its own SAVEPOINT, so the others still commit). Each
caller's future resolves only after the COMMIT that holds its work returned.

This module is the interface (`Tx`, `Database`, `Row`); the engines behind it are
`store/sqlite.py` (`SqliteDatabase`) and `store/postgres.py` (`PostgresDatabase`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from inboxd.errors import IndexBehind
from inboxd.store.sql import Statement

T = TypeVar("T")


class Row(Protocol):
    """A result row: `sqlite3.Row` or asyncpg's `Record`, by column name or position."""

    def __getitem__(self, key: str | int, /) -> Any: ...


Work = Callable[["Tx"], Coroutine[Any, Any, T]]
Item = TypeVar("Item")


@dataclass(frozen=True, slots=True)
class Joinable(Generic[Item, T]):
    """A unit of work that the writer (of either engine) may run together with the units of the
    same `many` queued right beside it in a group commit: one call `many(tx, [item, ...])`, which
    returns a result per item, instead of one call per unit. Ingest's writes are such units: on
    SQLite each statement of a unit hands the GIL to the event loop and back, and joined they hand
    it over once a statement for the lot (docs/performance.md, "The writer's hand-overs"); on
    PostgreSQL the lot makes one round trip. When the joined call fails, the batch runs again unit
    by unit, each alone (`many(tx, [item])`), so a failure stays its own unit's."""

    many: Callable[[Tx, Sequence[Item]], Coroutine[Any, Any, Sequence[T]]]
    item: Item

    async def __call__(self, tx: Tx) -> T:
        return (await self.many(tx, [self.item]))[0]


def joined_runs(works: Sequence[Callable[[Tx], Any]]) -> list[tuple[int, int]]:
    """The `[start, end)` ranges of `works` that run as one call: each run of adjacent `Joinable`s
    of one `many`, and every other unit on its own. Only neighbours join, so no unit moves past
    another it might depend on."""
    runs: list[tuple[int, int]] = []
    start = 0
    while start < len(works):
        end = start + 1
        first = works[start]
        if isinstance(first, Joinable):
            while end < len(works) and isinstance(nxt := works[end], Joinable) and nxt.many == first.many:
                end += 1
        runs.append((start, end))
        start = end
    return runs


MAX_BATCH = 512
log = logging.getLogger("inboxd.store")


async def run_joined(tx: Tx, works: Sequence[Work[Any]]) -> list[Any]:
    """Each unit's result, in order, the adjacent `Joinable`s of one kind run as one call
    (`joined_runs`): how both engines run a batch before they fall back to a unit at a time."""
    results: list[Any] = []
    for start, end in joined_runs(works):
        first = works[start]
        if end - start == 1 or not isinstance(first, Joinable):
            results.append(await first(tx))
            continue
        joined = await first.many(tx, [work.item for work in works[start:end] if isinstance(work, Joinable)])
        if len(joined) != end - start:
            raise RuntimeError("a joined unit of work returned a result per item it was not given")
        results.extend(joined)
    return results


class Tx(Protocol):
    """What a unit of work may call. `dialect` is "sqlite" or "postgresql".

    A `Statement` takes its parameters by name (`**params`); `executemany` takes one mapping of
    them per row. `execute` returns the number of rows changed.
    """

    dialect: str

    async def fetch(self, statement: Statement, /, **params: Any) -> list[Row]: ...
    async def fetchrow(self, statement: Statement, /, **params: Any) -> Row | None: ...
    async def fetchval(self, statement: Statement, /, **params: Any) -> Any: ...
    async def execute(self, statement: Statement, /, **params: Any) -> int: ...
    async def executemany(self, statement: Statement, rows: Iterable[Mapping[str, Any]], /) -> None: ...
    async def fetch_blob(self, table: str, column: str, key_column: str, key: Any) -> bytes | bytearray | None:
        """`column` of the `table` row whose `key_column` is `key` (None when there is no such
        row), for values of megabytes: SQLite reads it in pieces, letting go of the GIL between
        them, where fetching it whole holds the GIL while it reads every page."""
        ...


class Database(Protocol):
    dialect: str
    # Called with the number of units in each group commit (the metrics' batch histogram).
    on_batch: Callable[[int], None] | None
    # Indexes a mailbox's waiting mail now (the search indexer's `catch_up`): a read that raised
    # `IndexBehind` (a list on `q`, `to` or `has_attachments` that met mail the index lacks) is run
    # again after it (`read_caught_up`). None: such a read answers `IndexBehind` (503).
    catch_up: Callable[[str], Awaitable[None]] | None

    def pool_usage(self) -> tuple[int, int, int]:
        """(connections held, connections in use, units of work waiting for the writer)."""
        ...

    def reusable_bytes(self) -> int:
        """Bytes the database will fill again before it takes more disk (SQLite's free pages;
        0 where that is not known here): what the free-space guard counts as free besides the disk's."""
        ...

    async def read(self, work: Work[T]) -> T: ...
    async def read_large(self, work: Work[T]) -> T:
        """A read whose rows may be megabytes (message sources): kept off the event loop."""
        ...

    async def read_aside(self, work: Work[T]) -> T:
        """A read that may walk thousands of rows (a filter that reads rows, up to its bound): kept
        off the event loop, where it would hold every other request and SMTP session."""
        ...

    async def write(self, work: Work[T]) -> T: ...
    async def close(self) -> None: ...


# How many times a read that met unindexed mail has the indexer catch up and reads again: each
# round indexes one batch of the mailbox's waiting mail (the indexer's BATCH), so a mailbox a
# burst left thousands behind answers 503 `IndexBehind` rather than hold its reader for long.
CATCH_UP_ROUNDS = 5


async def read_caught_up(
    behind: IndexBehind, catch_up: Callable[[str], Awaitable[None]] | None, read: Callable[[], Awaitable[T]]
) -> T:
    """`read` again once `catch_up` indexed the mailbox `behind` names, up to CATCH_UP_ROUNDS
    times (each engine's `read*` calls this when its read raised `IndexBehind`)."""
    for _ in range(CATCH_UP_ROUNDS):
        if catch_up is None:
            break
        await catch_up(behind.mailbox_id)
        try:
            return await read()
        except IndexBehind as again:
            behind = again
    raise behind


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (SQLite `Tx` calls) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a unit of work awaited something other than its Tx")
