"""Applies the Alembic migrations at start (and from `inboxd migrate`), on SQLite or PostgreSQL.

Alembic needs a synchronous SQLAlchemy engine: `sqlite3` for SQLite, psycopg for PostgreSQL.
On PostgreSQL an advisory lock keeps several starting processes from migrating at once.

`inboxd serve` migrates in a short-lived child process (`upgrade_in_child`), and recognises a
SQLite database already at the newest revision with `sqlite3` alone: Alembic and SQLAlchemy,
once imported, would stay resident in the server for nothing.

A new SQLite database is created from `sqlite_head.sql`, the schema the migrations build, dumped
from a migrated database (`python -m inboxd.store.migrate > src/inboxd/store/migrations/sqlite_head.sql`;
a test fails when it is stale): importing Alembic and SQLAlchemy and running every migration would
take longer than the rest of a first start.
"""

from __future__ import annotations

import contextlib
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
HEAD_SQL = MIGRATIONS / "sqlite_head.sql"
_HEAD_MARK = "-- inboxd schema at revision "
_REVISION = re.compile(r"^(down_revision|revision)\s*=\s*(?:\"([^\"]*)\"|None)", re.MULTILINE)


def revisions() -> dict[str, str | None]:
    """Each migration's revision and the one it builds on, read from the scripts."""
    found: dict[str, str | None] = {}
    for script in (MIGRATIONS / "versions").glob("*.py"):
        named = {name: value or None for name, value in _REVISION.findall(script.read_text(encoding="utf-8"))}
        if named.get("revision"):
            found[str(named["revision"])] = named.get("down_revision")
    return found


def head_revision() -> str:
    """The newest revision, read from the migration scripts (the one no script builds on)."""
    known = revisions()
    heads = set(known) - {parent for parent in known.values() if parent}
    if len(heads) != 1:
        raise RuntimeError(f"the migrations must have exactly one head, found {sorted(heads)}")
    return heads.pop()


def _sqlite_at_head(url: str) -> bool:
    path = _sqlite_path(url)
    if path is None or not path.is_file():
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


def _sqlite_path(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def dump_sqlite_head(conn: sqlite3.Connection) -> str:
    """The script that builds the schema of `conn` (a database migrated to head) in a new file:
    its tables, then indexes, triggers and views, each kind by name (Alembic's table copies
    recreate indexes in no fixed order), and its revision."""
    shadow = {row[1] for row in conn.execute("PRAGMA table_list") if row[2] == "shadow"}
    (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    lines = [f"{_HEAD_MARK}{revision}"]
    kinds = {"table": 0, "index": 1, "trigger": 2, "view": 3}
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    for _kind, name, sql in sorted(rows, key=lambda r: (kinds.get(r[0], 4), r[1])):
        if name not in shadow and not name.startswith("sqlite_"):
            lines.append(f"{sql};")
    lines.append(f"INSERT INTO alembic_version (version_num) VALUES ('{revision}');")
    return "\n".join(lines) + "\n"


def _create_sqlite_at_head(url: str) -> bool:
    """Build a new SQLite database from `sqlite_head.sql`; False (nothing done) when the database
    exists already, another process got there first, or the script is not at the head revision."""
    path = _sqlite_path(url)
    if path is None or (path.exists() and path.stat().st_size > 0):
        return False
    script = HEAD_SQL.read_text(encoding="utf-8")
    if not script.startswith(f"{_HEAD_MARK}{head_revision()}\n"):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            return False
        conn.executescript(f"BEGIN IMMEDIATE;\n{script}COMMIT;")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return False  # Alembic finds out what is there
    finally:
        conn.close()
    return True


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
    if _sqlite_at_head(url) or _create_sqlite_at_head(url):
        return
    alembic_upgrade(url, schema=schema)


def alembic_upgrade(url: str, *, schema: str = "") -> None:
    """Every migration not applied yet, by Alembic."""
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
    line), so the server's own imports run meanwhile; None when a SQLite database is current or
    new (then built here, from `sqlite_head.sql`)."""
    if _sqlite_at_head(url) or _create_sqlite_at_head(url):
        return None
    return PendingUpgrade(url, schema=schema)


def upgrade_in_child(url: str, *, schema: str = "") -> None:
    """`upgrade` in a child Python process, waited for."""
    pending = begin_upgrade(url, schema=schema)
    if pending is not None:
        pending.wait()


if __name__ == "__main__":  # prints sqlite_head.sql: the schema at head, from a migrated scratch file
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        scratch_url = f"sqlite:///{scratch}/head.sqlite3"
        alembic_upgrade(scratch_url)
        with contextlib.closing(sqlite3.connect(f"{scratch}/head.sqlite3")) as migrated:
            sys.stdout.write(dump_sqlite_head(migrated))
