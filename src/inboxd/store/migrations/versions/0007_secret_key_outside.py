"""the mailbox-token signing key leaves the database (it now lives in <data dir>/secret-key)

Revision ID: 0007
Revises: 0003

Tokens signed with the removed key stop verifying: clients sign in again (POST /api/token).
Webhook secrets are sealed with the new key at the next start (`WebhookService.reseal_secrets`):
a migration cannot, since it does not hold the key.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM meta WHERE key = 'mailbox_token_key'")


def downgrade() -> None:
    pass  # the old key is gone; a downgraded server makes a new one at start
