"""`inboxd doctor`: check the configuration and the world around inboxd, in plain words.

Each check answers ok, warn or fail with one sentence of what was found and, when something is
wrong, what to do. Nothing is changed: the database is opened read-only (no migration), ports
are bound and let go at once. A port that is taken is asked who holds it: a running inboxd (its
`/healthz` answers, its SMTP greeting names it) is reported as running, not as a problem.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import os
import socket
import sqlite3
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inboxd.config import Settings
from inboxd.services.space import free_bytes
from inboxd.store import migrate

# `info` says how an optional part is set (off is a choice, not a problem).
Level = Literal["ok", "info", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    level: Level
    text: str


def _mb(n: int) -> str:
    return f"{n / 1_000_000:,.0f} MB"


def check_config(settings: Settings) -> list[Finding]:
    out: list[Finding] = []
    if not settings.public_domains:
        out.append(Finding("config", "fail", "INBOXD_PUBLIC_DOMAINS is empty: no mailbox could be created."))
    for name in ("smtp_tls_cert", "smtp_tls_key", "webhook_ca_file"):
        value = getattr(settings, name)
        if value and not Path(value).is_file():
            out.append(Finding("config", "fail", f"INBOXD_{name.upper()} names {value}, which is not a readable file."))
    if settings.smtp_tls_key and not settings.smtp_tls_cert:
        out.append(Finding("config", "fail", "INBOXD_SMTP_TLS_KEY is set without INBOXD_SMTP_TLS_CERT."))
    if not settings.base_url.startswith(("http://", "https://")):
        out.append(Finding("config", "fail", f"INBOXD_BASE_URL {settings.base_url!r} is not an http(s) URL."))
    if settings.webhook_allow_http:
        out.append(
            Finding(
                "config", "warn", "INBOXD_WEBHOOK_ALLOW_HTTP is on: webhooks may go out unencrypted (development only)."
            )
        )
    if not out:
        out.append(
            Finding("config", "ok", f"configuration read; public domains: {', '.join(settings.public_domains)}.")
        )
    return out


def check_data_dir(settings: Settings) -> list[Finding]:
    path = settings.data_dir
    probe = path if path.exists() else path.parent
    if not probe.exists():
        return [Finding("data dir", "fail", f"{path} does not exist, nor does its parent; create it.")]
    if not os.access(probe, os.W_OK):
        return [Finding("data dir", "fail", f"{probe} is not writable by this user (uid {os.getuid()}).")]
    free = free_bytes(probe)
    if settings.min_free_bytes and free < settings.min_free_bytes:
        return [
            Finding(
                "disk",
                "fail",
                f"only {_mb(free)} free under {probe}, below INBOXD_MIN_FREE_BYTES ({_mb(settings.min_free_bytes)}): "
                "inboxd would refuse mail (452) and API writes (507).",
            )
        ]
    return [Finding("data dir", "ok", f"{path} is writable; {_mb(free)} free.")]


def check_database(settings: Settings) -> list[Finding]:
    if settings.is_postgres:
        try:
            import psycopg
            from psycopg import sql

            with psycopg.connect(_psycopg_url(settings.resolved_database_url), connect_timeout=5) as pg:
                table = sql.Identifier(*filter(None, [settings.database_schema, "alembic_version"]))
                try:
                    row = pg.execute(sql.SQL("SELECT version_num FROM {}").format(table)).fetchone()
                except psycopg.errors.UndefinedTable:
                    row = None
        except Exception as exc:
            return [Finding("database", "fail", f"cannot reach PostgreSQL: {_first_line(exc)}")]
        return [_schema_finding("PostgreSQL answers", row[0] if row else None)]
    path = Path(settings.resolved_database_url.removeprefix("sqlite:///"))
    if not path.exists():
        return [Finding("database", "ok", f"no database yet at {path}; inboxd creates it at first start.")]
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()
            version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return [Finding("database", "fail", f"{path} cannot be read as a SQLite database: {exc}.")]
    if result != ("ok",):
        return [Finding("database", "fail", f"{path} failed SQLite's quick check: {result}. Restore a backup.")]
    return [_schema_finding(f"SQLite at {path} is sound", version[0] if version else None)]


def _schema_finding(found: str, revision: str | None) -> Finding:
    """The database's schema revision against the migrations this inboxd ships."""
    head = migrate.head_revision()
    if revision == head:
        return Finding("database", "ok", f"{found} (schema {head}).")
    if revision is None:
        return Finding("database", "ok", f"{found}; no schema yet: inboxd builds it at first start.")
    if revision not in migrate.revisions():
        return Finding(
            "database", "fail", f"{found}, but its schema {revision} is newer than this inboxd's ({head}): upgrade it."
        )
    return Finding(
        "database",
        "warn",
        f"{found}; migrations are pending (schema {revision}, this inboxd's is {head}): "
        "`inboxd migrate`, or the next start, applies them.",
    )


