"""The one typed Settings object: every operator option, its default, and its environment name.

Options come from `INBOXD_<NAME>` environment variables (or keyword arguments in tests); a
secret may also come from `INBOXD_<NAME>_FILE`. Nothing here does I/O at import time.

Settings are a frozen `msgspec.Struct`: `load_settings` converts the environment's strings to
the declared types (msgspec is already the API's codec; pydantic-settings would keep about
11 MB of modules resident in every process for one read of the environment at start).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

DEFAULT_RETRY_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
ENV_PREFIX = "INBOXD_"
# Options whose environment value is a comma-separated list.
_LISTS = (
    "public_domains",
    "pro_only_domains",
    "dns_nameservers",
    "webhook_retry_schedule",
    "signup_allow",
    "trusted_proxies",
    "relay_allow",
)
# `INBOXD_WEBHOOK_CA_FILE` is an option of its own, not the file of an option `webhook_ca`.
_NOT_SECRET_FILES = {"INBOXD_WEBHOOK_CA_FILE", "INBOXD_RELAY_CA_FILE"}
_BOOLS = {
    **dict.fromkeys(("1", "true", "yes", "on", "y", "t"), True),
    **dict.fromkeys(("0", "false", "no", "off", "n", "f"), False),
}


class SettingsError(ValueError):
    """An option's value cannot be read: the message names the environment variable."""


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _domains(value: list[str]) -> list[str]:
    return [d.strip().lower().rstrip(".") for d in value]


