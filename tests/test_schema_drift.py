"""`store/schema.py` (what the code queries) and the Alembic migrations (what a database gets)
describe the same schema, on SQLite and on PostgreSQL: every migration in the chain, whoever added
it, is checked here, since the test compares a database migrated to head with the metadata."""

from __future__ import annotations

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
