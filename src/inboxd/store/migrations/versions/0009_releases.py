"""releases: the record of stored messages sent on to the relay

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "releases",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("mailbox_id", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("answers", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_releases_message", "releases", ["message_id", "created_at"])
    op.create_index("ix_releases_user", "releases", ["user_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_releases_user", table_name="releases")
    op.drop_index("ix_releases_message", table_name="releases")
    op.drop_table("releases")
