"""The command line: `inboxd serve`, `inboxd migrate`, `inboxd users …`, `inboxd tokens …`, `inboxd check FILE`."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

import click

from inboxd.config import Settings, SettingsError, load_settings
from inboxd.errors import InboxdError
from inboxd.events import LocalBus
from inboxd.services.sign_in import SignInService
from inboxd.services.users import UserService
from inboxd.store import migrate
from inboxd.store.db import Database

T = TypeVar("T")


def _settings(**overrides: object) -> Settings:
    """The settings, or a one-line error naming the variable that could not be read."""
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        raise click.ClickException(f"configuration: {exc}") from exc


def _run(coro: Awaitable[T]) -> T:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(coro)  # type: ignore[arg-type]


def _existing_store(settings: Settings) -> Settings:
    """The settings of a store that is there: a command that acts on users, tokens or links run
    outside the directory `make run` ran in would otherwise create an empty `./data` and act on
    that. It says where it looked instead."""
    if settings.is_postgres:
        return settings
    database = settings.resolved_database_url.removeprefix("sqlite:///")
    if Path(database).is_file():
        return settings
    how = "INBOXD_DATA_DIR" if "INBOXD_DATA_DIR" in os.environ else "INBOXD_DATA_DIR is unset, so ./data"
    raise click.ClickException(
        f"no inboxd database at {database} ({how}, from {os.getcwd()}). Run this in the directory "
        "`make run` ran in, or set INBOXD_DATA_DIR (or INBOXD_DATABASE_URL) to the server's; "
        "`inboxd serve` or `inboxd migrate` creates a new one."
    )


async def _with_db(settings: Settings, action: Callable[[Database], Awaitable[T]]) -> T:
    from inboxd.store.connect import open_database

    db = await open_database(_existing_store(settings))
    try:
        return await action(db)
    finally:
        await db.close()


def _users(db: Database, settings: Settings) -> UserService:
    # A bus of its own: running servers see a change made here once what they keep in memory of
    # users, tokens and mailboxes is a few seconds old (services/users.py, services/recipients.py).
    return UserService(db, clock=time.time, bus=LocalBus(), max_tokens=settings.max_tokens_per_user)


async def _with_users(settings: Settings, action: Callable[[UserService], Awaitable[T]]) -> T:
    return await _with_db(settings, lambda db: action(_users(db, settings)))


def invocation() -> str:
    """This inboxd's command as it can be typed again here: `inboxd` when that is the one on PATH,
    else the path it was started by (`.venv/bin/inboxd` after `make run`), or `PYTHON -m inboxd`.
    Every hint printed at start names it, so each one runs as printed."""
    started = sys.argv[0]
    if Path(started).name == "__main__.py":
        return f"{_typed(sys.executable)} -m inboxd"
    on_path = shutil.which("inboxd")
    if on_path and os.path.realpath(on_path) == os.path.realpath(started):
        return "inboxd"
    return _typed(started)


def _typed(path: str) -> str:
    # A path under the working directory stays relative (`.venv/bin/inboxd`); the venv's own
    # symlinks are kept, as resolving them would leave the venv.
    relative = os.path.relpath(os.path.abspath(path))
    if relative.startswith(".."):
        return shlex.quote(os.path.abspath(path))
    return shlex.quote(relative if os.sep in relative else f".{os.sep}{relative}")


@click.group()
@click.version_option(package_name="inboxd", prog_name="inboxd")
def main() -> None:
    """inboxd: receivable mailboxes over SMTP, served through REST, WebSocket and webhooks."""


@main.command()
@click.option("--host", help="HTTP host (INBOXD_HTTP_HOST).")
@click.option("--port", type=int, help="HTTP port (INBOXD_HTTP_PORT).")
@click.option("--smtp-host", help="SMTP host (INBOXD_SMTP_HOST).")
@click.option("--smtp-port", type=int, help="SMTP port (INBOXD_SMTP_PORT).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Data directory (INBOXD_DATA_DIR).")
@click.option("--workers", type=click.IntRange(min=1), help="Processes sharing the ports (INBOXD_WORKERS).")
def serve(
    host: str | None,
    port: int | None,
    smtp_host: str | None,
    smtp_port: int | None,
    data_dir: Path | None,
    workers: int | None,
) -> None:
    """Start the SMTP, HTTP and WebSocket servers and the workers."""
    overrides = {
        k: v
        for k, v in {
            "http_host": host,
            "http_port": port,
            "smtp_host": smtp_host,
            "smtp_port": smtp_port,
            "data_dir": data_dir,
            "workers": workers,
        }.items()
        if v is not None
    }
    settings = _settings(**overrides)
    if settings.workers > 1:
        from inboxd import supervisor

        try:
            raise SystemExit(supervisor.run(settings, env=supervisor.environment(overrides)))
        except supervisor.SupervisorError as exc:
            raise click.ClickException(str(exc)) from exc
    # The migrations' child process starts now and runs while this one imports the server.
    if not settings.is_postgres:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrating = migrate.begin_upgrade(settings.resolved_database_url, schema=settings.database_schema)
    from inboxd.logs import configure
    from inboxd.logs import drain as drain_logs

    configure(level=settings.log_level, fmt=settings.log_format, batched=True)
    from inboxd.app import serve as run_server
    from inboxd.keyring import SecretKeyError
    from inboxd.listeners import ListenError

    # Commands printed at start reach this data directory even when it came from --data-dir.
    command = invocation() if data_dir is None else f"INBOXD_DATA_DIR={shlex.quote(str(data_dir))} {invocation()}"
    try:
        _run(run_server(settings, migrating=migrating, command=command))
    except SecretKeyError as exc:
        raise click.ClickException(f"secret key: {exc}") from exc
    except ListenError as exc:  # a port in use: one line naming the setting, not a traceback
        raise click.ClickException(str(exc)) from exc
    finally:
        drain_logs()  # the lines logged so far go before the error line click prints


@main.command("mcp")
@click.option("--config", "print_config", is_flag=True, help="Print an MCP client's configuration for this inboxd.")
def mcp_command(print_config: bool) -> None:
    """Serve inboxd's MCP tools over stdio (configured by INBOXD_URL and INBOXD_TOKEN)."""
    if print_config:
        click.echo(json.dumps(mcp_config(), indent=2))
        return
    from inboxd.mcp import run

    run()


