"""The SQLAlchemy side of `store/sql.py`: the two dialects statements compile for, the compiler
that writes constants as literals, and the one Core construct of our own (`one_of`).

Only building and compiling a statement imports this module (`python -m inboxd.store.precompile`,
or a statement missing from `statements.json`): a server running the precompiled statements
never loads SQLAlchemy.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.base import PGCompiler, PGDialect
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler, SQLiteDialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnElement

__all__ = ["compile_for", "list_param", "one_of"]


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
    """A list bound as one parameter (`one_of`, `list_param`): a JSON array on SQLite."""

    impl = sa.Text
    cache_ok = True


def compile_for(construct: ClauseElement, dialect: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The SQL text of `construct` for `dialect`, its parameter names in the order the driver
    takes them (SQLite: one per `?`, a name used twice is there twice; PostgreSQL: one per `$n`),
    and the names of its list parameters (`one_of`)."""
    compiled = construct.compile(dialect=_DIALECTS[dialect])
    assert isinstance(compiled, SQLCompiler)
    # (`str()`: SQLAlchemy's names are a `str` subclass.)
    used = [str(name) for name in compiled.positiontup or ()]
    names = tuple(used) if dialect == "sqlite" else tuple(dict.fromkeys(used))
    lists = tuple(sorted({str(b.key) for b in compiled.binds.values() if b.required and isinstance(b.type, _IdList)}))
    return str(compiled.string), names, lists


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


def list_param(name: str) -> BindParameter[Any]:
    """A parameter that takes a list (any iterable; on SQLite its items may be lists of text and
    numbers too), which `Compiled.args` turns into what the driver takes: JSON on SQLite."""
    return sa.bindparam(name, type_=_IdList())


def one_of(column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
    """`column` is one of the list passed as the parameter `name` (any iterable of text)."""
    return _OneOf(column, list_param(name))


@compiles(_OneOf, "postgresql")
def _one_of_postgresql(element: _OneOf, compiler: Any, **kw: Any) -> str:
    return f"{compiler.process(element.column, **kw)} = ANY({compiler.process(element.values, **kw)})"


@compiles(_OneOf, "sqlite")
def _one_of_sqlite(element: _OneOf, compiler: Any, **kw: Any) -> str:
    values = compiler.process(element.values, **kw)
    return f"{compiler.process(element.column, **kw)} IN (SELECT value FROM json_each({values}))"
