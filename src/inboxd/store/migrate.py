"""Applies the Alembic migrations at start (and from `inboxd migrate`), on SQLite or PostgreSQL.

Alembic needs a synchronous SQLAlchemy engine: `sqlite3` for SQLite, psycopg for PostgreSQL.
On PostgreSQL an advisory lock keeps several starting processes from migrating at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x1B0D


def sync_engine(url: str, *, schema: str = "") -> sa.Engine:
    connect_args: dict[str, Any] = {}
    if url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
        if schema:
            connect_args["options"] = f"-csearch_path={schema}"
    return sa.create_engine(url, connect_args=connect_args, poolclass=sa.pool.NullPool)


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(url: str, *, schema: str = "") -> None:
    engine = sync_engine(url, schema=schema)
    try:
        with engine.connect() as conn:
            postgres = conn.dialect.name == "postgresql"
            if postgres:
                if schema:
                    conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
                conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
                conn.commit()
            try:
                config = alembic_config()
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
                conn.commit()
            finally:
                if postgres:
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
                    conn.commit()
    finally:
        engine.dispose()