def mcp_config() -> dict[str, object]:
    """An `mcpServers` entry whose command is this inboxd by absolute path: an MCP client starts
    it from its own directory, where neither `.venv/bin/inboxd` nor PATH may lead here."""
    if Path(sys.argv[0]).name == "__main__.py":
        command, args = os.path.abspath(sys.executable), ["-m", "inboxd", "mcp"]
    else:
        command, args = os.path.abspath(shutil.which(sys.argv[0]) or sys.argv[0]), ["mcp"]
    url = os.environ.get("INBOXD_URL") or _settings().base_url.rstrip("/")
    env = {"INBOXD_URL": url, "INBOXD_TOKEN": "ibx_…"}
    return {"mcpServers": {"inboxd": {"command": command, "args": args, "env": env}}}


@main.command("migrate")
def migrate_command() -> None:
    """Apply the database migrations and exit."""
    settings = _settings()
    if not settings.is_postgres:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.resolved_database_url, schema=settings.database_schema)
    click.echo("migrated")


@main.group()
def users() -> None:
    """Manage users."""


@users.command("create")
@click.option("--email", required=True)
@click.option("--plan", type=click.Choice(["free", "pro"]), default="free", show_default=True)
@click.option("--role", type=click.Choice(["user", "admin"]), default="user", show_default=True)
def users_create(email: str, plan: str, role: str) -> None:
    """Create a user."""
    user = _guarded(_with_users(_settings(), lambda s: s.create_user(email, plan=plan, role=role)))
    click.echo(f"created user {user.email} ({user.plan}, {user.role}) id={user.id}")


@users.command("set")
@click.option("--email", required=True)
@click.option("--plan", type=click.Choice(["free", "pro"]))
@click.option("--status", type=click.Choice(["active", "suspended"]))
def users_set(email: str, plan: str | None, status: str | None) -> None:
    """Change a user's plan or status."""
    user = _guarded(_with_users(_settings(), lambda s: s.set_user(email, plan=plan, status=status)))
    click.echo(f"user {user.email}: plan={user.plan} status={user.status}")


@users.command("sign-in-link")
@click.option("--email", required=True, help="The user the link signs in.")
def users_sign_in_link(email: str) -> None:
    """Print a one-time dashboard sign-in link (alone on the last line; valid 15 minutes by default)."""
    settings = _settings()

    async def issue(db: Database) -> str:
        user = await _users(db, settings).user_by_email(email)
        return await SignInService(db, settings=settings, clock=time.time).issue_link(user)

    link = _guarded(_with_db(settings, issue))
    minutes = max(1, round(settings.sign_in_link_ttl / 60))
    click.echo(f"One-time sign-in link for {email} (valid {minutes} minutes, works once):")
    click.echo(link)


@main.group()
def tokens() -> None:
    """Manage API tokens."""


@tokens.command("create")
@click.option("--email", required=True, help="The user the token acts for.")
@click.option("--name", required=True, help="A label for the token.")
def tokens_create(email: str, name: str) -> None:
    """Create an API token; the token is printed alone on the last line, once."""

    async def create(service: UserService) -> str:
        user = await service.user_by_email(email)
        return (await service.create_token(user, name)).value

    value = _guarded(_with_users(_settings(), create))
    click.echo(f"API token for {email} (shown once):")
    click.echo(value)


