"""Statements built with SQLAlchemy Core from `store/schema.py`, compiled ahead of time.

Every query of the hot path is a `Statement`: a builder of a Core construct (`select()`,
`insert()`, …) over the tables of `store/schema.py`, compiled for each dialect it runs on
(SQLite's `?`, PostgreSQL's `$n` for asyncpg). Running one costs what the raw driver costs: the
compiled text and the parameters go to `sqlite3` or asyncpg as they are; no SQL text is built,
rewritten or compiled per call.

Compiled ahead of time: `python -m inboxd.store.precompile` (`make statements`) builds and
compiles every named statement of `store/` for both dialects into `store/statements.json`, and
a statement takes its text from there at its first use, so a server never imports SQLAlchemy
(~25 MB resident) nor `store/schema.py`. A statement missing from the file (edited without
regenerating; a `Shapes` key not prepared, such as an unusual combination of filters) is built
and compiled at its first use, which loads SQLAlchemy once. tests/test_store_statements.py
fails when the file is not current.

The rules:

- A statement is named after the module variable that holds it (`inboxd.store.messages._GET`):
  each store module ends with `name_statements(__name__, globals())`. The name is its key in
  `statements.json`.
- Its builder is a function of no arguments returning the construct, called only to compile
  it; `sa` and `schema` (SQLAlchemy and `store/schema.py`, imported at their first use) are what
  builders use:

      PAGE = Statement(lambda: sa.select(schema.messages.c.id).where(...).limit(sa.bindparam("limit")))
      rows = await tx.fetch(PAGE, mailbox=mailbox_id, limit=30)
      await tx.executemany(INSERT, [{"id": ..., "raw": ...}, ...])

- Parameters are passed **by name**, the names of the construct's `bindparam`s. `param(column)`
  names a parameter after a column; `values_of(table, *names)` is an INSERT's `VALUES` of
  parameters named after its columns.
- Constants written in a construct (`m.c.deleted == 0`, `.limit(30)`) are compiled into the SQL
  text as literals, as a hand-written query would hold them: PostgreSQL's plans see them
  (partial indexes), and they are code, never data. Data is always a named parameter.
- A dialect difference is a Core construct that compiles per dialect (`one_of`), or
  `Statement(sqlite=..., postgresql=...)` with one builder per dialect (`upsert` builds
  `ON CONFLICT` so, with each dialect's own `insert`); they live in `store/` only.
- A statement whose shape varies (optional filters) comes from a `Shapes`: one `Statement` per
  shape, keyed by what the caller says decides the shape, in a cache of bounded size. The keys
  it is `prepared` for are precompiled (named `<shapes' name>[<repr of the key>]`).
- `Statement(..., replan=True)`: PostgreSQL plans it for its parameters at every call (a
  statement prepared afresh) instead of reusing a generic plan that knows nothing of them;
  for the full-text search, whose cost depends on the words (docs/performance.md).

Rows are the drivers' own (`sqlite3.Row`, asyncpg's `Record`): by position or by the column's
name (the column name, or its `.label()`).
"""

from __future__ import annotations

import importlib
import itertools
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnElement

    from inboxd.store import schema

__all__ = [
    "DIALECTS",
    "STATEMENTS_FILE",
    "Compiled",
    "Shapes",
    "Statement",
    "arrays",
    "insert_rows",
    "json_rows",
    "name_statements",
    "one_of",
    "param",
    "row_pieces",
    "rows_insert",
    "sa",
    "schema",
    "upsert",
    "values_of",
]

K = TypeVar("K", bound=Hashable)
DIALECTS = ("sqlite", "postgresql")
# The precompiled statements (`python -m inboxd.store.precompile` writes it).
STATEMENTS_FILE = Path(__file__).with_name("statements.json")


