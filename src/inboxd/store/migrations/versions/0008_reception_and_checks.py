"""reception data kept with each delivery (client IP, HELO) and the kept message checks

Revision ID: 0008
Revises: 0007

The client address and HELO name go beside the raw bytes, in `message_sources` (one row per
delivery, like the bytes); the MAIL FROM address is already `messages.sender`. Both columns are
null for mail received before this revision: its authentication check says so. Added without a
table rebuild (nullable columns), so the upgrade is instant on a big database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("message_sources", sa.Column("client_ip", sa.Text(), nullable=True))
    op.add_column("message_sources", sa.Column("helo", sa.Text(), nullable=True))
    op.create_table(
        "message_checks",
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("report", sa.Text(), nullable=False),
        sa.Column("checked_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("message_id"),
    )


def downgrade() -> None:
    op.drop_table("message_checks")
    with op.batch_alter_table("message_sources", schema=None) as batch_op:
        batch_op.drop_column("helo")
        batch_op.drop_column("client_ip")
