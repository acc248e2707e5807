"""The query layer (`store/sql.py`): Core statements compiled once per dialect, run by name on
`sqlite3` and asyncpg with no SQL text rewritten per call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from inboxd.store.db import Database, Tx
from inboxd.store.sql import Shapes, Statement, one_of, upsert
from tests.conftest import Harness
from tests.test_store_writer import fresh_store

t = sa.table("t", sa.column("v", sa.Text))

INSERT = Statement(lambda: sa.insert(t).values(v=sa.bindparam("v")))
BY_VALUE = Statement(lambda: sa.select(t.c.v).where(t.c.v == sa.bindparam("v")))
# A constant holding a question mark: compiled into the SQL text as a literal.
NOT_ASKED = Statement(lambda: sa.select(sa.func.count()).select_from(t).where(t.c.v != "who? me?"))
SAME_TWICE = Statement(lambda: sa.select(t.c.v).where(t.c.v >= sa.bindparam("v"), t.c.v <= sa.bindparam("v")))


@pytest.fixture(params=["sqlite", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with fresh_store(request.param, tmp_path) as (store, _):
        yield store


async def test_a_statement_compiles_once_per_dialect(db: Database) -> None:
    statement = Statement(lambda: sa.select(t.c.v).where(t.c.v == sa.bindparam("v")))
    for i in range(5):
        await db.write(lambda tx, i=i: tx.execute(INSERT, v=f"v{i}"))  # type: ignore[misc]
        assert await db.read(lambda tx, i=i: tx.fetchval(statement, v=f"v{i}")) == f"v{i}"  # type: ignore[misc]
    assert statement.compilations == 1
    assert statement.compiled(db.dialect) is statement.compiled(db.dialect)


async def test_question_marks_in_values_and_literals_round_trip(db: Database) -> None:
    """No `?` is ever taken for a placeholder: the SQL the drivers get is SQLAlchemy's, as compiled."""
    values = ["who? me?", "what's ? this", "$1 and ?", "plain"]
    await db.write(lambda tx: tx.executemany(INSERT, [{"v": v} for v in values]))
    for value in values:
        row = await db.read(lambda tx, value=value: tx.fetchrow(BY_VALUE, v=value))  # type: ignore[misc]
        assert row is not None
        assert row[0] == value
        assert row["v"] == value
    assert "'who? me?'" in NOT_ASKED.compiled(db.dialect).sql
    assert await db.read(lambda tx: tx.fetchval(NOT_ASKED)) == len(values) - 1


async def test_one_of_takes_lists_of_any_length_with_one_text(db: Database) -> None:
    one_of_values = Statement(lambda: sa.select(t.c.v).where(one_of(t.c.v, "values")).order_by(t.c.v))
    await db.write(lambda tx: tx.executemany(INSERT, [{"v": f"v{i}"} for i in range(10)]))

    async def pick(tx: Tx, values: list[str]) -> list[str]:
        return [r["v"] for r in await tx.fetch(one_of_values, values=values)]

    assert await db.read(lambda tx: pick(tx, [])) == []
    assert await db.read(lambda tx: pick(tx, ["v3"])) == ["v3"]
    assert await db.read(lambda tx: pick(tx, ["v9", "v1", "nope", "it's ?"])) == ["v1", "v9"]
    assert one_of_values.compilations == 1


async def test_a_parameter_used_twice_is_passed_once(db: Database) -> None:
    await db.write(lambda tx: tx.executemany(INSERT, [{"v": "a"}, {"v": "b"}]))
    assert await db.read(lambda tx: tx.fetchval(SAME_TWICE, v="b")) == "b"
    # PostgreSQL's `$1` appears twice; SQLite's `?` are one per use, each given the value.
    assert SAME_TWICE.compiled(db.dialect).names.count("v") == (2 if db.dialect == "sqlite" else 1)