class _LazyModule:
    """A module imported at the first use of one of its attributes. Not put in `sys.modules`
    (as `importlib.util.LazyLoader` would) so that an unused module is not even listed there."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attribute)


# What builders make constructs with: SQLAlchemy and the tables, imported when a builder first runs
# (the type checker sees the modules themselves, imported above).
if not TYPE_CHECKING:
    sa = _LazyModule("sqlalchemy")
    schema = _LazyModule("inboxd.store.schema")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement's SQL for one dialect and how its named parameters become the driver's."""

    sql: str
    # The parameter names in the order of the `?` (SQLite: a name used twice is there twice) or
    # of `$1…$n` (PostgreSQL).
    names: tuple[str, ...]
    # Named parameters → the tuple the driver takes (an `operator.itemgetter` of `names`).
    args: Callable[[Mapping[str, Any]], Any]


def _encode_list(value: Any) -> str:
    return msgspec.json.encode(list(value)).decode()


# Per dialect, what a list parameter (`one_of`) is turned into before the driver sees it.
_LIST_CONVERTERS: dict[str, Callable[[Any], Any]] = {"sqlite": _encode_list, "postgresql": list}


def _make_compiled(dialect: str, sql: str, names: Sequence[str], lists: Sequence[str]) -> Compiled:
    names = tuple(names)
    converters = {name: _LIST_CONVERTERS[dialect] for name in lists}
    return Compiled(sql, names, _args_maker(names, converters))


def _args_maker(
    names: tuple[str, ...], converters: dict[str, Callable[[Any], Any]]
) -> Callable[[Mapping[str, Any]], Any]:
    take: Callable[[Mapping[str, Any]], Any]
    if not names:
        take = _nothing
    elif len(names) == 1:
        only = names[0]
        take = lambda params: (params[only],)  # noqa: E731
    else:
        take = operator.itemgetter(*names)
    if not converters:
        return take
    return lambda params: take({**params, **{n: c(params[n]) for n, c in converters.items()}})


def _nothing(params: Mapping[str, Any]) -> tuple[()]:
    return ()


class _Form(msgspec.Struct, frozen=True):
    """A statement's entry in `statements.json` for one dialect."""

    sql: str
    names: tuple[str, ...]
    lists: tuple[str, ...]


@cache
def precompiled() -> dict[str, msgspec.Raw]:
    """`statements.json`, read once: each statement's entry left undecoded until it is used
    (`_forms`), which keeps half the memory a decoded file would."""
    try:
        data = STATEMENTS_FILE.read_bytes()
    except FileNotFoundError:
        return {}
    return msgspec.json.decode(data, type=dict[str, msgspec.Raw])


def _forms(name: str) -> dict[str, _Form]:
    """The precompiled forms of the statement `name`, by dialect (none when it is not in the file)."""
    raw = precompiled().get(name) if name else None
    return {} if raw is None else msgspec.json.decode(raw, type=dict[str, _Form])


Builder = Callable[[], "ClauseElement"]


