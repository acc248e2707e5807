"""`inboxd backup PATH`: a consistent copy of the SQLite database while inboxd serves.

SQLite's online backup API copies the database in one step under a read transaction: in WAL
mode that reader sees one committed snapshot and holds up no writer, so SMTP keeps accepting
mail meanwhile and the copy holds every message acknowledged before the backup began. The copy
is written beside PATH and renamed into place once checked, so PATH is never a half copy; it is
a plain rollback-journal database that `INBOXD_DATA_DIR` can point at after a restore.

PostgreSQL is backed up with its own tools (`pg_dump`); inboxd does not wrap them.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from inboxd.config import Settings


class BackupError(Exception):
    """Why a backup could not be made, in words for the operator."""


def pg_dump_advice(settings: Settings) -> str:
    return (
        "inboxd backup copies SQLite databases only. This inboxd uses PostgreSQL: back it up with "
        "PostgreSQL's own tool, for example\n"
        f"  pg_dump --format=custom --file=inboxd.dump '{_redacted(settings.resolved_database_url)}'\n"
        "and restore with pg_restore."
    )


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.partition(":")[0]
    return f"{scheme}{sep}{user}@{host}"


def sqlite_path(settings: Settings) -> Path:
    return Path(settings.resolved_database_url.removeprefix("sqlite:///"))


def backup(settings: Settings, target: Path) -> int:
    """Copy the database to `target`; returns the number of messages the copy holds."""
    if settings.is_postgres:
        raise BackupError(pg_dump_advice(settings))
    source_path = sqlite_path(settings)
    if not source_path.exists():
        raise BackupError(f"There is no database at {source_path} (is INBOXD_DATA_DIR right?).")
    target = target.resolve()
    if target == source_path.resolve():
        raise BackupError("The backup must not overwrite the live database.")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(source_path, timeout=30)
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy)  # pages=-1: one step, one snapshot
            copy.execute("PRAGMA journal_mode=DELETE")
            problems = copy.execute("PRAGMA integrity_check").fetchall()
            if problems != [("ok",)]:
                raise BackupError(f"The copy failed its integrity check: {problems[:3]}")
            count = int(copy.execute("SELECT count(*) FROM messages WHERE deleted = 0").fetchone()[0])
        finally:
            copy.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    os.replace(partial, target)
    return count
