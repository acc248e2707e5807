"""Storage rules no other test held down: losing PostgreSQL answers a retryable refusal (SMTP 451,
HTTP 500 with the generic body) and inboxd recovers by itself once the database is back; two
first sign-ins of one person at the same moment make one user, on both back ends and across two
processes sharing one store."""

from __future__ import annotations

import asyncio
import smtplib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.services.sign_in import VouchedIdentity
from tests.conftest import Clock, Harness, simple_message
from tests.tcp_proxy import TcpProxy

postgres_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
GENERIC = {"error": "internal_error", "message": "An unexpected error occurred."}


@pytest.fixture
async def pg_proxy() -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@postgres_only
async def test_losing_postgres_answers_451_and_500_then_recovers(
    make_settings: Any, clock: Clock, pg_proxy: TcpProxy
) -> None:
    base = make_settings()
    settings = make_settings(database_url=base.database_url.replace(":5432/", f":{pg_proxy.port}/"))
    assert f":{pg_proxy.port}/" in settings.database_url
    server = Inboxd(settings, clock=clock)
    await server.start()
    try:
        assert server.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            h = Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
            box = await h.new_mailbox()
            listing = f"/api/accounts/{box['id']}/messages"
            await h.send(box["address"], simple_message(subject="before"))

            pg_proxy.cut()
            lost = await http.get(listing, headers=h.auth())
            assert lost.status_code == 500 and lost.json() == GENERIC, lost.text
            # The sender is told to come back later, at RCPT or after DATA, never "delivered".
            with pytest.raises((smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError)) as refused:
                await h.send(box["address"], simple_message(subject="during"))
            error = refused.value
            if isinstance(error, smtplib.SMTPRecipientsRefused):
                codes = [code for code, _ in error.recipients.values()]
            else:
                assert isinstance(error, smtplib.SMTPDataError)
                codes = [error.smtp_code]
            assert codes == [451], codes
            assert (await http.get("/healthz")).status_code == 200  # the process itself is fine

            pg_proxy.restore()
            # Back without a restart: the first request and the first message after it succeed.
            again = await http.get(listing, headers=h.auth())
            assert again.status_code == 200, again.text
            assert await h.send(box["address"], simple_message(subject="after")) == {}
            subjects = [m["subject"] for m in (await http.get(listing, headers=h.auth())).json()["messages"]]
            assert subjects == ["after", "before"]  # "during" was refused, so not stored
    finally:
        await server.stop()


# --- concurrent first sign-ins --------------------------------------------------------------


@pytest.fixture
async def two_processes(make_settings: Any, clock: Clock) -> AsyncIterator[tuple[Inboxd, Inboxd]]:
    """Two inboxd on one store, each with its own writer, as two processes of a fleet."""
    first = Inboxd(make_settings(signup_allow=["example.test"]), clock=clock)
    await first.start()
    second = Inboxd(make_settings(signup_allow=["example.test"]), clock=clock)
    try:
        await second.start()
        try:
            yield first, second
        finally:
            await second.stop()
    finally:
        await first.stop()


def person() -> VouchedIdentity:
    email = f"new-{uuid.uuid4().hex[:8]}@example.test"
    return VouchedIdentity(provider="oidc", subject=f"sub-{uuid.uuid4().hex}", email=email, email_verified=True)


async def test_first_sign_ins_in_two_processes_at_once_make_one_user(two_processes: tuple[Inboxd, Inboxd]) -> None:
    """One sign-in in each process: each is alone in its writer's batch, so a duplicate found at
    INSERT is that caller's own failure (before the fix, nearly every round on PostgreSQL failed
    one of the two with a duplicate key)."""
    first, second = two_processes
    for _ in range(10):
        vouched = person()
        results = await asyncio.gather(
            *(server.services.sign_in.sign_in_identity(vouched) for server in (first, second)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)], results
        assert len({r.id for r in results if not isinstance(r, BaseException)}) == 1
        user = await first.services.users.user_by_email(vouched.email)
        assert [i.subject for i in await first.services.sign_in.identities(user)] == [vouched.subject]


async def test_concurrent_first_sign_ins_make_one_user(two_processes: tuple[Inboxd, Inboxd]) -> None:
    first, second = two_processes
    vouched = person()
    email = vouched.email
    # The same person finishes sign-in in several tabs at once, served by both processes.
    results = await asyncio.gather(
        *(server.services.sign_in.sign_in_identity(vouched) for server in [first, second] * 8),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == [], failures
    assert len({user.id for user in results if not isinstance(user, BaseException)}) == 1
    user = await first.services.users.user_by_email(email)
    assert [i.subject for i in await first.services.sign_in.identities(user)] == [vouched.subject]
    # A second provider's first sign-in for the same address, raced the same way, links to that user.
    other = VouchedIdentity(provider="google", subject=f"g-{uuid.uuid4().hex}", email=email, email_verified=True)
    linked = await asyncio.gather(
        *(server.services.sign_in.sign_in_identity(other) for server in [second, first] * 4),
        return_exceptions=True,
    )
    assert all(not isinstance(r, BaseException) and r.id == user.id for r in linked), linked
    assert len(await first.services.sign_in.identities(user)) == 2
