"""Message tags (issue 27): messages.tags and message_tags

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("tags", sa.Text(), nullable=False, server_default=""))
    op.create_table(
        "message_tags",
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("mailbox_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("message_id", "tag"),
    )
    op.create_index("ix_message_tags_list", "message_tags", ["mailbox_id", "tag", "created_at", "message_id"])


def downgrade() -> None:
    op.drop_index("ix_message_tags_list", table_name="message_tags")
    op.drop_table("message_tags")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("tags")
