"""Statements built with SQLAlchemy Core from `store/schema.py`, compiled once per dialect.

Every query of the hot path is a `Statement`: a Core construct (`select()`, `insert()`, …) over
the tables of `store/schema.py`, compiled on first use for each dialect it runs on (SQLite's
`?`, PostgreSQL's `$n` for asyncpg) and kept. Running one costs what the raw
driver costs: the compiled text and the parameters go to `sqlite3` or asyncpg as they are; no
SQL text is built, rewritten or compiled per call.

The rules:

- Parameters are passed **by name**, the names of the construct's `bindparam`s:

      PAGE = Statement(select(m.c.id).where(m.c.mailbox_id == bindparam("mailbox")).limit(bindparam("limit")))
      rows = await tx.fetch(PAGE, mailbox=mailbox_id, limit=30)
      await tx.executemany(INSERT, [{"id": ..., "raw": ...}, ...])

  `param(column)` names a parameter after a column; `values_of(table, *names)` is an
  INSERT's `VALUES` of parameters named after its columns.
- Constants written in a construct (`m.c.deleted == 0`, `.limit(30)`) are compiled into the SQL
  text as literals, as a hand-written query would hold them: PostgreSQL's plans see them
  (partial indexes), and they are code, never data. Data is always a named parameter.
- A dialect difference is a Core construct that compiles per dialect (`one_of`), or
  `Statement(sqlite=..., postgresql=...)` with one construct per dialect (`upsert` builds
  `ON CONFLICT` so, with each dialect's own `insert`); they live in `store/` only.
- A statement whose shape varies (optional filters) comes from a `Shapes`: one `Statement` per
  shape, keyed by what the caller says decides the shape, in a cache of bounded size.
- `Statement(..., replan=True)`: PostgreSQL plans it for its parameters at every call (a
  statement prepared afresh) instead of reusing a generic plan that knows nothing of them;
  for the full-text search, whose cost depends on the words (docs/performance.md).

Rows are the drivers' own (`sqlite3.Row`, asyncpg's `Record`): by position or by the column's
name (the column name, or its `.label()`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, TypeVar

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.postgresql.base import PGCompiler, PGDialect
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler, SQLiteDialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnElement

__all__ = ["Compiled", "Shapes", "Statement", "arrays", "one_of", "param", "upsert", "values_of"]

K = TypeVar("K", bound=Hashable)
DIALECTS = ("sqlite", "postgresql")


class _Constants:
    """Compiler mixin: a bound value written into a construct (not a named `bindparam`) is
    rendered as a literal, so the only parameters left are the ones a caller passes."""

    def visit_bindparam(self, bindparam: BindParameter[Any], *args: Any, **kw: Any) -> str:
        if not bindparam.required and bindparam.callable is None and not bindparam.expanding:
            kw["literal_binds"] = True
        return super().visit_bindparam(bindparam, *args, **kw)  # type: ignore[misc,no-any-return]


class _SqliteCompiler(_Constants, SQLiteCompiler):
    pass


class _PgCompiler(_Constants, PGCompiler):
    pass


def _dialects() -> dict[str, sa.engine.Dialect]:
    """The dialects statements compile for: no driver behind them, only the SQL and the
    parameter style the drivers take (`sqlite3`'s `?`, asyncpg's `$n`). Both are positional:
    `sqlite3` binds a tuple faster than it looks names up in a mapping."""
    sqlite = SQLiteDialect(paramstyle="qmark")
    sqlite.statement_compiler = _SqliteCompiler
    postgresql = PGDialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]
    postgresql.statement_compiler = _PgCompiler
    return {"sqlite": sqlite, "postgresql": postgresql}


_DIALECTS = _dialects()


class _IdList(sa.types.TypeDecorator[list[str]]):
    """A list of text values bound as one parameter (`one_of`): a JSON array on SQLite."""

    impl = sa.Text
    cache_ok = True


def _encode_list(value: Any) -> str:
    return msgspec.json.encode(list(value)).decode()


# Per dialect, what a parameter of such a type is turned into before the driver sees it.
_CONVERTERS: dict[str, dict[type[sa.types.TypeEngine[Any]], Callable[[Any], Any]]] = {
    "sqlite": {_IdList: _encode_list},
    "postgresql": {_IdList: list},
}


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement's SQL for one dialect and how its named parameters become the driver's."""

    sql: str
    # The parameter names in the order of the `?` (SQLite: a name used twice is there twice) or
    # of `$1…$n` (PostgreSQL).
    names: tuple[str, ...]
    # Named parameters → the tuple the driver takes (an `operator.itemgetter` of `names`).
    args: Callable[[Mapping[str, Any]], Any]


def _compile(construct: ClauseElement, dialect: str) -> Compiled:
    compiled = construct.compile(dialect=_DIALECTS[dialect])
    assert isinstance(compiled, SQLCompiler)
    binds = {b.key: b for b in compiled.binds.values() if b.required}
    # SQLite's `?` are one per use of a parameter; PostgreSQL's `$n` one per parameter.
    used = compiled.positiontup or ()
    names = tuple(used) if dialect == "sqlite" else tuple(dict.fromkeys(used))
    converters = {
        name: convert
        for name, bind in binds.items()
        for kind, convert in _CONVERTERS[dialect].items()
        if isinstance(bind.type, kind)
    }
    return Compiled(compiled.string, names, _args_maker(names, converters))


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


