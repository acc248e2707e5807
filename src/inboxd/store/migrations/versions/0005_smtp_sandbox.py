"""the SMTP sandbox: sandboxes, mailbox kinds, envelope recipients

Revision ID: 0005
Revises: 0002
Create Date: 2026-11-23 20:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandboxes",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("username", sa.Text(), nullable=False),
        sa.Column("mailbox_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id"),
        sa.UniqueConstraint("username"),
        sa.UniqueConstraint("mailbox_id"),
    )
    with op.batch_alter_table("mailboxes") as batch:
        batch.add_column(sa.Column("kind", sa.Text(), server_default="mailbox", nullable=False))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("envelope", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("envelope")
    with op.batch_alter_table("mailboxes") as batch:
        batch.drop_column("kind")
    op.drop_table("sandboxes")
