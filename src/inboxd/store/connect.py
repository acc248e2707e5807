"""Opening the configured store: the migrations first (in a child process, or the ones `serve`
started early), then the engine of the back end the database URL names."""

from __future__ import annotations

import asyncio

from inboxd.config import Settings
from inboxd.store import migrate
from inboxd.store.db import Database
from inboxd.store.postgres import PostgresDatabase
from inboxd.store.sqlite import SqliteDatabase

__all__ = ["open_database"]


async def open_database(settings: Settings, *, migrating: migrate.PendingUpgrade | None = None) -> Database:
    """Migrate (or wait for the migrations `serve` started early), then open the hot-path access
    for the configured back end."""
    url = settings.resolved_database_url
    if migrating is not None:
        await asyncio.to_thread(migrating.wait)
    else:
        if not settings.is_postgres:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(migrate.upgrade_in_child, url, schema=settings.database_schema)
    if settings.is_postgres:
        return await PostgresDatabase.connect(url, schema=settings.database_schema)
    return SqliteDatabase(url.removeprefix("sqlite:///"))
