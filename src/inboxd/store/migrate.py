"""Applies the Alembic migrations at start (and from `inboxd migrate`), on SQLite or PostgreSQL.

Alembic needs a synchronous SQLAlchemy engine: `sqlite3` for SQLite, psycopg for PostgreSQL.
On PostgreSQL an advisory lock keeps several starting processes from migrating at once.

`inboxd serve` migrates in a short-lived child process (`upgrade_in_child`), and recognises a
SQLite database already at the newest revision with `sqlite3` alone: Alembic and SQLAlchemy,
once imported, would stay resident in the server for nothing.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa
    from alembic.config import Config

log = logging.getLogger("inboxd")
MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x1B0D
_CHILD = "import json, sys; from inboxd.store.migrate import upgrade; upgrade(**json.load(sys.stdin))"
_REVISION = re.compile(r"^(down_revision|revision)\s*=\s*(?:\"([^\"]*)\"|None)", re.MULTILINE)


def head_revision() -> str:
    """The newest revision, read from the migration scripts (the one no script builds on)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (MIGRATIONS / "versions").glob("*.py"):
        for name, value in _REVISION.findall(script.read_text(encoding="utf-8")):
            if value:
                (revisions if name == "revision" else parents).add(value)
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"the migrations must have exactly one head, found {sorted(heads)}")
    return heads.pop()


def _sqlite_at_head(url: str) -> bool:
    path = url.removeprefix("sqlite:///")
    if not url.startswith("sqlite:///") or not Path(path).is_file():
        return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return [row[0] for row in rows] == [head_revision()]


def sync_engine(url: str, *, schema: str = "") -> sa.Engine:
    import sqlalchemy as sa

    connect_args: dict[str, Any] = {}
    if url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
        if schema:
            connect_args["options"] = f"-csearch_path={schema}"
    return sa.create_engine(url, connect_args=connect_args, poolclass=sa.pool.NullPool)


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(url: str, *, schema: str = "") -> None:
    if _sqlite_at_head(url):
        return
    import sqlalchemy as sa
    from alembic import command

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


class PendingUpgrade:
    """Migrations running in a child process; `wait` for them (it raises when they failed)."""

    def __init__(self, url: str, *, schema: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._request = json.dumps({"url": url, "schema": schema})

    def wait(self) -> None:
        _out, err = self._process.communicate(self._request)
        if self._process.returncode != 0:
            from inboxd.errors import StorageError

            detail = err.strip().splitlines()[-1:] or [f"exit status {self._process.returncode}"]
            raise StorageError(f"the database migrations failed: {detail[0]}")
        log.info("database schema at revision %s", head_revision())


def begin_upgrade(url: str, *, schema: str = "") -> PendingUpgrade | None:
    """Start `upgrade` in a child Python process (the URL goes over stdin, never on a command
    line), so the server's own imports run meanwhile; None when a SQLite database is current."""
    if _sqlite_at_head(url):
        return None
    return PendingUpgrade(url, schema=schema)


def upgrade_in_child(url: str, *, schema: str = "") -> None:
    """`upgrade` in a child Python process, waited for."""
    pending = begin_upgrade(url, schema=schema)
    if pending is not None:
        pending.wait()