class Statement:
    """A Core construct (or one per dialect), compiled once per dialect on first use."""

    __slots__ = ("_compiled", "_constructs", "compilations", "replan")

    def __init__(
        self,
        construct: ClauseElement | None = None,
        /,
        *,
        sqlite: ClauseElement | None = None,
        postgresql: ClauseElement | None = None,
        replan: bool = False,
    ) -> None:
        if construct is not None:
            sqlite = sqlite if sqlite is not None else construct
            postgresql = postgresql if postgresql is not None else construct
        self._constructs = {name: c for name, c in (("sqlite", sqlite), ("postgresql", postgresql)) if c is not None}
        self._compiled: dict[str, Compiled] = {}
        self.replan = replan
        # How many times it was compiled (once per dialect it ran on; the tests check it).
        self.compilations = 0

    def compiled(self, dialect: str) -> Compiled:
        """The SQL and parameter order for `dialect`: a dict lookup after the first call."""
        found = self._compiled.get(dialect)
        if found is None:
            construct = self._constructs.get(dialect)
            if construct is None:
                raise TypeError(f"this statement has no form for {dialect}")
            found = self._compiled[dialect] = _compile(construct, dialect)
            self.compilations += 1
        return found

    def __repr__(self) -> str:
        construct = next(iter(self._constructs.values()))
        return f"Statement({str(construct)!r})"


class Shapes(Generic[K]):
    """Statements whose shape a key decides (which filters are present…): one `Statement` per
    key, built by `build` at the key's first use, the `size` most recently used kept."""

    def __init__(self, build: Callable[[K], Statement], *, size: int = 256) -> None:
        self._get: Callable[[K], Statement] = lru_cache(maxsize=size)(build)

    def __call__(self, key: K) -> Statement:
        return self._get(key)


def param(column: sa.ColumnElement[Any], name: str | None = None) -> BindParameter[Any]:
    """A parameter named after `column` (or `name`), of its type."""
    return sa.bindparam(name or str(getattr(column, "key", column)), type_=column.type)


def values_of(table: sa.Table, *names: str) -> dict[str, BindParameter[Any]]:
    """An INSERT's values: every column named (all the table's when none is), each bound to a
    parameter of the column's name."""
    columns = [table.c[n] for n in names] if names else list(table.c)
    return {c.key: sa.bindparam(c.key, type_=c.type) for c in columns}


def upsert(
    table: sa.Table,
    *,
    keys: Sequence[str],
    update: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
) -> Statement:
    """INSERT of `values` (by default `values_of(table)`, a parameter per column) that, when a
    row with the same `keys` exists, sets its `update` columns to the ones given instead (or
    does nothing when `update` is empty): `ON CONFLICT`, built by each dialect's own `insert`."""
    forms: dict[str, Any] = {}
    for dialect, insert in (("sqlite", sqlite_insert), ("postgresql", postgresql_insert)):
        statement = insert(table).values(values_of(table) if values is None else dict(values))
        if update:
            statement = statement.on_conflict_do_update(
                index_elements=list(keys), set_={c: statement.excluded[c] for c in update}
            )
        else:
            statement = statement.on_conflict_do_nothing(index_elements=list(keys))
        forms[dialect] = statement
    return Statement(sqlite=forms["sqlite"], postgresql=forms["postgresql"])


def arrays(name: str, **columns: type[sa.types.TypeEngine[Any]]) -> Any:
    """PostgreSQL: `unnest` of one array parameter per column (each named `<name>_<column>`), as
    a table `name` of those columns: a batch of rows passed to one statement."""
    casts = [sa.cast(sa.bindparam(f"{name}_{c}"), ARRAY(kind)) for c, kind in columns.items()]
    return sa.func.unnest(*casts).table_valued(*columns).render_derived(name=name)


class _OneOf(ColumnElement[bool]):
    """`column` is one of the values of a list bound as one parameter: `= ANY($n)` on
    PostgreSQL, `IN (SELECT value FROM json_each(:name))` on SQLite. One SQL text serves lists
    of every length, so a statement compiles once and PostgreSQL prepares it once."""

    __visit_name__ = "inboxd_one_of"
    inherit_cache = False  # SQLAlchemy's own statement cache is not used: `Statement` keeps the text
    # Not a Boolean: SQLite's compiler would add `= 1` to a boolean term of a WHERE.
    type = sa.types.NullType()  # type: ignore[assignment]

    def __init__(self, column: ColumnElement[Any], values: BindParameter[Any]) -> None:
        self.column = column
        self.values = values

    def get_children(self, **kw: Any) -> tuple[ClauseElement, ...]:
        return (self.column, self.values)


def one_of(column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
    """`column` is one of the list passed as the parameter `name` (any iterable of text)."""
    return _OneOf(column, sa.bindparam(name, type_=_IdList()))


@compiles(_OneOf, "postgresql")
def _one_of_postgresql(element: _OneOf, compiler: Any, **kw: Any) -> str:
    return f"{compiler.process(element.column, **kw)} = ANY({compiler.process(element.values, **kw)})"


@compiles(_OneOf, "sqlite")
def _one_of_sqlite(element: _OneOf, compiler: Any, **kw: Any) -> str:
    values = compiler.process(element.values, **kw)
    return f"{compiler.process(element.column, **kw)} IN (SELECT value FROM json_each({values}))"
