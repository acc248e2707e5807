"""The command line: `inboxd serve`, `inboxd migrate`, `inboxd users …`, `inboxd tokens …`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from inboxd.config import Settings, load_settings
from inboxd.errors import InboxdError
from inboxd.services.signin import SignInService
from inboxd.services.users import UserService
from inboxd.store import migrate
from inboxd.store.db import Database

T = TypeVar("T")


def _run(coro: Awaitable[T]) -> T:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(coro)  # type: ignore[arg-type]


async def _with_db(settings: Settings, action: Callable[[Database], Awaitable[T]]) -> T:
    from inboxd.app import open_database

    db = await open_database(settings)
    try:
        return await action(db)
    finally:
        await db.close()


async def _with_users(settings: Settings, action: Callable[[UserService], Awaitable[T]]) -> T:
    return await _with_db(settings, lambda db: action(UserService(db, clock=time.time)))


@click.group()
def main() -> None:
    """inboxd: receivable mailboxes over SMTP, served through REST, WebSocket and webhooks."""


@main.command()
@click.option("--host", help="HTTP host (INBOXD_HTTP_HOST).")
@click.option("--port", type=int, help="HTTP port (INBOXD_HTTP_PORT).")
@click.option("--smtp-host", help="SMTP host (INBOXD_SMTP_HOST).")
@click.option("--smtp-port", type=int, help="SMTP port (INBOXD_SMTP_PORT).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Data directory (INBOXD_DATA_DIR).")
def serve(
    host: str | None, port: int | None, smtp_host: str | None, smtp_port: int | None, data_dir: Path | None
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
        }.items()
        if v is not None
    }
    settings = load_settings(**overrides)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from inboxd.app import serve as run_server

    _run(run_server(settings))


@main.command("migrate")
def migrate_command() -> None:
    """Apply the database migrations and exit."""
    settings = load_settings()
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
    user = _guarded(_with_users(load_settings(), lambda s: s.create_user(email, plan=plan, role=role)))
    click.echo(f"created user {user.email} ({user.plan}, {user.role}) id={user.id}")


@users.command("set")
@click.option("--email", required=True)
@click.option("--plan", type=click.Choice(["free", "pro"]))
@click.option("--status", type=click.Choice(["active", "suspended"]))
def users_set(email: str, plan: str | None, status: str | None) -> None:
    """Change a user's plan or status."""
    user = _guarded(_with_users(load_settings(), lambda s: s.set_user(email, plan=plan, status=status)))
    click.echo(f"user {user.email}: plan={user.plan} status={user.status}")


@users.command("sign-in-link")
@click.option("--email", required=True, help="The user the link signs in.")
def users_sign_in_link(email: str) -> None:
    """Print a one-time dashboard sign-in link (alone on the last line; valid 15 minutes by default)."""
    settings = load_settings()

    async def issue(db: Database) -> str:
        user = await UserService(db, clock=time.time).user_by_email(email)
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

    value = _guarded(_with_users(load_settings(), create))
    click.echo(f"API token for {email} (shown once):")
    click.echo(value)


def _guarded(coro: Awaitable[T]) -> T:
    try:
        return _run(coro)
    except InboxdError as exc:
        raise click.ClickException(exc.message) from exc
