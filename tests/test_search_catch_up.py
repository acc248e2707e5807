"""Filters that never miss committed mail: a list or a wait on `q`, `to` or `has_attachments`
right after the 250 holds the message, even while the background indexer is held back (by its
real setting, `INBOXD_INDEX_LINGER`); the 250 itself never waits for the index, and a list on
other filters reads nothing more."""

from __future__ import annotations

import asyncio
import smtplib
import uuid
from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.policy import SMTP
from functools import partial
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.store import search_index
from tests.conftest import Clock, Harness, simple_message

ROUNDS = 12


@pytest.fixture
async def held_back(make_settings: Any, clock: Clock) -> AsyncIterator[Harness]:
    """inboxd whose background indexer waits an hour after new mail before it takes it in."""
    server = Inboxd(make_settings(index_linger=3600.0), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        try:
            yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
        finally:
            await server.stop()


def deliver(port: int, rcpt: str, msg: EmailMessage) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.sendmail("alice@example.org", [rcpt], msg.as_bytes(policy=SMTP))


def with_file(word: str, to: str) -> EmailMessage:
    msg = simple_message(subject=f"Invoice {word}", body=f"The {word} invoice is attached.\n")
    del msg["To"]
    msg["To"] = to
    msg.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="invoice.pdf")
    return msg


async def waiting(h: Harness, mailbox_id: str) -> int:
    db = h.server._db
    assert db is not None
    return len(await db.read(partial(search_index.pending_in, mailbox_id=mailbox_id, limit=100)))


async def subjects(h: Harness, box: dict[str, Any], **params: str) -> list[str]:
    answer = await h.http.get(f"/api/accounts/{box['id']}/messages", params=params, headers=h.auth())
    assert answer.status_code == 200, answer.text
    return [m["subject"] for m in answer.json()["messages"]]


async def test_a_list_right_after_the_250_holds_the_message(held_back: Harness) -> None:
    h = held_back
    box = await h.new_mailbox()
    for n in range(ROUNDS):
        word = f"zq{uuid.uuid4().hex[:8]}"
        to = f"team-{word}@example.test"
        await asyncio.to_thread(deliver, h.server.smtp_port, box["address"], with_file(word, to))
        # The 250 came before the index took the message in: the indexer is held back.
        assert await waiting(h, box["id"]) >= 1
        subject = f"Invoice {word}"
        # Each filter on its own message, so none is answered by an earlier one's catch-up.
        which = n % 3
        if which == 0:
            assert subject in await subjects(h, box, has_attachments="true"), n
        elif which == 1:
            assert await subjects(h, box, q=word) == [subject], n
        else:
            assert await subjects(h, box, to=f"team-{word}") == [subject], n
        assert await waiting(h, box["id"]) == 0
    # Nothing was left out: every message is listed with an attachment.
    assert len(await subjects(h, box, has_attachments="true")) == ROUNDS


async def test_a_wait_and_a_plain_list_right_after_the_250(held_back: Harness) -> None:
    h = held_back
    box = await h.new_mailbox()
    word = f"zq{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(deliver, h.server.smtp_port, box["address"], with_file(word, "x@example.test"))
    # A list without such a filter reads the summary alone: the message is there, still unindexed.
    assert await subjects(h, box) == [f"Invoice {word}"]
    assert await waiting(h, box["id"]) == 1
    waited = await h.http.get(
        f"/api/accounts/{box['id']}/messages/wait", params={"q": word, "timeout": "5"}, headers=h.auth()
    )
    assert waited.status_code == 200, waited.text
    assert waited.json()["subject"] == f"Invoice {word}"
    assert await waiting(h, box["id"]) == 0


async def test_another_mailbox_is_not_indexed_by_a_list(held_back: Harness) -> None:
    """The catch-up takes in the listed mailbox's mail, not everyone's."""
    h = held_back
    mine, theirs = await h.new_mailbox(), await h.new_mailbox()
    for box in (mine, theirs):
        await asyncio.to_thread(deliver, h.server.smtp_port, box["address"], with_file("shared", "x@example.test"))
    assert await subjects(h, mine, q="shared") == ["Invoice shared"]
    assert await waiting(h, mine["id"]) == 0
    assert await waiting(h, theirs["id"]) == 1
