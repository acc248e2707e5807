"""an index for the bytes of a mailbox's expired, not yet swept messages

Revision ID: 0003
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_messages_due", "messages", ["mailbox_id", "expired", "expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_messages_due", table_name="messages")
