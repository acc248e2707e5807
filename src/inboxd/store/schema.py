"""The only schema of inboxd, as SQLAlchemy Core tables; Alembic migrations are written from it.

Portable on purpose: identifiers are text UUIDs, timestamps Unix seconds in doubles, flags
small integers, so one SQL text serves SQLite and PostgreSQL on the hot path.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import TSVECTOR

metadata = sa.MetaData()

Ts = sa.Double
Flag = sa.SmallInteger

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("email", sa.Text, nullable=False, unique=True),
    sa.Column("plan", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("last_used_at", Ts),
    sa.Column("revoked_at", Ts),
    # The token's first characters, shown in the dashboard so a user can tell tokens apart.
    sa.Column("prefix", sa.Text),
    sa.Index("ix_api_tokens_user", "user_id", "created_at"),
)

custom_domains = sa.Table(
    "custom_domains",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("domain", sa.Text, nullable=False, unique=True),
    sa.Column("verify_token", sa.Text, nullable=False),
    sa.Column("verify_status", sa.Text, nullable=False),
    sa.Column("verified_at", Ts),
    sa.Column("mx_configured", Flag, nullable=False, server_default="0"),
    sa.Column("created_at", Ts, nullable=False),
    sa.Index("ix_custom_domains_user", "user_id", "created_at"),
)

mailboxes = sa.Table(
    "mailboxes",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("token_id", sa.Text),
    sa.Column("address", sa.Text, nullable=False, unique=True),
    # Null for the public domains; set for a custom domain, whose deletion stops reception.
    sa.Column("domain_id", sa.Text),
    sa.Column("auth_hash", sa.Text, nullable=False),
    sa.Column("password_gen", sa.Integer, nullable=False, server_default="0"),
    sa.Column("quota", sa.BigInteger, nullable=False),
    sa.Column("used", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("created_at", Ts, nullable=False),
    # "mailbox", or "sandbox" for a user's SMTP sandbox (never a recipient of received mail).
    sa.Column("kind", sa.Text, nullable=False, server_default="mailbox"),
    sa.Index("ix_mailboxes_user", "user_id", "created_at"),
    sa.Index("ix_mailboxes_token", "token_id"),
)

# One row per stored copy; `deleted` is the soft delete, `expired` set by the sweep once the
# retention passed (the list also filters on `expires_at` so nothing waits for the sweep).
# `source_id` names the raw bytes, shared by every copy of one delivery.
messages = sa.Table(
    "messages",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("mailbox_id", sa.Text, nullable=False),
    sa.Column("sender", sa.Text, nullable=False),
    sa.Column("from_header", sa.Text, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("preview_text", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("is_read", Flag, nullable=False, server_default="0"),
    sa.Column("deleted", Flag, nullable=False, server_default="0"),
    sa.Column("expired", Flag, nullable=False, server_default="0"),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
    sa.Column("source_id", sa.Text, nullable=False),
    # The envelope recipients (a JSON list) of mail captured by the SMTP sandbox; null otherwise.
    sa.Column("envelope", sa.Text),
    # 0 until the background indexer has written its `message_search` row.
    sa.Column("indexed", Flag, nullable=False, server_default="0"),
    # The message's tags separated by spaces (services/tags.py), read with the list row; the
    # `tag=` filter reads `message_tags` instead.
    sa.Column("tags", sa.Text, nullable=False, server_default=""),
    # A list page's keys (id, read mark, tags) and its expiry check come from the index alone (0014).
    sa.Index("ix_messages_list", "mailbox_id", "deleted", "created_at", "id", "expires_at", "is_read", "tags"),
    sa.Index("ix_messages_expiry", "expired", "expires_at"),
    # A mailbox's messages past expiry not yet swept: their bytes already left `used` (due_sizes).
    sa.Index("ix_messages_due", "mailbox_id", "expired", "expires_at"),
    sa.Index(
        "ix_messages_unindexed",
        "created_at",
        sqlite_where=sa.text("indexed = 0"),
        postgresql_where=sa.text("indexed = 0"),
    ),
    # The purge finds soft-deleted rows here, not by a scan; partial, so live mail costs it nothing.
    sa.Index(
        "ix_messages_deleted",
        "deleted",
        "id",
        sqlite_where=sa.text("deleted = 1"),
        postgresql_where=sa.text("deleted = 1"),
    ),
)

# One row per tag of a message, written with it: `tag=` walks a mailbox's tagged messages newest
# first by ix_message_tags_list rather than reading every row.
message_tags = sa.Table(
    "message_tags",
    metadata,
    sa.Column("message_id", sa.Text, primary_key=True),
    sa.Column("tag", sa.Text, primary_key=True),
    sa.Column("mailbox_id", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Index("ix_message_tags_list", "mailbox_id", "tag", "created_at", "message_id"),
)

# Raw bytes (zstd) apart from the summary, so a list page never reads a body; stored once per
# delivery. `refs` counts the copies that still hold it (rows of `messages` not deleted); the
# row goes when the last one lets go.
message_sources = sa.Table(
    "message_sources",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("raw", sa.LargeBinary, nullable=False),
    sa.Column("refs", sa.Integer, nullable=False, server_default="1"),
    # Reception data of the delivery, for the authentication check (SPF): the SMTP client's address
    # and its HELO name; null for mail received before they were recorded.
    sa.Column("client_ip", sa.Text),
    sa.Column("helo", sa.Text),
)

# The full parse, made on first open and kept (JSON of bodies and attachment table).
message_details = sa.Table(
    "message_details",
    metadata,
    sa.Column("message_id", sa.Text, primary_key=True),
    sa.Column("detail", sa.Text, nullable=False),
)

# A message's check report (services/checks.py), computed on first request and kept (JSON).
message_checks = sa.Table(
    "message_checks",
    metadata,
    sa.Column("message_id", sa.Text, primary_key=True),
    sa.Column("report", sa.Text, nullable=False),
    sa.Column("checked_at", Ts, nullable=False),
)

# One per user, made on first use: the SMTP sandbox's username and the mailbox it captures into.
sandboxes = sa.Table(
    "sandboxes",
    metadata,
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("username", sa.Text, nullable=False, unique=True),
    sa.Column("mailbox_id", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", Ts, nullable=False),
)

# The search index (store/search.py), filled off the SMTP path. `terms` is a tsvector with a GIN
# index on PostgreSQL; SQLite leaves it empty and keeps the words in the FTS5 table `message_fts`
# (rowid = doc_id), made by migration 0006 since SQLAlchemy has no virtual tables.
message_search = sa.Table(
    "message_search",
    metadata,
    sa.Column("doc_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message_id", sa.Text, nullable=False, unique=True),
    sa.Column("mailbox_id", sa.Text, nullable=False),
    sa.Column("recipients", sa.Text, nullable=False),
    sa.Column("has_attachments", Flag, nullable=False),
    sa.Column("terms", sa.Text().with_variant(TSVECTOR(), "postgresql")),
    sa.Index("ix_message_search_mailbox", "mailbox_id"),
    sa.Index("ix_message_search_terms", "terms", postgresql_using="gin"),
)

webhooks = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("events", sa.Text, nullable=False),
    sa.Column("secret", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("failure_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_triggered_at", Ts),
    sa.Column("created_at", Ts, nullable=False),
    sa.Index("ix_webhooks_user", "user_id", "created_at"),
)

# The durable delivery queue: written in the ingest transaction, claimed by the worker.
webhook_jobs = sa.Table(
    "webhook_jobs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("webhook_id", sa.Text, nullable=False),
    sa.Column("event_id", sa.Text, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
    sa.Column("event_at", Ts, nullable=False),
    sa.Column("due_at", Ts, nullable=False),
    sa.Column("claimed_until", Ts, nullable=False, server_default="0"),
    sa.Index("ix_webhook_jobs_due", "due_at"),
    sa.Index("ix_webhook_jobs_webhook", "webhook_id"),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("webhook_id", sa.Text, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("event_id", sa.Text, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Index("ix_webhook_deliveries_webhook", "webhook_id", "created_at"),
)

# Monthly operation counters, added to in batches (calendar month in UTC, "YYYY-MM").
ops_usage = sa.Table(
    "ops_usage",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("month", sa.Text, primary_key=True),
    sa.Column("count", sa.BigInteger, nullable=False, server_default="0"),
)

# Server-wide values made once (the mailbox-token signing key).
meta = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# Browser sessions (issue 11). `id` is the SHA-256 of the cookie's random value, so a copy of the
# table opens nothing. `user_id` is null while a sign-in is under way (the provider's state,
# nonce and PKCE verifier sit in `data` until the callback); a signed-in session gets a new id.
sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE")),
    sa.Column("csrf_token", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False, server_default="{}"),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("last_seen_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
    sa.Index("ix_sessions_user", "user_id"),
    sa.Index("ix_sessions_expiry", "expires_at"),
)

# One-time sign-in links (`inboxd users sign-in-link`): the SHA-256 of the link's secret.
sign_in_links = sa.Table(
    "sign_in_links",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
    sa.Column("used_at", Ts),
    sa.Index("ix_sign_in_links_user", "user_id"),
)

# Who a provider vouched for: (provider, subject) is the key, so a changed email at the provider
# still reaches the same user.
identities = sa.Table(
    "identities",
    metadata,
    sa.Column("provider", sa.Text, primary_key=True),
    sa.Column("subject", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("email", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("last_sign_in_at", Ts, nullable=False),
    sa.Index("ix_identities_user", "user_id"),
)

# Releases of stored messages to the relay (issue 27): who, when, and the relay's answer per
# recipient (`answers`, a JSON array). Kept after the message is gone, as a record of what left.
releases = sa.Table(
    "releases",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("mailbox_id", sa.Text, nullable=False),
    sa.Column("message_id", sa.Text, nullable=False),
    sa.Column("answers", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Index("ix_releases_message", "message_id", "created_at"),
    sa.Index("ix_releases_user", "user_id", "created_at"),
)


# A mailbox's SMTP faults (services/faults.py): its rules as JSON, each with its own expiry;
# `version` changes at each PUT so the processes' counters start afresh.
mailbox_faults = sa.Table(
    "mailbox_faults",
    metadata,
    sa.Column("mailbox_id", sa.Text, sa.ForeignKey("mailboxes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("rules", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
)
