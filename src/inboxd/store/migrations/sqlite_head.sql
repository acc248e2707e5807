-- inboxd schema at revision 0014
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
CREATE TABLE api_tokens (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	name TEXT NOT NULL, 
	token_hash TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	last_used_at DOUBLE, 
	revoked_at DOUBLE, prefix TEXT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE, 
	UNIQUE (token_hash)
);
CREATE TABLE custom_domains (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	domain TEXT NOT NULL, 
	verify_token TEXT NOT NULL, 
	verify_status TEXT NOT NULL, 
	verified_at DOUBLE, 
	mx_configured SMALLINT DEFAULT '0' NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE, 
	UNIQUE (domain)
);
CREATE TABLE identities (
	provider TEXT NOT NULL, 
	subject TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	email TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	last_sign_in_at DOUBLE NOT NULL, 
	PRIMARY KEY (provider, subject), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE TABLE mailbox_faults (
	mailbox_id TEXT NOT NULL, 
	version TEXT NOT NULL, 
	rules TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (mailbox_id), 
	FOREIGN KEY(mailbox_id) REFERENCES mailboxes (id) ON DELETE CASCADE
);
CREATE TABLE mailboxes (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	token_id TEXT, 
	address TEXT NOT NULL, 
	domain_id TEXT, 
	auth_hash TEXT NOT NULL, 
	password_gen INTEGER DEFAULT '0' NOT NULL, 
	quota BIGINT NOT NULL, 
	used BIGINT DEFAULT '0' NOT NULL, 
	created_at DOUBLE NOT NULL, kind TEXT DEFAULT 'mailbox' NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE, 
	UNIQUE (address)
);
CREATE TABLE message_checks (
	message_id TEXT NOT NULL, 
	report TEXT NOT NULL, 
	checked_at DOUBLE NOT NULL, 
	PRIMARY KEY (message_id)
);
CREATE TABLE message_details (
	message_id TEXT NOT NULL, 
	detail TEXT NOT NULL, 
	PRIMARY KEY (message_id)
);
CREATE VIRTUAL TABLE message_fts USING fts5(terms, tokenize = 'ascii', detail = column, columnsize = 0);
CREATE TABLE message_search (
	doc_id INTEGER NOT NULL, 
	message_id TEXT NOT NULL, 
	mailbox_id TEXT NOT NULL, 
	recipients TEXT NOT NULL, 
	has_attachments SMALLINT NOT NULL, 
	terms TEXT, 
	PRIMARY KEY (doc_id), 
	UNIQUE (message_id)
);
CREATE TABLE "message_sources" (
	id TEXT NOT NULL, 
	raw BLOB NOT NULL, 
	refs INTEGER DEFAULT '1' NOT NULL, client_ip TEXT, helo TEXT, 
	PRIMARY KEY (id)
);
CREATE TABLE message_tags (
	message_id TEXT NOT NULL, 
	tag TEXT NOT NULL, 
	mailbox_id TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (message_id, tag)
);
CREATE TABLE "messages" (
	id TEXT NOT NULL, 
	mailbox_id TEXT NOT NULL, 
	sender TEXT NOT NULL, 
	from_header TEXT NOT NULL, 
	subject TEXT NOT NULL, 
	preview_text TEXT NOT NULL, 
	size BIGINT NOT NULL, 
	is_read SMALLINT DEFAULT '0' NOT NULL, 
	deleted SMALLINT DEFAULT '0' NOT NULL, 
	expired SMALLINT DEFAULT '0' NOT NULL, 
	created_at DOUBLE NOT NULL, 
	expires_at DOUBLE NOT NULL, 
	"indexed" SMALLINT DEFAULT '0' NOT NULL, 
	source_id TEXT NOT NULL, envelope TEXT, tags TEXT DEFAULT '' NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE meta (
	"key" TEXT NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE ops_usage (
	user_id TEXT NOT NULL, 
	month TEXT NOT NULL, 
	count BIGINT DEFAULT '0' NOT NULL, 
	PRIMARY KEY (user_id, month)
);
CREATE TABLE releases (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	mailbox_id TEXT NOT NULL, 
	message_id TEXT NOT NULL, 
	answers TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE TABLE sandboxes (
	user_id TEXT NOT NULL, 
	username TEXT NOT NULL, 
	mailbox_id TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (user_id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE, 
	UNIQUE (username), 
	UNIQUE (mailbox_id)
);
CREATE TABLE sessions (
	id TEXT NOT NULL, 
	user_id TEXT, 
	csrf_token TEXT NOT NULL, 
	data TEXT DEFAULT '{}' NOT NULL, 
	created_at DOUBLE NOT NULL, 
	last_seen_at DOUBLE NOT NULL, 
	expires_at DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE TABLE sign_in_links (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	expires_at DOUBLE NOT NULL, 
	used_at DOUBLE, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE TABLE users (
	id TEXT NOT NULL, 
	email TEXT NOT NULL, 
	"plan" TEXT NOT NULL, 
	role TEXT NOT NULL, 
	status TEXT NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (email)
);
CREATE TABLE webhook_deliveries (
	id TEXT NOT NULL, 
	webhook_id TEXT NOT NULL, 
	event_type TEXT NOT NULL, 
	event_id TEXT NOT NULL, 
	status_code INTEGER NOT NULL, 
	error TEXT, 
	attempt INTEGER NOT NULL, 
	duration_ms INTEGER NOT NULL, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE webhook_jobs (
	id TEXT NOT NULL, 
	webhook_id TEXT NOT NULL, 
	event_id TEXT NOT NULL, 
	event_type TEXT NOT NULL, 
	payload TEXT NOT NULL, 
	attempt INTEGER DEFAULT '0' NOT NULL, 
	event_at DOUBLE NOT NULL, 
	due_at DOUBLE NOT NULL, 
	claimed_until DOUBLE DEFAULT '0' NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE webhooks (
	id TEXT NOT NULL, 
	user_id TEXT NOT NULL, 
	url TEXT NOT NULL, 
	events TEXT NOT NULL, 
	secret TEXT NOT NULL, 
	status TEXT NOT NULL, 
	failure_count INTEGER DEFAULT '0' NOT NULL, 
	last_triggered_at DOUBLE, 
	created_at DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE INDEX ix_api_tokens_user ON api_tokens (user_id, created_at);
CREATE INDEX ix_custom_domains_user ON custom_domains (user_id, created_at);
CREATE INDEX ix_identities_user ON identities (user_id);
CREATE INDEX ix_mailboxes_token ON mailboxes (token_id);
CREATE INDEX ix_mailboxes_user ON mailboxes (user_id, created_at);
CREATE INDEX ix_message_search_mailbox ON message_search (mailbox_id);
CREATE INDEX ix_message_tags_list ON message_tags (mailbox_id, tag, created_at, message_id);
CREATE INDEX ix_messages_deleted ON messages (deleted, id) WHERE deleted = 1;
CREATE INDEX ix_messages_due ON messages (mailbox_id, expired, expires_at);
CREATE INDEX ix_messages_expiry ON messages (expired, expires_at);
CREATE INDEX ix_messages_list ON messages (mailbox_id, deleted, created_at, id, expires_at, is_read, tags);
CREATE INDEX ix_messages_unindexed ON messages (created_at) WHERE indexed = 0;
CREATE INDEX ix_releases_message ON releases (message_id, created_at);
CREATE INDEX ix_releases_user ON releases (user_id, created_at);
CREATE INDEX ix_sessions_expiry ON sessions (expires_at);
CREATE INDEX ix_sessions_user ON sessions (user_id);
CREATE INDEX ix_sign_in_links_user ON sign_in_links (user_id);
CREATE INDEX ix_webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX ix_webhook_jobs_due ON webhook_jobs (due_at);
CREATE INDEX ix_webhook_jobs_webhook ON webhook_jobs (webhook_id);
CREATE INDEX ix_webhooks_user ON webhooks (user_id, created_at);
INSERT INTO alembic_version (version_num) VALUES ('0014');