class Statement:
    """A Core construct's builder (or one per dialect), compiled once per dialect: taken from
    `statements.json` by name, or compiled with SQLAlchemy at its first use when not there."""

    __slots__ = ("_builders", "_compiled", "compilations", "name", "replan")

    def __init__(
        self,
        build: Builder | None = None,
        /,
        *,
        sqlite: Builder | None = None,
        postgresql: Builder | None = None,
        replan: bool = False,
    ) -> None:
        if build is not None:
            sqlite = sqlite if sqlite is not None else build
            postgresql = postgresql if postgresql is not None else build
        self._builders = {name: b for name, b in (("sqlite", sqlite), ("postgresql", postgresql)) if b is not None}
        self._compiled: dict[str, Compiled] = {}
        self.replan = replan
        # Its key in `statements.json` (`name_statements`); "" for a statement of no module.
        self.name = ""
        # How many times its SQL was made ready, from the file or by SQLAlchemy (once per dialect
        # it ran on; the tests check it).
        self.compilations = 0

    @property
    def dialects(self) -> tuple[str, ...]:
        """The dialects it has a form for."""
        return tuple(self._builders)

    def compiled(self, dialect: str) -> Compiled:
        """The SQL and parameter order for `dialect`: a dict lookup after the first call."""
        found = self._compiled.get(dialect)
        if found is None:
            found = self._compiled[dialect] = self._compile(dialect)
        return found

    def _compile(self, dialect: str) -> Compiled:
        if dialect not in self._builders:
            raise TypeError(f"this statement has no form for {dialect}")
        self.compilations += 1
        known = _forms(self.name).get(dialect)
        if known is not None:
            return _make_compiled(dialect, known.sql, known.names, known.lists)
        sql, names, lists = self.compile_now(dialect)
        return _make_compiled(dialect, sql, names, lists)

    def compile_now(self, dialect: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """Build the construct for `dialect` and compile it with SQLAlchemy: (SQL, parameter
        names in the driver's order, list parameters)."""
        from inboxd.store.sql_compiler import compile_for

        return compile_for(self._builders[dialect](), dialect)

    def __repr__(self) -> str:
        return f"Statement({self.name or 'unnamed'})"


class Shapes(Generic[K]):
    """Statements whose shape a key decides (which filters are present…): one `Statement` per
    key, built by `build` at the key's first use, the `size` most recently used kept. The keys
    `prepared` returns are precompiled (`statements.json`): their repr must not vary between runs."""

    def __init__(
        self,
        build: Callable[[K], Statement],
        *,
        size: int = 256,
        prepared: Callable[[], Iterable[K]] = tuple,
    ) -> None:
        self._build = build
        # Called by `python -m inboxd.store.precompile` only.
        self.prepared = prepared
        # Set by `name_statements`; a key's statement is named `<name>[<repr of the key>]`.
        self.name = ""
        self._get: Callable[[K], Statement] = lru_cache(maxsize=size)(self.statement)

    def __call__(self, key: K) -> Statement:
        return self._get(key)

    def statement(self, key: K) -> Statement:
        """A new statement of `key`, named (the cached one is `self(key)`)."""
        statement = self._build(key)
        if self.name:
            statement.name = f"{self.name}[{key!r}]"
        return statement


def name_statements(module: str, namespace: Mapping[str, object]) -> None:
    """Name each `Statement` and `Shapes` of a module's globals after its variable: the last line
    of every module that defines some (`name_statements(__name__, globals())`)."""
    for variable, value in namespace.items():
        if isinstance(value, (Statement, Shapes)) and not value.name:
            value.name = f"{module}.{variable}"


# What builders use to make constructs: each imports SQLAlchemy at its call.


def param(column: ColumnElement[Any], name: str | None = None) -> BindParameter[Any]:
    """A parameter named after `column` (or `name`), of its type."""
    return sa.bindparam(name or str(getattr(column, "key", column)), type_=column.type)


def values_of(table: sa.Table, *names: str) -> dict[str, BindParameter[Any]]:
    """An INSERT's values: every column named (all the table's when none is), each bound to a
    parameter of the column's name."""
    columns = [table.c[n] for n in names] if names else list(table.c)
    return {c.key: sa.bindparam(c.key, type_=c.type) for c in columns}


def one_of(column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
    """`column` is one of the list passed as the parameter `name` (any iterable of text)."""
    from inboxd.store.sql_compiler import one_of as one_of_list

    return one_of_list(column, name)


def upsert(
    table: Callable[[], sa.Table],
    *,
    keys: Sequence[str],
    update: Sequence[str] = (),
    values: Callable[[], Mapping[str, Any]] | None = None,
) -> Statement:
    """INSERT of `values` (by default `values_of(table)`, a parameter per column) that, when a
    row with the same `keys` exists, sets its `update` columns to the ones given instead (or
    does nothing when `update` is empty): `ON CONFLICT`, built by each dialect's own `insert`.
    `table` and `values` are builders, called when the statement is compiled."""

    def build(dialect: str) -> Any:
        from sqlalchemy.dialects import postgresql, sqlite

        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        into = table()
        statement = insert(into).values(values_of(into) if values is None else dict(values()))
        if update:
            return statement.on_conflict_do_update(
                index_elements=list(keys), set_={c: statement.excluded[c] for c in update}
            )
        return statement.on_conflict_do_nothing(index_elements=list(keys))

    return Statement(sqlite=lambda: build("sqlite"), postgresql=lambda: build("postgresql"))


def arrays(name: str, **columns: type[sa.types.TypeEngine[Any]]) -> Any:
    """PostgreSQL: `unnest` of one array parameter per column (each named `<name>_<column>`), as
    a table `name` of those columns: a batch of rows passed to one statement."""
    from sqlalchemy.dialects.postgresql import ARRAY

    casts = [sa.cast(sa.bindparam(f"{name}_{c}"), ARRAY(kind)) for c, kind in columns.items()]
    return sa.func.unnest(*casts).table_valued(*columns).render_derived(name=name)


def json_rows(name: str, *columns: str) -> Any:
    """SQLite: the rows passed as the one list parameter `name` (a sequence of rows, each a
    sequence of text and numbers; JSON has no bytes) as a table `name` of `columns`: a batch of
    rows in one statement, which SQLite steps once where `executemany` steps, and lets go of the
    GIL, once a row (docs/performance.md, "The writer's hand-overs"). SQLite keeps the last few
    JSON texts it parsed, so a row is parsed once for all its columns."""
    from inboxd.store.sql_compiler import list_param

    each = sa.func.json_each(list_param(name)).table_valued("value").alias(f"{name}_each")
    value = each.c.value
    return (
        sa.select(*[sa.func.json_extract(value, f"$[{i}]").label(c) for i, c in enumerate(columns)])
        .select_from(each)
        .subquery(name)
    )


# The row counts `rows_insert` statements are compiled for: a batch is cut into pieces of these
# sizes, largest first (23 rows: 16, 4, 1, 1, 1).
ROW_PIECES = (16, 4, 1)


def rows_insert(table: str, columns: Sequence[str]) -> Shapes[int]:
    """SQLite: `INSERT INTO table (columns) VALUES (…), (…), …` of as many rows as the key says,
    each value its own parameter (`<column>_<row>`), compiled ahead for the `ROW_PIECES`
    (`insert_rows`). One statement steps once where `executemany` steps, and lets go of the GIL,
    once a row (docs/performance.md, "The writer's hand-overs"); unlike `json_rows`, blobs and
    floats go in as they are."""

    def build(rows: int) -> Statement:
        def construct() -> Any:
            into: sa.Table = getattr(schema, table)
            return sa.insert(into).values(
                [{c: sa.bindparam(f"{c}_{n}", type_=into.c[c].type) for c in columns} for n in range(rows)]
            )

        return Statement(sqlite=construct)

    return Shapes(build, size=len(ROW_PIECES), prepared=lambda: ROW_PIECES)


class _Executes(Protocol):
    """What `insert_rows` needs of a `Tx` (`store/db.py`, which imports this module)."""

    async def execute(self, statement: Statement, /, **params: Any) -> int: ...


async def insert_rows(
    tx: _Executes, insert: Shapes[int], columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """`rows` (values in the order of `columns`) through `insert`, a `rows_insert`: a statement a
    piece of `ROW_PIECES`."""
    at = 0
    for size in row_pieces(len(rows)):
        values = itertools.chain.from_iterable(rows[at : at + size])
        await tx.execute(insert(size), **dict(zip(_row_names(tuple(columns), size), values, strict=True)))
        at += size


@lru_cache(maxsize=64)
def _row_names(columns: tuple[str, ...], rows: int) -> tuple[str, ...]:
    """The parameter names of a `rows_insert` statement of `rows` rows, row by row."""
    return tuple(f"{c}_{n}" for n in range(rows) for c in columns)


def row_pieces(rows: int) -> list[int]:
    """How `insert_rows` cuts `rows` rows: the largest of `ROW_PIECES` that fits, again and again."""
    pieces = []
    while rows:
        size = next(size for size in ROW_PIECES if size <= rows)
        pieces.append(size)
        rows -= size
    return pieces