def _plain_address(value: str) -> bool:
    """`local@domain` with nothing an SMTP envelope or a header could be split on."""
    local, at, domain = value.rpartition("@")
    return bool(local and at and "." in domain) and not any(c.isspace() or c in '<>,;"' for c in value)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every option of inboxd; the README's configuration reference mirrors this class."""

    data_dir: Path = Path("./data")
    database_url: str = ""
    # Internal: a PostgreSQL schema to work in (tests give each run its own).
    database_schema: str = ""
    redis_url: str = ""
    redis_prefix: str = "inboxd:"
    # The server's key (README "Secrets and key rotation"); empty: `<data dir>/secret-key`. During a
    # rotation, the previous key still verifies tokens and opens webhook secrets.
    secret_key: str = ""
    secret_key_old: str = ""

    # `inboxd serve --workers N`: N processes share the ports (SO_REUSEPORT) under a supervisor.
    # `worker_index` and `reuse_port` are set by the supervisor for each worker it starts.
    workers: int = 1
    worker_index: int = 0
    reuse_port: bool = False

    http_host: str = "127.0.0.1"
    http_port: int = 8025
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 2525
    smtp_hostname: str = ""
    smtp_tls_cert: str = ""
    smtp_tls_key: str = ""
    base_url: str = "http://localhost:8025"
    web_origin: str = ""
    public_domains: list[str] = msgspec.field(default_factory=lambda: ["inboxd.localhost"])
    pro_only_domains: list[str] = msgspec.field(default_factory=list)
    mx_host: str = ""
    dns_nameservers: list[str] = msgspec.field(default_factory=list)
    dns_timeout: float = 5.0

    webhook_allow_private: bool = False
    webhook_ca_file: str = ""
    webhook_retry_schedule: list[float] = msgspec.field(default_factory=lambda: list(DEFAULT_RETRY_SCHEDULE))
    webhook_timeout: float = 10.0
    webhook_max_per_user: int = 10
    webhook_disable_after: int = 10
    webhook_poll_interval: float = 1.0
    # Attempts in flight at once; a claim's lease (a job whose worker died is due again after it,
    # so it must exceed the timeout); how long stop waits for attempts in flight.
    webhook_concurrency: int = 64
    webhook_lease: float = 60.0
    webhook_shutdown_grace: float = 5.0

    # Message checks (services/checks): links are fetched on request only, through the webhooks'
    # address guard unless `link_check_allow_private`; at most `link_check_rate` URLs per minute and
    # user, `link_check_concurrency` at once server-wide and `link_check_user_concurrency` per user,
    # each definite answer kept `link_check_cache_ttl` seconds. A rate of 0 (the default), or one
    # above what can drain, is `link_check_user_concurrency * 60 / link_check_timeout`.
    link_check_allow_private: bool = False
    link_check_timeout: float = 10.0
    link_check_max_redirects: int = 10
    link_check_concurrency: int = 16
    link_check_user_concurrency: int = 4
    link_check_rate: float = 0.0
    link_check_cache_ttl: float = 600.0
    # Mail analysis (services/analysis.py: first detail build, checks' pure parts, the HTML view):
    # `analysis_threads` threads of its own, apart from the pool ingest and Argon2 use, each user
    # holding at most half of them; a report part answers `analysis_cut` after `analysis_budget` s.
    analysis_threads: int = 2
    analysis_budget: float = 20.0
    # Rendered images (services/render.py, the `inboxd[render]` extra): headless Chromium at this path,
    # `render_contexts` browser contexts (renders at once), each render bounded by `render_timeout`
    # seconds, the last `render_cache_size` images kept; remote content only when `render_remote`.
    render_chromium: str = "/usr/bin/chromium"
    render_remote: bool = False
    render_contexts: int = 2
    render_timeout: float = 15.0
    render_cache_size: int = 64
    render_max_height: int = 10000
    # rspamd's HTTP API (the normal worker, e.g. http://127.0.0.1:11333); empty: no spam score.
    rspamd_url: str = ""
    rspamd_password: str = ""
    rspamd_timeout: float = 20.0

    domain_verify_window: float = 259200.0
    # Seconds between two DNS checks of one custom domain (a verify sooner answers 429).
    domain_verify_interval: float = 5.0
    max_domains: int = 10
    # Unrevoked API tokens one user may hold (`token_limit_reached` beyond).
    max_tokens_per_user: int = 100
    user_accounts_page_size: int = 1000
    retention_free: float = 604800.0
    retention_pro: float = 2592000.0
    expired_grace: float = 604800.0
    sweep_interval: float = 60.0

    free_rps: float = 1.0
    pro_rps: float = 10.0
    free_create_interval: float = 8.0
    pro_create_interval: float = 1.0
    free_ops_limit: int = 500
    pro_ops_limit: int = 100000
    free_max_mailboxes: int = 10
    pro_max_mailboxes: int = 10000
    free_mailbox_quota: int = 40 * 1024 * 1024
    pro_mailbox_quota: int = 1024 * 1024 * 1024
    login_max_failures: int = 10
    login_failure_window: float = 600.0
    # Once an address has `login_max_failures` failures in the window, each try from a client that
    # has failed on it waits 1, 2, 4 … seconds after the address's last one, at most this long.
    login_delay_max: float = 60.0
    public_rps: float = 20.0
    # Dashboard requests per second per signed-in user, or per client IP for signed-out visitors
    # (burst twice that). Forms that do what an API call does also pass the API's limits.
    web_rps: float = 20.0
    usage_flush_interval: float = 2.0

    ws_auth_timeout: float = 10.0
    ws_ping_interval: float = 30.0
    ws_max_connections: int = 3
    # Frames a WebSocket client may leave unread before it is dropped.
    ws_send_queue: int = 100
    mailbox_token_ttl: float = 86400.0
    # Seconds the live inbox's WebSocket token is valid for (the page fetches one per connection).
    live_token_ttl: float = 300.0

    # Sign-in and browser sessions (README "Sign-in"). `signup_allow`: empty lets only existing
    # users in, "*" anyone with a verified email, else a list of email domains.
    session_ttl: float = 1209600.0
    sign_in_link_ttl: float = 900.0
    sign_in_rate: float = 20.0
    signup_allow: list[str] = msgspec.field(default_factory=list)
    signup_plan: Literal["free", "pro"] = "free"
    github_client_id: str = ""
    github_client_secret: str = ""
    github_url: str = "https://github.com"
    github_api_url: str = "https://api.github.com"
    google_client_id: str = ""
    google_client_secret: str = ""
    google_issuer: str = "https://accounts.google.com"
    oidc_issuer: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_name: str = "Single sign-on"
    provider_timeout: float = 10.0

    # The SMTP sandbox (issue 14): the submission listener, its TLS and its credentials. TLS
    # certificates also make the receiving listener offer STARTTLS; `smtp_tls_*` are older names.
    submission_host: str = "127.0.0.1"
    submission_port: int = 2587
    # Implicit TLS ("submissions", RFC 8314); None: not listening. 0 picks a free port.
    submissions_port: int | None = None
    submission_allow_plaintext_auth: bool = False
    sandbox_anonymous_user: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_handshake_timeout: float = 30.0

    max_message_size: int = 26214400
    max_recipients: int = 100

    # SMTP sessions and slow clients: connections beyond the caps get 421; a session with no input
    # for `smtp_idle_timeout` seconds, or whose replies stay unread for `smtp_write_timeout`, is cut.
    smtp_max_sessions: int = 1000
    smtp_max_sessions_per_ip: int = 100
    smtp_idle_timeout: float = 300.0
    smtp_write_timeout: float = 60.0
    # Seconds an RCPT answer is kept in memory to accept mail with (services/recipients.py); 0: off.
    recipient_cache_ttl: float = 2.0
    # A WebSocket frame still unwritten after this many seconds drops its client.
    ws_write_timeout: float = 30.0
    # Held resources (README "Slow, hostile and heavy clients"): WebSockets not yet authenticated,
    # per client address and in all, in each process; open waits per mailbox and per user (across
    # processes with Redis); and the rows a filter that no index answers may read.
    ws_max_unauthenticated: int = 1000
    ws_max_unauthenticated_per_ip: int = 50
    max_waits_per_mailbox: int = 10
    max_waits_per_user: int = 100
    filter_scan_rows: int = 10000
    # Seconds the search indexer waits after new mail before it takes in what came meanwhile (one
    # batch for a burst). Lists on `q`, `to` and `has_attachments` never wait for it: they index
    # their mailbox's waiting mail themselves (worker/indexer.py `catch_up`).
    index_linger: float = 0.05
    max_body_size: int = 1024 * 1024
    log_level: str = "info"
    # Networks (CIDRs) of the proxies that may name the client address: `X-Forwarded-For` over
    # HTTP, a PROXY protocol header on the SMTP listeners (http/client_address.py). Empty: none.
    trusted_proxies: list[str] = msgspec.field(default_factory=list)

    # Operating inboxd (README "Operating inboxd"): log format, the metrics token, the free-space
    # guard, and plain-HTTP webhooks for local development.
    log_format: Literal["text", "json"] = "text"
    metrics_token: str = ""
    # `host:port` of a listener that serves `/metrics` alone (the main HTTP port then answers 404
    # there), as Prometheus exporters offer; empty: `/metrics` is on the main HTTP port.
    metrics_listen: str = ""
    min_free_bytes: int = 100 * 1000 * 1000
    webhook_allow_http: bool = False

    # Release (README "Release to a real inbox"): the relay stored messages are sent on through.
    # `relay_allow` lists the recipient domains or addresses a release may reach; empty: none.
    relay_host: str = ""
    relay_port: int = 587
    relay_username: str = ""
    relay_password: str = ""
    relay_tls: Literal["starttls", "tls", "none"] = "starttls"
    relay_allow: list[str] = msgspec.field(default_factory=list)
    # A CA bundle to verify the relay's certificate with; empty: the system's store.
    relay_ca_file: str = ""
    # The MAIL FROM and Resent-From of a release: an address of the operator's, never the message's
    # From; required when releases are on (relay_host and relay_allow set).
    relay_sender: str = ""
    relay_timeout: float = 30.0
    # Releases one user may make per hour (a token bucket, burst the same).
    release_per_hour: int = 60

    def __post_init__(self) -> None:
        # Keyword arguments (tests, the command line) get the same normalising as the environment.
        fix = {name: _split_csv(getattr(self, name)) for name in _LISTS}
        fix["data_dir"] = Path(self.data_dir)
        fix["public_domains"] = _domains(fix["public_domains"])  # type: ignore[arg-type]
        fix["pro_only_domains"] = _domains(fix["pro_only_domains"])  # type: ignore[arg-type]
        fix["signup_allow"] = [d.lstrip("@") for d in _domains(fix["signup_allow"])]  # type: ignore[arg-type]
        fix["relay_allow"] = _domains(fix["relay_allow"])  # type: ignore[arg-type]
        for cidr in fix["trusted_proxies"]:  # type: ignore[attr-defined]
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise SettingsError(f"INBOXD_TRUSTED_PROXIES: {cidr!r} is not an address or network") from None
        for name, value in fix.items():
            msgspec.structs.force_setattr(self, name, value)
        if self.metrics_listen:
            self.metrics_address  # noqa: B018 - a value that is not host:port stops the start here
        if self.rspamd_url and urlsplit(self.rspamd_url).scheme not in ("http", "https"):
            raise SettingsError(f"INBOXD_RSPAMD_URL: {self.rspamd_url!r} is not an http(s) URL")
        if (
            self.link_check_concurrency < 1
            or self.link_check_user_concurrency < 1
            or self.link_check_rate < 0
            or self.link_check_max_redirects < 0
            or self.link_check_timeout <= 0
        ):
            raise SettingsError(
                "INBOXD_LINK_CHECK_CONCURRENCY, INBOXD_LINK_CHECK_USER_CONCURRENCY and INBOXD_LINK_CHECK_TIMEOUT "
                "must be positive, INBOXD_LINK_CHECK_RATE and INBOXD_LINK_CHECK_MAX_REDIRECTS at least 0"
            )
        if self.analysis_threads < 1 or self.analysis_budget <= 0:
            raise SettingsError("INBOXD_ANALYSIS_THREADS and INBOXD_ANALYSIS_BUDGET must be positive")
        if self.relay_host and self.relay_allow and not _plain_address(self.relay_sender):
            raise SettingsError(
                "INBOXD_RELAY_SENDER: releases are on (INBOXD_RELAY_HOST and INBOXD_RELAY_ALLOW are set), so "
                "they need the address they are sent from, e.g. INBOXD_RELAY_SENDER=releases@example.com "
                f"(got {self.relay_sender!r}); it is never taken from the message"
            )
        if self.render_contexts < 1 or self.render_timeout <= 0 or self.render_max_height < 320:
            raise SettingsError(
                "INBOXD_RENDER_CONTEXTS and INBOXD_RENDER_TIMEOUT must be positive, "
                "INBOXD_RENDER_MAX_HEIGHT at least 320"
            )

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """`INBOXD_METRICS_LISTEN` as (host, port); None when unset."""
        if not self.metrics_listen:
            return None
        host, _, port = self.metrics_listen.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"INBOXD_METRICS_LISTEN: expected host:port, got {self.metrics_listen!r}")
        return host, int(port)

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'inboxd.sqlite3').resolve()}"

    @property
    def is_postgres(self) -> bool:
        return self.resolved_database_url.startswith(("postgres://", "postgresql://"))

    @property
    def default_domain(self) -> str:
        return self.public_domains[0]

    @property
    def resolved_mx_host(self) -> str:
        return (self.mx_host or f"mx.{self.default_domain}").lower().rstrip(".")

    @property
    def resolved_web_origin(self) -> str:
        if self.web_origin:
            return self.web_origin.rstrip("/")
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def secure_cookies(self) -> bool:
        return self.base_url.lower().startswith("https://")

    @property
    def resolved_tls_cert(self) -> str:
        return self.tls_cert or self.smtp_tls_cert

    @property
    def resolved_tls_key(self) -> str:
        return self.tls_key or self.smtp_tls_key

    @property
    def resolved_smtp_hostname(self) -> str:
        return self.smtp_hostname or urlsplit(self.base_url).hostname or "localhost"


