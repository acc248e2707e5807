"""one source per delivery, shared by its copies; a partial index for the purge

Revision ID: 0002
Revises: 0006
Create Date: 2026-11-23 20:40:00

`message_sources` was keyed by message id, one row per copy. It becomes keyed by its own id,
with `refs` counting the copies (rows of `messages` not deleted) that hold it, and each message
names its source in `source_id`. Existing rows keep their bytes: each source takes its message's
id and one reference. The downgrade gives every live copy its own row again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0006"
branch_labels = None
depends_on = None

_DELETED = sa.text("deleted = 1")


def upgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_id", sa.Text(), nullable=True))
    op.execute("UPDATE messages SET source_id = id")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.alter_column("source_id", existing_type=sa.Text(), nullable=False)
        batch_op.create_index(
            "ix_messages_deleted", ["deleted", "id"], unique=False, sqlite_where=_DELETED, postgresql_where=_DELETED
        )
    with op.batch_alter_table("message_sources", schema=None) as batch_op:
        batch_op.alter_column("message_id", new_column_name="id", existing_type=sa.Text(), existing_nullable=False)
        batch_op.add_column(sa.Column("refs", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    # One row per live copy again: copies beyond the first get their own copy of the bytes, and
    # rows whose id is no live message's (shared sources, leftovers of deleted copies) go.
    op.execute(
        "INSERT INTO message_sources (id, raw, refs) "
        "SELECT m.id, s.raw, 1 FROM messages m JOIN message_sources s ON s.id = m.source_id "
        "WHERE m.deleted = 0 AND m.id <> m.source_id"
    )
    op.execute("DELETE FROM message_sources WHERE id NOT IN (SELECT id FROM messages WHERE deleted = 0)")
    with op.batch_alter_table("message_sources", schema=None) as batch_op:
        batch_op.drop_column("refs")
        batch_op.alter_column("id", new_column_name="message_id", existing_type=sa.Text(), existing_nullable=False)
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_deleted", sqlite_where=_DELETED, postgresql_where=_DELETED)
        batch_op.drop_column("source_id")
