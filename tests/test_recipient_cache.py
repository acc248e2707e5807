"""The recipient cache (services/recipients.py): RCPT accepts from memory for a few seconds, a
refusal is always looked up afresh, the end of DATA still charges the quota in SQL, and mailbox,
user and domain changes made through the services reach the cache at once."""

from __future__ import annotations

import smtplib
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa

from inboxd.store import mailboxes as mailbox_store
from inboxd.store.db import Tx
from inboxd.store.schema import mailboxes, users
from inboxd.store.sql import Statement
from tests.conftest import Harness, simple_message


def ttl(harness: Harness) -> float:
    return harness.server.settings.recipient_cache_ttl


def refusal(exc: pytest.ExceptionInfo[smtplib.SMTPRecipientsRefused], address: str) -> str:
    code, text = exc.value.recipients[address]
    return f"{code} {text.decode()}"


BY_ID = mailboxes.c.id == sa.bindparam("id")
FILL = Statement(lambda: sa.update(mailboxes).values(used=mailboxes.c.quota).where(BY_ID))
EMPTY = Statement(lambda: sa.update(mailboxes).values(used=0).where(BY_ID))
SUSPEND = Statement(lambda: sa.update(users).values(status="suspended").where(users.c.email == sa.bindparam("email")))


async def behind_the_servers_back(harness: Harness, statement: Statement, **params: Any) -> None:
    """A change the bus does not announce: another process's deliveries, or the CLI."""
    db = harness.server._db
    assert db is not None

    async def work(tx: Tx) -> None:
        await tx.execute(statement, **params)

    await db.write(work)


async def test_a_mailbox_seen_moments_ago_is_accepted_from_memory_and_data_still_charges(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])  # looked up in the database, and kept
    # Another process fills the mailbox: this one's cache still accepts at RCPT, and the commit
    # at the end of DATA, which charges the quota in SQL, refuses the message.
    await behind_the_servers_back(harness, FILL, id=box["id"])
    with pytest.raises(smtplib.SMTPDataError) as refused:
        await harness.send(box["address"])
    assert refused.value.smtp_code == 552 and b"5.2.2" in refused.value.smtp_error
    # Once the entry is older than the TTL, RCPT looks again and refuses.
    harness.clock.advance(ttl(harness))
    with pytest.raises(smtplib.SMTPRecipientsRefused) as at_rcpt:
        await harness.send(box["address"])
    assert refusal(at_rcpt, box["address"]).startswith("552 5.2.2")
    listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(box["token"]))
    assert len(listed.json()["messages"]) == 1


async def test_a_refusal_is_always_current(harness: Harness) -> None:
    """Room freed behind the cache's back is seen at once: only acceptances come from memory."""
    box = await harness.new_mailbox()
    await behind_the_servers_back(harness, FILL, id=box["id"])
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        await harness.send(box["address"])
    await behind_the_servers_back(harness, EMPTY, id=box["id"])
    assert await harness.send(box["address"]) == {}


async def test_a_mailbox_deleted_behind_the_cache_is_refused_at_data_as_unknown(harness: Harness) -> None:
    """Another process deleted it and this one has not heard yet: RCPT accepts from memory, and
    the commit, finding no mailbox to charge, answers 550 5.1.1 rather than "mailbox full"."""
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    db = harness.server._db
    assert db is not None
    await db.write(partial(mailbox_store.delete, mailbox_id=box["id"]))
    with pytest.raises(smtplib.SMTPDataError) as refused:
        await harness.send(box["address"])
    assert refused.value.smtp_code == 550 and b"5.1.1" in refused.value.smtp_error


async def test_a_deleted_mailbox_refuses_at_once(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    deleted = await harness.http.delete(f"/api/accounts/{box['id']}", headers=harness.auth())
    assert deleted.status_code == 204
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        await harness.send(box["address"])
    assert refusal(refused, box["address"]).startswith("550 5.1.1")


async def test_a_suspended_owner_refuses_at_once_and_reactivation_takes_mail_again(harness: Harness) -> None:
    token = await harness.new_user(email="cached@example.test")
    box = await harness.new_mailbox(token)
    await harness.send(box["address"])
    users = harness.server.services.users
    await users.set_user("cached@example.test", status="suspended")
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        await harness.send(box["address"])
    assert refusal(refused, box["address"]).startswith("550 5.2.1")
    await users.set_user("cached@example.test", status="active")
    assert await harness.send(box["address"]) == {}


async def test_a_new_mailbox_takes_its_plus_address_from_the_base_mailbox_at_once(harness: Harness) -> None:
    base = await harness.new_mailbox(local="tagged")
    plus = f"tagged+news@{harness.domain}"
    await harness.send(plus, simple_message(subject="to the base"))  # plus addressing: the base takes it
    own = await harness.http.post(
        "/api/accounts", json={"address": plus, "password": "secret123"}, headers=harness.auth()
    )
    assert own.status_code == 201, own.text
    await harness.send(plus, simple_message(subject="to its own"))
    for box, subjects in ((base, ["to the base"]), (own.json(), ["to its own"])):
        listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(box["token"]))
        assert [m["subject"] for m in listed.json()["messages"]] == subjects


async def test_a_change_made_elsewhere_is_seen_within_the_ttl(harness: Harness) -> None:
    """The CLI (or a process without a shared bus) announces nothing: the TTL bounds it."""
    token = await harness.new_user(email="elsewhere@example.test")
    box = await harness.new_mailbox(token)
    await harness.send(box["address"])
    await behind_the_servers_back(harness, SUSPEND, email="elsewhere@example.test")
    assert await harness.send(box["address"]) == {}  # within the TTL: still accepted, and stored
    harness.clock.advance(ttl(harness))
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        await harness.send(box["address"])
    assert refusal(refused, box["address"]).startswith("550 5.2.1")


async def test_ttl_zero_turns_the_cache_off(make_settings: Any, clock: Any) -> None:
    from inboxd.app import Inboxd

    async with Inboxd(make_settings(recipient_cache_ttl=0), clock=clock) as server:
        ingest = server.services.ingest
        box = await server.services.mailboxes.create(
            await _admin(server), f"nocache@{server.settings.default_domain}", password="secret123", auth_key=None
        )
        await ingest.resolve(box.mailbox.address)
        assert ingest.cached(box.mailbox.address) is None


async def _admin(server: Any) -> Any:
    from inboxd.model import Principal

    user = (await server.services.users.search("", limit=1))[0]
    return Principal(user=user, session=True)
