"""message search: the index the background indexer fills, and the flag it sets

Revision ID: 0006
Revises: 0001
Create Date: 2026-11-23 20:40:00

Messages stored before this revision get `indexed = 0`, so the indexer takes them in on its
first run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TSVECTOR

revision = "0006"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("indexed", sa.SmallInteger(), server_default="0", nullable=False))
        batch_op.create_index(
            "ix_messages_unindexed",
            ["created_at"],
            unique=False,
            sqlite_where=sa.text("indexed = 0"),
            postgresql_where=sa.text("indexed = 0"),
        )
    op.create_table(
        "message_search",
        sa.Column("doc_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("mailbox_id", sa.Text(), nullable=False),
        sa.Column("recipients", sa.Text(), nullable=False),
        sa.Column("has_attachments", sa.SmallInteger(), nullable=False),
        sa.Column("terms", TSVECTOR() if postgres else sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("doc_id"),
        sa.UniqueConstraint("message_id"),
    )
    op.create_index("ix_message_search_mailbox", "message_search", ["mailbox_id"], unique=False)
    if postgres:
        op.create_index("ix_message_search_terms", "message_search", ["terms"], unique=False, postgresql_using="gin")
    else:
        # Words are cut in Python; unicode61 only has to split on the spaces between them.
        op.execute("CREATE VIRTUAL TABLE message_fts USING fts5(terms, tokenize = 'unicode61 remove_diacritics 0')")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TABLE message_fts")
    op.drop_table("message_search")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_unindexed")
        batch_op.drop_column("indexed")
