"""Migrations 0012 and 0013: SQLite's full-text table is made anew with the `ascii` tokenizer and
neither positions nor word counts (0012), then with its column lists back (0013); each time the
rows that pointed into the old table go, and every message is flagged for the indexer again.
PostgreSQL's index is left as it was."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from alembic import command

from inboxd.store import migrate


def _fts_sql(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'message_fts'").fetchone()
    return str(row[0])


@contextlib.contextmanager
def _indexed_at(tmp_path: Path, revision: str) -> Iterator[tuple[Path, Callable[[str, str], None]]]:
    """A database file at `revision` holding one indexed message (`_one_indexed_message`), and
    `run(step, target)`: Alembic's upgrade or downgrade on it."""
    path = tmp_path / "m.sqlite3"
    engine = migrate.sync_engine(f"sqlite:///{path}", schema="")
    config = migrate.alembic_config()

    def run(step: str, target: str) -> None:
        with engine.connect() as conn:
            config.attributes["connection"] = conn
            getattr(command, step)(config, target)
            conn.commit()

    try:
        run("upgrade", revision)
        _one_indexed_message(path)
        yield path, run
    finally:
        engine.dispose()


def _one_indexed_message(path: Path) -> None:
    """A message the index has taken in: its flag, its `message_search` row and its FTS5 row."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO messages (id, mailbox_id, sender, from_header, subject, preview_text, size, created_at,"
            " expires_at, indexed, source_id) VALUES ('m1', 'mb', 's', 'f', 'subj', 'p', 3, 1.0, 9e9, 1, 'src')"
        )
        conn.execute(
            "INSERT INTO message_search (doc_id, message_id, mailbox_id, recipients, has_attachments)"
            " VALUES (64000000, 'm1', 'mb', 'r', 0)"
        )
        conn.execute("INSERT INTO message_fts (rowid, terms) VALUES (64000000, 'mbxmb zebra')")


def _flagged_again(path: Path) -> None:
    """What a remade table leaves: no index rows, and every message waiting for the indexer."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM message_search").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM message_fts").fetchone() == (0,)
        assert conn.execute("SELECT indexed FROM messages").fetchall() == [(0,)]


def test_0012_remakes_the_fts_table_and_flags_every_message_again(tmp_path: Path) -> None:
    with _indexed_at(tmp_path, "0011") as (path, run):
        assert "unicode61" in _fts_sql(path)

        run("upgrade", "0012")
        assert "'ascii', detail = none, columnsize = 0" in _fts_sql(path)
        _flagged_again(path)
        with sqlite3.connect(path) as conn:
            # The new table answers what the search asks: single words, prefixes, any script.
            conn.execute("INSERT INTO message_fts (rowid, terms) VALUES (1, 'mbxmb zoë 東京 zebra')")
            for query in ['"zoë"', '"東京"', '"zeb"*', '"mbxmb" "zebra"']:
                assert conn.execute("SELECT rowid FROM message_fts WHERE message_fts MATCH ?", (query,)).fetchall() == [
                    (1,)
                ], query
            conn.execute("DELETE FROM message_fts WHERE rowid = 1")
            assert conn.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH '\"zebra\"'").fetchone() == (
                0,
            )

        run("downgrade", "0011")
        assert "unicode61" in _fts_sql(path)


def test_0013_keeps_column_lists_and_flags_every_message_again(tmp_path: Path) -> None:
    with _indexed_at(tmp_path, "0012") as (path, run):
        run("upgrade", "0013")
        assert "'ascii', detail = column, columnsize = 0" in _fts_sql(path)
        _flagged_again(path)
        with sqlite3.connect(path) as conn:
            conn.executemany(
                "INSERT INTO message_fts (rowid, terms) VALUES (?, ?)",
                [(1, "mbxmb zoë 東京 zebra apricot"), (2, "mbxother apricot april"), (3, "mbxmb april")],
            )
            for query, rowids in [
                ('"mbxmb" "apri"*', [(3,), (1,)]),
                ('"zeb"*', [(1,)]),
                ('"東京"', [(1,)]),
                ('"mbxother" "apri"*', [(2,)]),
            ]:
                found = conn.execute(
                    "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY rowid DESC", (query,)
                ).fetchall()
                assert found == rowids, query
            conn.execute("DELETE FROM message_fts WHERE rowid = 1")
            assert conn.execute("SELECT rowid FROM message_fts WHERE message_fts MATCH '\"apricot\"'").fetchall() == [
                (2,)
            ]

        run("downgrade", "0012")
        assert "'ascii', detail = none, columnsize = 0" in _fts_sql(path)
