"""SMTP faults never decide for another tenant (issue 34): a transaction is split at RCPT when its
recipients' DATA faults differ, counters are bounded per mailbox and never cleared for all, and a
fault set's delays are capped per stage below what senders wait."""

from __future__ import annotations

import asyncio
import smtplib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from inboxd.app import Inboxd
from inboxd.model import FaultSet
from inboxd.services.fault_counters import KEYS_PER_MAILBOX
from inboxd.services.fault_rules import GREYLISTED, MAX_STAGE_DELAY_MS, NOTHING
from inboxd.store.faults import fault_set
from tests.conftest import REDIS_URL, Clock, Harness, simple_message

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
BOUNCE = "554 5.6.0 Message refused"


async def count(harness: Harness, box: dict[str, Any]) -> int:
    got = await harness.http.get(f"/api/accounts/{box['address']}/messages", headers=harness.auth(box["token"]))
    assert got.status_code == 200, got.text
    return len(got.json()["messages"])


def transaction(port: int, to: list[str]) -> list[tuple[int, bytes]]:
    """Each RCPT's answer, then the answer to the message's final dot."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo("client.example")
        client.mail("app@example.org")
        answers = [client.rcpt(address) for address in to]
        answers.append(client.data(simple_message().as_bytes()))
        return answers


def sendmail(port: int, to: list[str]) -> dict[str, tuple[int, bytes]]:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        return client.sendmail("app@example.org", to, simple_message().as_bytes())


@sqlite_only
@pytest.mark.parametrize("alice_first", [True, False], ids=["faulty-first", "faulty-second"])
async def test_one_users_data_end_fault_never_bounces_another_users_mail(harness: Harness, alice_first: bool) -> None:
    """alice@ (user A) has a data_end fault, bob@ (user B) none: a transaction to both is split at
    RCPT (452 4.5.3 for the second), so B's copy is delivered, on the first try or on the resend."""
    token_a = await harness.new_user("pro")
    alice = await harness.new_mailbox(token_a, local="alice")
    bob = await harness.new_mailbox(await harness.new_user("pro"), local="bob")
    put = await harness.http.put(
        f"/api/accounts/{alice['address']}/faults",
        json={"rules": [{"stage": "data_end", "reply": BOUNCE}]},
        headers=harness.auth(token_a),
    )
    assert put.status_code == 200, put.text
    port = harness.server.smtp_port
    first, second = (alice, bob) if alice_first else (bob, alice)
    answers = await asyncio.to_thread(transaction, port, [first["address"], second["address"]])
    assert answers[0][0] == 250 and answers[1][0] == 452 and b"4.5.3" in answers[1][1], answers
    # alice first: her fault answers the transaction she is in, and bob is sent again on his own;
    # bob first: his mail goes, and alice's meets her fault alone.
    assert answers[2][0] == (554 if alice_first else 250), answers
    if alice_first:
        assert await asyncio.to_thread(sendmail, port, [bob["address"]]) == {}
    else:
        with pytest.raises(smtplib.SMTPDataError):
            await asyncio.to_thread(sendmail, port, [alice["address"]])
        # smtplib's sendmail hands the split recipient back as refused, for its caller to resend.
        refused = await asyncio.to_thread(sendmail, port, [bob["address"], alice["address"]])
        assert list(refused) == [alice["address"]] and refused[alice["address"]][0] == 452
    assert await count(harness, bob) == (1 if alice_first else 2)
    assert await count(harness, alice) == 0


@sqlite_only
async def test_recipients_without_data_faults_share_a_transaction(harness: Harness) -> None:
    """Only DATA-stage faults split: two plain mailboxes, or one with an RCPT rule alone, stay together."""
    one, two, three = [await harness.new_mailbox() for _ in range(3)]
    put = await harness.http.put(
        f"/api/accounts/{three['address']}/faults",
        json={"rules": [{"stage": "rcpt", "delay_ms": 1}]},
        headers=harness.auth(),
    )
    assert put.status_code == 200, put.text
    to = [one["address"], two["address"], three["address"]]
    assert await asyncio.to_thread(sendmail, harness.server.smtp_port, to) == {}
    assert [await count(harness, box) for box in (one, two, three)] == [1, 1, 1]


# The delay cap -----------------------------------------------------------------------------------


@sqlite_only
async def test_a_stages_delays_are_capped_in_total_with_a_422(harness: Harness) -> None:
    box = await harness.new_mailbox()
    url = f"/api/accounts/{box['address']}/faults"
    half = {"stage": "data_end", "delay_ms": MAX_STAGE_DELAY_MS // 2}
    other_stage = {"stage": "rcpt", "delay_ms": MAX_STAGE_DELAY_MS // 2}
    at_cap = await harness.http.put(url, json={"rules": [half, half, other_stage]}, headers=harness.auth())
    assert at_cap.status_code == 200, at_cap.text
    over = {"stage": "data_end", "delay_ms": 1}
    refused = await harness.http.put(url, json={"rules": [half, over, half]}, headers=harness.auth())
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["error"] == "fault_delay_too_long"
    assert "`data_end`" in body["message"] and f"{MAX_STAGE_DELAY_MS + 1} ms" in body["message"]
    assert "RFC 5321" in body["message"]
    got = await harness.http.get(url, headers=harness.auth())
    assert len(got.json()["rules"]) == 3  # the refused PUT changed nothing


# Counters bounded per mailbox ----------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
async def counting(request: pytest.FixtureRequest, make_settings: Any, clock: Clock) -> AsyncIterator[Inboxd]:
    redis_url = REDIS_URL if request.param == "redis" else ""
    server = Inboxd(make_settings(redis_url=redis_url), clock=clock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _set(rules: list[dict[str, Any]]) -> FaultSet:
    return fault_set(str(uuid.uuid4()), uuid.uuid4().hex, msgspec.json.encode(rules))


@sqlite_only
async def test_a_flood_of_greylisting_triplets_forgets_only_that_mailboxs(counting: Inboxd, clock: Clock) -> None:
    """Tenant A's mailbox sees 10,001 triplets (once enough to clear every tenant's counts): B's
    `times` count and greylisted triplet are kept, and A holds at most its own bound."""
    faults = counting.services.faults
    grey = {"stage": "rcpt", "greylist": {"min_retry_s": 5}}
    a = _set([grey])
    b = _set([grey, {"stage": "data", "reply": "451 4.3.0 Later", "times": 1}])
    seen = {"client": "192.0.2.1", "sender": "app@example.org"}
    assert (await faults.decide(b, "rcpt", recipient="b@inboxd.localhost", **seen)).reply == GREYLISTED
    assert (await faults.decide(b, "data", **seen)).reply == "451 4.3.0 Later"
    for i in range(10_001):
        await faults.decide(a, "rcpt", recipient=f"r{i}@inboxd.localhost", **seen)
    clock.advance(6)
    # B's triplet retried after min_retry_s is let through; a cleared table would greylist it anew.
    assert await faults.decide(b, "rcpt", recipient="b@inboxd.localhost", **seen) is NOTHING
    assert await faults.decide(b, "data", **seen) is NOTHING  # its one time was used
    # A's own bound: its latest triplets are remembered, its earliest forgotten (greylisted anew).
    assert await faults.decide(a, "rcpt", recipient="r10000@inboxd.localhost", **seen) is NOTHING
    assert (await faults.decide(a, "rcpt", recipient="r0@inboxd.localhost", **seen)).reply == GREYLISTED
    assert KEYS_PER_MAILBOX < 10_000