async def test_execute_counts_rows_changed(db: Database) -> None:
    await db.write(lambda tx: tx.executemany(INSERT, [{"v": "a"}, {"v": "b"}]))
    update = Statement(lambda: sa.update(t).where(t.c.v == sa.bindparam("old")).values(v=sa.bindparam("new")))
    assert await db.write(lambda tx: tx.execute(update, old="a", new="c")) == 1
    assert await db.write(lambda tx: tx.execute(update, old="a", new="d")) == 0


def test_constants_are_literals_and_data_is_bound() -> None:
    statement = Statement(lambda: sa.select(t.c.v).where(t.c.v != "x", t.c.v == sa.bindparam("v")).limit(30))
    for dialect, mark in (("sqlite", "= ?"), ("postgresql", "= $1")):
        compiled = statement.compiled(dialect)
        assert compiled.names == ("v",)
        assert "'x'" in compiled.sql
        assert "LIMIT 30" in compiled.sql
        assert mark in compiled.sql


def test_per_dialect_forms_and_a_missing_one() -> None:
    only_sqlite = Statement(sqlite=lambda: sa.select(sa.literal_column("sqlite_version()")))
    assert "sqlite_version()" in only_sqlite.compiled("sqlite").sql
    with pytest.raises(TypeError):
        only_sqlite.compiled("postgresql")


def test_shapes_build_each_key_once_and_keep_a_bounded_number() -> None:
    built: list[int] = []

    def build(n: int) -> Statement:
        built.append(n)
        return Statement(lambda: sa.select(t.c.v).limit(n))

    shapes: Shapes[int] = Shapes(build, size=2)
    first = shapes(1)
    assert shapes(1) is first
    shapes(2)
    shapes(3)  # evicts 1, the least recently used
    shapes(1)
    assert built == [1, 2, 3, 1]


async def test_upsert_updates_or_leaves_the_row(db: Database) -> None:
    pairs = sa.table("pairs", sa.column("k", sa.Text), sa.column("n", sa.Integer))
    table = sa.Table("pairs", sa.MetaData(), sa.Column("k", sa.Text, primary_key=True), sa.Column("n", sa.Integer))
    create = Statement(lambda: sa.text("CREATE TABLE pairs (k TEXT PRIMARY KEY, n INTEGER)"))
    await db.write(lambda tx: tx.execute(create))
    replace = upsert(lambda: table, keys=["k"], update=["n"])
    keep = upsert(lambda: table, keys=["k"])
    read = Statement(lambda: sa.select(pairs.c.n).where(pairs.c.k == sa.bindparam("k")))
    await db.write(lambda tx: tx.execute(replace, k="a", n=1))
    await db.write(lambda tx: tx.execute(replace, k="a", n=2))
    assert await db.read(lambda tx: tx.fetchval(read, k="a")) == 2
    await db.write(lambda tx: tx.execute(keep, k="a", n=3))
    await db.write(lambda tx: tx.execute(keep, k="b", n=4))
    assert await db.read(lambda tx: tx.fetchval(read, k="a")) == 2
    assert await db.read(lambda tx: tx.fetchval(read, k="b")) == 4


async def test_the_list_and_message_routes_compile_nothing_once_warm(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After their first use, a list page, a filtered one, a message and a delivery run their
    compiled text: SQLAlchemy's compiler is not called again."""
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    base = f"/api/accounts/{box['id']}/messages"

    async def use() -> None:
        listing = await harness.http.get(base, headers=harness.auth())
        assert listing.status_code == 200
        first = listing.json()["messages"][0]["id"]
        assert (await harness.http.get(f"{base}/{first}", headers=harness.auth())).status_code == 200
        filtered = await harness.http.get(base, params={"subject": "hello", "unread": "true"}, headers=harness.auth())
        assert filtered.status_code == 200
        await harness.send(box["address"])

    await use()
    compilations: list[object] = []
    original = SQLCompiler.__init__

    def counted(self: SQLCompiler, *args: Any, **kwargs: Any) -> None:
        compilations.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "__init__", counted)
    await use()
    assert compilations == []
