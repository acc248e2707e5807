"""The statements of `store/` are compiled ahead of time into `store/statements.json`
(`python -m inboxd.store.precompile`): the file must be current, and a server running them
must not import SQLAlchemy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from inboxd.store.precompile import generate, named_statements
from inboxd.store.sql import DIALECTS, STATEMENTS_FILE, Statement, name_statements, precompiled, sa


def test_the_statements_file_is_current() -> None:
    assert STATEMENTS_FILE.read_bytes() == generate(), (
        "src/inboxd/store/statements.json is stale: run `python -m inboxd.store.precompile` (make statements)"
    )


def test_statement_names_are_unique_and_name_their_variable() -> None:
    names = [statement.name for statement, _ in named_statements()]
    assert len(names) == len(set(names))
    assert "inboxd.store.messages._GET" in names
    assert any(name.startswith("inboxd.store.messages._PAGES[(Shape(") for name in names)
    assert all(name.startswith("inboxd.store.") for name in names)


def test_a_statement_missing_from_the_file_compiles_at_first_use() -> None:
    missing = Statement(lambda: sa.select(sa.literal_column("1")).where(sa.bindparam("x") == 2))
    name_statements("tests.not_in_the_file", {"MISSING": missing})
    assert missing.name == "tests.not_in_the_file.MISSING"
    assert missing.name not in precompiled()
    compiled = missing.compiled("sqlite")
    assert compiled.names == ("x",)
    assert "?" in compiled.sql
    assert missing.compilations == 1


def test_a_statement_in_the_file_is_not_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    from inboxd.store import messages, search

    key = (search.Shape(), messages.PAGE_SIZE, False, True)
    compiled_now = {dialect: messages._PAGES.statement(key).compile_now(dialect) for dialect in DIALECTS}

    def refuse(self: Statement, dialect: str) -> None:
        raise AssertionError(f"{self.name} compiled for {dialect}")

    monkeypatch.setattr(Statement, "compile_now", refuse)
    fresh = messages._PAGES.statement(key)
    for dialect in DIALECTS:
        assert (fresh.compiled(dialect).sql, fresh.compiled(dialect).names) == compiled_now[dialect][:2]
    assert fresh.compilations == 2


_RUN = textwrap.dedent(
    """
    import asyncio, json, sys
    from inboxd.store import mailboxes, messages, search
    from inboxd.store.sql import Statement, sa

    async def main() -> None:
        from inboxd.store.sqlite import SqliteDatabase
        db = SqliteDatabase(sys.argv[1])
        try:
            await db.read(lambda tx: messages.page_rows(tx, "nobody", page=1, now=0.0))
            await db.read(lambda tx: mailboxes.get(tx, "nobody"))
        finally:
            await db.close()
        before = "sqlalchemy" in sys.modules
        # A statement no file holds: compiled with SQLAlchemy, imported now.
        print(json.dumps([before, Statement(lambda: sa.select(sa.literal_column("1"))).compiled("sqlite").sql,
                          "sqlalchemy" in sys.modules]))

    asyncio.run(main())
    """
)


def test_running_precompiled_statements_imports_no_sqlalchemy(sqlite_template: Path, tmp_path: Path) -> None:
    db = tmp_path / "inboxd.db"
    db.write_bytes(sqlite_template.read_bytes())
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(db)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    before, sql, after = json.loads(out)
    assert before is False
    assert sql == "SELECT 1"
    assert after is True
