"""`store/schema.py` (what the code queries) and the Alembic migrations (what a database gets)
describe the same schema, on SQLite and on PostgreSQL: every migration in the chain, whoever added
it, is checked here, since the test compares a database migrated to head with the metadata."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from inboxd.store import migrate
from inboxd.store.schema import metadata
from tests.conftest import PG_URL


def _drift(url: str, *, schema: str = "") -> list[Any]:
    engine = migrate.sync_engine(url, schema=schema)
    try:
        with engine.connect() as conn:
            virtual = _virtual_tables(conn)

            def include_name(name: str | None, type_: str, parent: Any) -> bool:
                # SQLite full-text tables (and the shadow tables they own) live in SQL only.
                return type_ != "table" or not any(name == v or (name or "").startswith(v + "_") for v in virtual)

            opts = {"compare_type": True, "compare_server_default": False, "include_name": include_name}
            context = MigrationContext.configure(conn, opts=opts)
            diff: list[Any] = compare_metadata(context, metadata)
            return diff
    finally:
        engine.dispose()


# Differences that are meant, each with its reason; anything else is drift.
INTENDED = {
    # A GIN index over a tsvector: PostgreSQL only. SQLite keeps the words in FTS5 (migration 0006).
    ("sqlite", "add_index", "ix_message_search_terms"),
}


def _unintended(dialect: str, diff: list[Any]) -> list[Any]:
    def key(item: Any) -> tuple[str, str, str]:
        name = getattr(item[1], "name", "") if isinstance(item, tuple) and len(item) > 1 else ""
        return (dialect, item[0] if isinstance(item, tuple) else "", str(name))

    return [item for item in diff if key(item) not in INTENDED]


def _virtual_tables(conn: sa.Connection) -> list[str]:
    if conn.dialect.name != "sqlite":
        return []
    rows = conn.execute(sa.text("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'"))
    return [row[0] for row in rows]


def test_one_head() -> None:
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1, heads


def test_sqlite_migrations_match_the_schema(sqlite_template: Path) -> None:
    assert _unintended("sqlite", _drift(f"sqlite:///{sqlite_template}")) == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_migrations_match_the_schema(backend: str, pg_schema: str) -> None:
    assert _unintended("postgresql", _drift(PG_URL, schema=pg_schema)) == []


def _dump(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return migrate.dump_sqlite_head(conn)


def test_the_sqlite_head_script_is_what_the_migrations_build(sqlite_template: Path, tmp_path: Path) -> None:
    """A new SQLite database is built from `sqlite_head.sql` rather than by Alembic (a faster
    first start): the script must be exactly what the migrations build, and build it again."""
    migrated = _dump(sqlite_template)  # the template is built by Alembic, every migration
    assert migrate.HEAD_SQL.read_text(encoding="utf-8") == migrated, (
        "stale: python -m inboxd.store.migrate > src/inboxd/store/migrations/sqlite_head.sql"
    )
    with contextlib.closing(sqlite3.connect(sqlite_template)) as conn:  # nothing else to copy
        tables = [row[1] for row in conn.execute("PRAGMA table_list") if row[2] == "table"]
        filled = [t for t in tables if not t.startswith("sqlite_") and conn.execute(f'SELECT 1 FROM "{t}"').fetchone()]
    assert filled == ["alembic_version"]

    fresh = tmp_path / "new" / "inboxd.sqlite3"
    assert migrate.begin_upgrade(f"sqlite:///{fresh}") is None  # built at once, no Alembic child
    assert _dump(fresh) == migrated
    migrate.alembic_upgrade(f"sqlite:///{fresh}")  # Alembic agrees it is at head: a no-op
    assert _dump(fresh) == migrated
    assert _unintended("sqlite", _drift(f"sqlite:///{fresh}")) == []


def test_an_existing_database_is_never_rebuilt_from_the_script(tmp_path: Path) -> None:
    path = tmp_path / "inboxd.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
    assert not migrate._create_sqlite_at_head(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["other"]
