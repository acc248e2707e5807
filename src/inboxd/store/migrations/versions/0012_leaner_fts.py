"""SQLite's full-text table keeps what the search asks of it, and no more

Revision ID: 0012
Revises: 0011

Words are cut in Python (`services/filters.py`) and joined by spaces, so the table's tokenizer
only has to split at those spaces: `ascii` does (it keeps bytes above 127 inside a word), at
less cost per word than `unicode61`, and, unlike `unicode61`, never cuts a word of a script
newer than SQLite's Unicode tables. A query is a list of single words, never a phrase, and
pages are ordered by rowid, not by rank: `detail = none` keeps no positions and
`columnsize = 0` no per-row word counts. Together they take a fifth off what FTS5 spends on the
benchmark's 4 KB message (324,000 instructions to 260,000; docs/performance.md). The table is
made anew, so every message is indexed again (PostgreSQL's index is untouched).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_UNICODE61 = "CREATE VIRTUAL TABLE message_fts USING fts5(terms, tokenize = 'unicode61 remove_diacritics 0')"
_ASCII = "CREATE VIRTUAL TABLE message_fts USING fts5(terms, tokenize = 'ascii', detail = none, columnsize = 0)"


def _remake(create: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    op.execute("DROP TABLE message_fts")
    op.execute(create)
    # The rows pointed into the old table: the indexer takes every message in again.
    op.execute("DELETE FROM message_search")
    op.execute(sa.text("UPDATE messages SET indexed = 0 WHERE indexed = 1"))


def upgrade() -> None:
    _remake(_ASCII)


def downgrade() -> None:
    _remake(_UNICODE61)