def _guarded(coro: Awaitable[T]) -> T:
    try:
        return _run(coro)
    except InboxdError as exc:
        raise click.ClickException(exc.message) from exc


# ---- operating inboxd: backup, export, doctor ---------------------------------------------


@main.command("backup")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
def backup_command(path: Path) -> None:
    """Copy the SQLite database to PATH, consistently, while inboxd keeps serving."""
    from inboxd.backup import BackupError, backup

    try:
        count = backup(_settings(), path)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"backed up to {path} ({count} messages)")


@main.command("export")
@click.option("--mailbox", "address", required=True, help="The mailbox's address.")
@click.option("--format", "fmt", type=click.Choice(["mbox", "maildir"]), default="mbox", show_default=True)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    help="File (mbox) or directory (maildir) to write; mbox goes to standard output without it.",
)
def export_command(address: str, fmt: str, output: Path | None) -> None:
    """Write a mailbox's messages, oldest first, as mbox or into a Maildir."""
    if fmt == "maildir" and output is None:
        raise click.UsageError("--format maildir needs --output DIRECTORY.")

    to_file = output is not None and fmt == "mbox"
    sink: BinaryIO = open(str(output), "wb") if to_file else sys.stdout.buffer  # noqa: SIM115

    async def run() -> int:
        import time

        from inboxd.services.export import ExportService
        from inboxd.store import mailboxes as mailbox_store
        from inboxd.store.connect import open_database

        db = await open_database(_settings())
        try:
            found = await db.read(lambda tx: mailbox_store.get_by_address(tx, address.strip().lower()))
            if found is None:
                raise click.ClickException(f"No mailbox {address}.")
            exports = ExportService(db, clock=time.time)
            if fmt == "maildir":
                assert output is not None
                return await exports.to_maildir(found, output)
            count = 0
            async for entry in exports.mbox(found):
                sink.write(entry)
                count += 1
            return count
        finally:
            await db.close()

    try:
        count = _run(run())
    finally:
        sink.flush()
        if to_file:
            sink.close()
    click.echo(f"exported {count} messages from {address}", err=True)


@main.command("doctor")
def doctor_command() -> None:
    """Check the configuration, data directory, database, Redis, DNS and ports; say what is wrong."""
    from inboxd.doctor import run_checks

    try:
        settings = load_settings()
    except (SettingsError, OSError) as exc:
        click.echo(f"fail  config: the configuration cannot be read: {exc}")
        raise SystemExit(1) from exc
    findings = run_checks(settings)
    for finding in findings:
        click.echo(f"{finding.level:<5} {finding.check}: {finding.text}")
    failed = sum(f.level == "fail" for f in findings)
    click.echo("inboxd doctor: " + (f"{failed} problem(s) found." if failed else "all checks passed."))
    if failed:
        raise SystemExit(1)


@main.command("check")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the API's shape).")
@click.option(
    "--dns",
    "nameservers",
    multiple=True,
    metavar="IP[:PORT]",
    help="Verify DKIM signatures and the ARC chain over this nameserver (repeatable; else "
    "INBOXD_DNS_NAMESERVERS, comma-separated; without either they are not run).",
)
@click.option("--dns-timeout", default=5.0, show_default=True, help="Seconds per DNS lookup.")
def check_command(path: Path, as_json: bool, nameservers: tuple[str, ...], dns_timeout: float) -> None:
    """Judge a message file (.eml) without a server: HTML compatibility and content; DKIM and ARC
    when a nameserver is given; links are listed, spam reported as not run, SPF and DMARC too (they
    need the client address). Exit status 1 when there is an error."""
    import msgspec

    from inboxd.mail.checks import combine, judge_message
    from inboxd.mail.checks.render import render_text

    raw = path.read_bytes()
    servers = list(nameservers) or [
        s.strip() for s in os.environ.get("INBOXD_DNS_NAMESERVERS", "").split(",") if s.strip()
    ]
    report = judge_message(
        raw,
        auth_reason="DKIM and ARC need DNS: pass --dns or set INBOXD_DNS_NAMESERVERS; SPF and DMARC need "
        "the client address, which a file does not have",
    )
    if servers:
        from inboxd.services.checks.auth import AuthChecker
        from inboxd.services.checks.reports import signatures_part

        checker = AuthChecker(nameservers=servers, timeout=dns_timeout, authserv_id="inboxd-check")
        try:
            auth = signatures_part(checker.check_signatures_blocking(raw))
        except ValueError as exc:  # a nameserver that is not an address
            raise click.BadParameter(str(exc), param_hint="--dns / INBOXD_DNS_NAMESERVERS") from None
        report = combine(report.html, report.links, report.spam, auth, report.content)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
    else:
        click.echo(render_text(report, path.name))
    if report.verdict == "error":
        raise SystemExit(1)