def _psycopg_url(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_redis(settings: Settings) -> list[Finding]:
    if not settings.redis_url:
        return [Finding("redis", "ok", "not configured: limits and events stay in this process.")]

    async def ping() -> None:
        import redis.asyncio as redis

        client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
        try:
            await client.ping()
        finally:
            await client.aclose()

    try:
        asyncio.run(ping())
    except Exception as exc:
        return [Finding("redis", "fail", f"cannot reach Redis at INBOXD_REDIS_URL: {_first_line(exc)}")]
    return [Finding("redis", "ok", "Redis answers.")]


def check_dns(settings: Settings) -> list[Finding]:
    import dns.asyncresolver
    import dns.exception
    import dns.resolver

    from inboxd.dns import parse_nameserver

    async def ask() -> str:
        resolver = dns.asyncresolver.Resolver(configure=not settings.dns_nameservers)
        if settings.dns_nameservers:
            resolver.nameservers = [parse_nameserver(s) for s in settings.dns_nameservers]
        resolver.lifetime = settings.dns_timeout
        try:
            answer = await resolver.resolve(settings.resolved_mx_host, "A", search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return "missing"
        return ", ".join(r.to_text() for r in answer)

    where = ", ".join(settings.dns_nameservers) or "the system's resolver"
    try:
        found = asyncio.run(ask())
    except (dns.exception.DNSException, OSError) as exc:
        return [
            Finding(
                "dns",
                "fail",
                f"{where} did not answer ({_first_line(exc)}): custom domains could never be verified. "
                "Check INBOXD_DNS_NAMESERVERS.",
            )
        ]
    if found == "missing" and _is_localhost(settings.resolved_mx_host):
        # RFC 6761: such names never leave this machine; the laptop default has no public MX.
        return [
            Finding(
                "dns",
                "ok",
                f"{where} answers; {settings.resolved_mx_host} is a .localhost name (this machine only: set "
                "INBOXD_MX_HOST to a public name to receive mail for custom domains).",
            )
        ]
    if found == "missing":
        return [
            Finding(
                "dns",
                "warn",
                f"{where} answers, but {settings.resolved_mx_host} (INBOXD_MX_HOST) has no address: "
                "mail for custom domains pointed at it would not arrive.",
            )
        ]
    return [Finding("dns", "ok", f"{where} answers; {settings.resolved_mx_host} is {found}.")]


def _is_localhost(name: str) -> bool:
    return name == "localhost" or name.endswith(".localhost")


def check_port(label: str, variable: str, host: str, port: int, *, held_by_us: Callable[[str, int], bool]) -> Finding:
    if port == 0:
        return Finding(label, "ok", f"{variable}=0: a free port is picked at start.")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                if held_by_us(host, port):
                    return Finding(label, "ok", f"{host}:{port}: inboxd is running there.")
                why = "is already in use by another program"
            elif exc.errno == errno.EACCES:
                why = "needs privileges (ports under 1024 need root or CAP_NET_BIND_SERVICE)"
            elif exc.errno == errno.EADDRNOTAVAIL:
                why = "is on an address this machine does not have"
            else:
                why = f"cannot be bound ({exc.strerror})"
            return Finding(label, "fail", f"{host}:{port} {why}; change {variable} or free the port.")
    return Finding(label, "ok", f"{host}:{port} is free.")


def _reachable(host: str) -> str:
    """Where to connect for a listener bound to `host` (a wildcard is reached on loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    return "::1" if host == "::" else host


PROBE_TIMEOUT = 3.0


def _healthz_answers(host: str, port: int) -> bool:
    target = _reachable(host)
    netloc = f"[{target}]:{port}" if ":" in target else f"{target}:{port}"
    try:
        with urllib.request.urlopen(f"http://{netloc}/healthz", timeout=PROBE_TIMEOUT) as answer:
            return bool(answer.status == 200 and b'"ok"' in answer.read(256))
    except (OSError, ValueError):
        return False


def _greets_as_inboxd(host: str, port: int) -> bool:
    try:
        with socket.create_connection((_reachable(host), port), timeout=PROBE_TIMEOUT) as conn:
            greeting = conn.recv(512)
    except OSError:
        return False
    return greeting.startswith(b"220 ") and b" ESMTP inboxd " in greeting


def check_optional_parts(settings: Settings) -> list[Finding]:
    """Renders, spam scores and release: each on or off, and how to turn an off one on."""
    out: list[Finding] = []
    if importlib.util.find_spec("playwright") is None:
        render = "off: the `render` extra (Playwright) is not installed (from the checkout: pip install '.[render]')."
    else:
        chromium = settings.render_chromium
        render = (
            f"on: Chromium at {chromium}."
            if Path(chromium).is_file()
            else f"off: no Chromium at {chromium} (INBOXD_RENDER_CHROMIUM; on Debian: apt-get install chromium)."
        )
    out.append(Finding("render", "info", render))
    out.append(
        Finding(
            "rspamd",
            "info",
            f"on: spam scores from {settings.rspamd_url}."
            if settings.rspamd_url
            else "off: checks give no spam score (set INBOXD_RSPAMD_URL to rspamd's HTTP API, e.g. http://127.0.0.1:11333).",
        )
    )
    out.append(
        Finding(
            "release",
            "info",
            f"on: through {settings.relay_host}:{settings.relay_port}."
            if settings.relay_host
            else "off: sandbox mail cannot be released (set INBOXD_RELAY_HOST; docs/release.md).",
        )
    )
    return out


def run_checks(settings: Settings) -> list[Finding]:
    findings = check_config(settings)
    findings += check_optional_parts(settings)
    findings += check_data_dir(settings)
    findings += check_database(settings)
    findings += check_redis(settings)
    findings += check_dns(settings)
    findings.append(
        check_port("http port", "INBOXD_HTTP_PORT", settings.http_host, settings.http_port, held_by_us=_healthz_answers)
    )
    findings.append(
        check_port(
            "smtp port", "INBOXD_SMTP_PORT", settings.smtp_host, settings.smtp_port, held_by_us=_greets_as_inboxd
        )
    )
    findings.append(
        check_port(
            "submission port",
            "INBOXD_SUBMISSION_PORT",
            settings.submission_host,
            settings.submission_port,
            held_by_us=_greets_as_inboxd,
        )
    )
    return findings