def _decode_path(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


def options() -> tuple[str, ...]:
    """Every option's name (`INBOXD_` + its upper-case form is its environment variable)."""
    return Settings.__struct_fields__


def replace(settings: Settings, **changes: object) -> Settings:
    """A copy of `settings` with some options changed."""
    return msgspec.structs.replace(settings, **changes)


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, reading `INBOXD_<NAME>_FILE` secrets first."""
    known = set(options())
    raw: dict[str, object] = {}
    # Sorted so that `INBOXD_<NAME>_FILE` comes after `INBOXD_<NAME>` and wins over it.
    for key, value in sorted(os.environ.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name.endswith("_file") and key not in _NOT_SECRET_FILES and name[: -len("_file")] in known:
            name = name[: -len("_file")]
            value = Path(value).read_text().strip()
        elif name not in known:
            continue  # extra variables are ignored, as other tools may share the prefix
        raw[name] = _split_csv(value) if name in _LISTS else value
    types = {f.name: f.type for f in msgspec.structs.fields(Settings)}
    for name, given in list(raw.items()):
        if isinstance(given, str) and types[name] is bool:
            # The spellings pydantic-settings took, so existing deployments keep working.
            raw[name] = _BOOLS.get(given.strip().lower(), given)
        elif given == "" and types[name] == int | None:
            del raw[name]  # an empty optional number means "not set"
    try:
        settings = msgspec.convert(raw, Settings, strict=False, dec_hook=_decode_path)
    except msgspec.ValidationError as exc:
        raise SettingsError(_explain(exc)) from exc
    return replace(settings, **overrides) if overrides else settings


def _explain(exc: msgspec.ValidationError) -> str:
    # msgspec says "Expected `int`, got `str` - at `$.http_port`": name the variable instead.
    text = str(exc)
    message, _, where = text.partition(" - at `$.")
    name = where.rstrip("`").split("[")[0].split(".")[0]
    return f"{ENV_PREFIX}{name.upper()}: {message}" if name else text
