"""Writes `store/statements.json`: every named statement of `store/` (module-level `Statement`s
and the `prepared` keys of each `Shapes`) compiled for both dialects, so that a server takes
their SQL from the file and never imports SQLAlchemy (`store/sql.py`).

    python -m inboxd.store.precompile     # or `make statements`

tests/test_store_statements.py fails when the file is not what this writes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import msgspec
from sqlalchemy.exc import CompileError

import inboxd.store
from inboxd.store.sql import DIALECTS, STATEMENTS_FILE, Shapes, Statement

__all__ = ["generate", "main", "named_statements"]


def _store_modules() -> Iterator[Any]:
    for info in sorted(pkgutil.iter_modules(inboxd.store.__path__), key=lambda i: i.name):
        if not info.ispkg:
            yield importlib.import_module(f"inboxd.store.{info.name}")


def named_statements() -> Iterator[tuple[Statement, bool]]:
    """Each statement defined by a module of `store/` and each prepared key of its `Shapes`, with
    whether it is a `Shapes` key (which may have no form for one dialect). A module-level one left
    unnamed (a module without its `name_statements` call) is an error."""
    for module in _store_modules():
        for variable, value in vars(module).items():
            if not isinstance(value, (Statement, Shapes)):
                continue
            if not value.name:
                raise RuntimeError(
                    f"{module.__name__}.{variable} has no name: call name_statements at the module's end"
                )
            if value.name != f"{module.__name__}.{variable}":
                continue  # imported from another module, or bound twice: named where it was first
            if isinstance(value, Statement):
                yield value, False
            else:
                for key in value.prepared():
                    yield value.statement(key), True


def generate() -> bytes:
    """The content of `statements.json`."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for statement, shaped in named_statements():
        if statement.name in out:
            raise RuntimeError(f"two statements are named {statement.name}")
        forms: dict[str, dict[str, Any]] = {}
        for dialect in DIALECTS:
            if dialect not in statement.dialects:
                continue
            try:
                sql, names, lists = statement.compile_now(dialect)
            except CompileError:
                if not shaped:
                    raise
                continue  # a shape of the other database's (PostgreSQL's arrays, say)
            forms[dialect] = {"sql": sql, "names": list(names), "lists": list(lists)}
        out[statement.name] = forms
    return msgspec.json.format(msgspec.json.encode(out, order="sorted"), indent=1) + b"\n"


def main() -> None:
    STATEMENTS_FILE.write_bytes(generate())
    print(f"wrote {STATEMENTS_FILE}")


if __name__ == "__main__":
    main()
