"""browser sessions, one-time sign-in links, provider identities, API token prefixes

Revision ID: 0004
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prefix", sa.Text(), nullable=True))
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("csrf_token", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), server_default="{}", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_seen_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.create_index("ix_sessions_user", ["user_id"], unique=False)
        batch_op.create_index("ix_sessions_expiry", ["expires_at"], unique=False)
    op.create_table(
        "sign_in_links",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("used_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sign_in_links", schema=None) as batch_op:
        batch_op.create_index("ix_sign_in_links_user", ["user_id"], unique=False)
    op.create_table(
        "identities",
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_sign_in_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("provider", "subject"),
    )
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.create_index("ix_identities_user", ["user_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_index("ix_identities_user")
    op.drop_table("identities")
    with op.batch_alter_table("sign_in_links", schema=None) as batch_op:
        batch_op.drop_index("ix_sign_in_links_user")
    op.drop_table("sign_in_links")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_expiry")
        batch_op.drop_index("ix_sessions_user")
    op.drop_table("sessions")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("prefix")
