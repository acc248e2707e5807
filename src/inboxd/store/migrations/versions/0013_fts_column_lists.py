"""SQLite's full-text table keeps its column lists again, for prefix queries

Revision ID: 0013
Revises: 0012

With `detail = none` (0012) FTS5 answers a prefix (`apri*`) by merging the whole list of every
word that starts with it, whatever the mailbox, before the mailbox's own word narrows it: at
20,000 messages in one mailbox a prefix page took 2.5 ms where the first table took 1.0 ms
(`python -m bench.search`; docs/performance.md). `detail = column` keeps, per word and message,
which column holds it (one byte here), and with it FTS5 steps through the lists as it does for
whole words: 0.19 ms against 0.67 ms in-process, for about 1 µs more per message indexed.
Positions and word counts stay out. The table is made anew, so every message is indexed again
(PostgreSQL's index is untouched).
"""

from __future__ import annotations

import importlib

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# 0012's remaking of the table (and of what pointed into it), with its own definition as the
# way back.
_0012 = importlib.import_module("inboxd.store.migrations.versions.0012_leaner_fts")
_COLUMN_LISTS = (
    "CREATE VIRTUAL TABLE message_fts USING fts5(terms, tokenize = 'ascii', detail = column, columnsize = 0)"
)


def upgrade() -> None:
    _0012._remake(_COLUMN_LISTS)


def downgrade() -> None:
    _0012._remake(_0012._ASCII)
