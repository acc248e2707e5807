"""The credential and recipient caches (`services/ttl_cache.py`, and the recipient cache over it)
cannot resurrect: a `changed` announcement that lands while a lookup is in flight is never undone
by that lookup's answer, which was read before the change.

The race through the real store needs a read that pauses between two statements: PostgreSQL's
mailbox-token lookup reads the mailbox, then its owner, and a test can hold the owner's table with
a real lock. The recipient lookup is one statement (and SQLite reads never yield), so that cache is
driven through its public API with a lookup that waits on an event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from inboxd.errors import Unauthorized
from inboxd.model import Mailbox, Principal, User
from inboxd.services.recipients import RecipientCache
from inboxd.services.ttl_cache import TtlCache
from inboxd.store.mailboxes import RecipientRow
from tests.conftest import PG_URL, Clock, Harness

postgres_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def slow(answer: Any) -> tuple[Callable[[], Awaitable[Any]], asyncio.Event, asyncio.Event]:
    """A lookup that answers `answer` once released, and the events: started, release."""
    started, release = asyncio.Event(), asyncio.Event()

    async def lookup() -> Any:
        started.set()
        await release.wait()
        return answer

    return lookup, started, release


def user() -> User:
    return User(id="u1", email="a@example.test", plan="pro", role="user", status="active", created_at=0.0)


def row() -> RecipientRow:
    mailbox = Mailbox(
        id="m1",
        user_id="u1",
        token_id=None,
        address="a@inboxd.localhost",
        domain_id=None,
        quota=1000,
        used=0,
        password_gen=0,
        created_at=0.0,
    )
    return RecipientRow(mailbox=mailbox, plan="pro", user_status="active", domain_live=True)


async def test_a_credential_lookup_in_flight_across_a_change_is_not_kept() -> None:
    cache: TtlCache[str, Principal] = TtlCache(ttl=2.0)
    principal = Principal(user=user(), mailbox_id="m1")
    lookup, started, release = slow(principal)
    task = asyncio.create_task(cache.fetch("m1:0", lookup, now=100.0))
    await started.wait()
    cache.clear()  # the `changed` announcement of, say, a password reset
    release.set()
    assert await task == principal  # the request that asked before the change gets its answer

    async def refuse() -> Principal:
        raise Unauthorized("gone", code="invalid_or_expired_token")

    assert cache.get("m1:0", 100.5) is None
    with pytest.raises(Unauthorized):
        await cache.fetch("m1:0", refuse, now=100.5)
    assert cache.get("m1:0", 100.5) is None
    # A lookup with no change meanwhile is kept.
    assert await cache.fetch("m1:0", slow_free(principal), now=101.0) == principal
    assert cache.get("m1:0", 101.5) == principal


def slow_free(answer: Any) -> Callable[[], Awaitable[Any]]:
    async def lookup() -> Any:
        return answer

    return lookup


async def test_a_recipient_lookup_in_flight_across_a_change_is_not_kept(clock: Clock) -> None:
    cache = RecipientCache(clock=clock, ttl=2.0)
    found = row()
    lookup, started, release = slow(found)
    task = asyncio.create_task(cache.fetch("a@inboxd.localhost", lookup))
    await started.wait()
    cache.clear()  # e.g. the mailbox was deleted and announced meanwhile
    release.set()
    assert await task == found
    assert cache.get("a@inboxd.localhost") is None
    # Without a change meanwhile, the row is kept.
    await cache.fetch("a@inboxd.localhost", slow_free(found))
    assert cache.get("a@inboxd.localhost") == (found, 0)


async def owner_read_is_waiting(schema: str) -> None:
    """Until another session waits for the lock on `users` (polled: the wait is in PostgreSQL)."""

    def waiting() -> bool:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                (f'"{schema}".users',),
            ).fetchone()
        return bool(found and found[0])

    async with asyncio.timeout(30):
        while not await asyncio.to_thread(waiting):
            await asyncio.sleep(0.02)


@postgres_only
async def test_a_reset_during_a_mailbox_token_lookup_is_not_undone_by_it(harness: Harness) -> None:
    box = await harness.new_mailbox()
    schema = harness.server.settings.database_schema
    url = f"/api/accounts/{box['id']}"
    auth = harness.auth(box["token"])
    # The lock's connection is used from the loop: each call on it returns at once.
    lock = psycopg.connect(PG_URL)
    try:
        lock.execute(f'LOCK TABLE "{schema}".users IN ACCESS EXCLUSIVE MODE')
        # In flight: it has read the mailbox (generation 0) and waits for its owner's row.
        asking = asyncio.create_task(harness.http.get(url, headers=auth))
        await owner_read_is_waiting(schema)
        # The reset, as another process makes it: committed, then announced on the bus.
        with psycopg.connect(PG_URL, autocommit=True) as other:
            other.execute(
                f'UPDATE "{schema}".mailboxes SET password_gen = password_gen + 1 WHERE id = %s', (box["id"],)
            )
        await harness.server.services.bus.changed()
    finally:
        lock.rollback()
        lock.close()
    assert (await asking).status_code == 200  # it asked before the reset
    after = await harness.http.get(url, headers=auth)
    assert after.status_code == 401, after.text
    assert after.json()["error"] == "invalid_or_expired_token"
