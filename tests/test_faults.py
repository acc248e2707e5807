"""SMTP faults per mailbox and per sandbox (issue 27): the API, its validation, and each rule as
a real SMTP client (smtplib) meets it, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import smtplib
import time
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.client import ApiError, AsyncClient
from inboxd.store.db import Tx
from inboxd.store.schema import mailbox_faults
from inboxd.store.sql import Statement
from tests.conftest import REDIS_URL, Clock, Harness, simple_message
from tests.test_submission import Sandbox, open_sandbox, plain

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
async def sandbox(harness: Harness) -> Sandbox:
    return await open_sandbox(harness.http, await harness.new_user("pro"), harness.server.submission_port)


async def put_faults(harness: Harness, mailbox: dict[str, Any], body: dict[str, Any]) -> Any:
    """PUT with the API token that made the mailbox (the harness's admin token, by default)."""
    return await harness.http.put(f"/api/accounts/{mailbox['address']}/faults", json=body, headers=harness.auth())


def session(port: int) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    client.ehlo("client.example")
    return client


def rcpt(port: int, address: str, *, sender: str = "app@example.org") -> tuple[int, bytes]:
    with session(port) as client:
        client.mail(sender)
        return client.rcpt(address)


async def count(harness: Harness, mailbox: dict[str, Any]) -> int:
    response = await harness.http.get(
        f"/api/accounts/{mailbox['address']}/messages", headers=harness.auth(mailbox["token"])
    )
    assert response.status_code == 200, response.text
    return len(response.json()["messages"])


# The API ------------------------------------------------------------------------------------------


async def test_faults_are_set_read_and_cleared_on_both_back_ends(harness: Harness) -> None:
    box = await harness.new_mailbox()
    body = {
        "expires_in": 600,
        "rules": [
            {"stage": "rcpt", "reply": "452 4.2.2 Mailbox full", "times": 2},
            {"stage": "data_end", "delay_ms": 500},
            {"stage": "data", "disconnect": True, "probability": 0.5},
            {"stage": "rcpt", "greylist": {"min_retry_s": 1}},
            {"stage": "rcpt", "rate": {"messages": 5, "per_s": 60, "reply": "421 4.7.0 Try again later"}},
        ],
    }
    put = await put_faults(harness, box, body)
    assert put.status_code == 200, put.text
    rules = put.json()["rules"]
    assert [r["stage"] for r in rules] == ["rcpt", "data_end", "data", "rcpt", "rcpt"]
    assert rules[0] == {
        "stage": "rcpt",
        "reply": "452 4.2.2 Mailbox full",
        "times": 2,
        "expires_at": rules[0]["expires_at"],
    }
    assert rules[3]["greylist"] == {"min_retry_s": 1}
    got = await harness.http.get(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert got.json() == put.json()
    gone = await harness.http.delete(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert gone.status_code == 204
    got = await harness.http.get(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert got.json() == {"rules": []}


@sqlite_only
@pytest.mark.parametrize(
    ("rule", "named"),
    [
        ({"stage": "helo", "reply": "452 4.2.2 Full"}, "unknown stage"),
        ({"stage": "rcpt", "reply": "250 2.0.0 OK"}, "not a 4xx/5xx SMTP reply"),
        ({"stage": "rcpt", "reply": "452 5.2.2 Wrong class"}, "not a 4xx/5xx SMTP reply"),
        ({"stage": "rcpt", "reply": "452 4.2.2 Full\r\n250 OK"}, "not a 4xx/5xx SMTP reply"),
        ({"stage": "rcpt", "reply": "452 4.2.2 Full", "probability": 1.5}, "`probability` must be between 0 and 1"),
        ({"stage": "rcpt", "reply": "452 4.2.2 Full", "times": 0}, "`times` must be at least 1"),
        ({"stage": "connect", "reply": "421 4.3.2 Down"}, "sandbox only"),
        ({"stage": "mail", "reply": "451 4.3.0 Later"}, "sandbox only"),
        ({"stage": "data", "greylist": {"min_retry_s": 1}}, "its stage is `rcpt`"),
        ({"stage": "rcpt", "rate": {"messages": 1, "per_s": 60, "reply": "550 5.7.1 No"}}, "must be a 4xx"),
        ({"stage": "rcpt"}, "nothing to do"),
        ({"stage": "rcpt", "reply": "452 4.2.2 Full", "disconnect": True}, "one of reply, disconnect"),
    ],
)
async def test_an_invalid_rule_is_refused_with_400_naming_it(
    harness: Harness, rule: dict[str, Any], named: str
) -> None:
    box = await harness.new_mailbox()
    good = {"stage": "rcpt", "reply": "452 4.2.2 Mailbox full"}
    response = await put_faults(harness, box, {"rules": [good, rule]})
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "rule 2" in message and named in message, message
    got = await harness.http.get(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert got.json() == {"rules": []}  # nothing of a refused PUT is kept


@sqlite_only
async def test_another_users_mailbox_faults_are_not_reachable(harness: Harness) -> None:
    box = await harness.new_mailbox()
    response = await harness.http.put(
        f"/api/accounts/{box['address']}/faults",
        json={"rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full"}]},
        headers=harness.auth(await harness.new_user("pro")),
    )
    assert response.status_code == 404, response.text  # another user's resources answer 404 everywhere
    assert response.json()["error"] == "not_found"


@sqlite_only
async def test_a_mailbox_token_cannot_set_read_or_clear_faults(harness: Harness) -> None:
    """Faults change what every sender to the mailbox meets: its owner's API token sets them, not
    the mailbox token a WebSocket client or a leaked test log holds."""
    box = await harness.new_mailbox()
    url = f"/api/accounts/{box['address']}/faults"
    body = {"rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full"}]}
    mine = harness.auth(box["token"])
    for response in (
        await harness.http.put(url, json=body, headers=mine),
        await harness.http.get(url, headers=mine),
        await harness.http.delete(url, headers=mine),
    ):
        assert response.status_code == 403, response.text
        assert response.json()["error"] == "access_denied"
    assert (await harness.http.get(url, headers=harness.auth())).json() == {"rules": []}
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 250


# Each rule over SMTP --------------------------------------------------------------------------------


async def test_a_reply_for_the_next_times_attempts_then_acceptance(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full", "times": 2}]})
    port = harness.server.smtp_port
    first = await asyncio.to_thread(rcpt, port, box["address"])
    second = await asyncio.to_thread(rcpt, port, box["address"])
    assert (first[0], second[0]) == (452, 452)
    assert first[1] == b"4.2.2 Mailbox full"
    await harness.send(box["address"])
    assert await count(harness, box) == 1


@sqlite_only
async def test_each_mailbox_gets_its_own_answer_per_rcpt(harness: Harness) -> None:
    faulty, healthy = await harness.new_mailbox(), await harness.new_mailbox()
    await put_faults(harness, faulty, {"rules": [{"stage": "rcpt", "reply": "550 5.1.1 Gone away"}]})
    refused = await harness.send([faulty["address"], healthy["address"]])
    assert refused == {faulty["address"]: (550, b"5.1.1 Gone away")}
    assert (await count(harness, faulty), await count(harness, healthy)) == (0, 1)


@sqlite_only
async def test_a_421_closes_the_connection(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "rcpt", "reply": "421 4.7.0 Go away", "times": 1}]})

    def attempt() -> None:
        with session(harness.server.smtp_port) as client:
            client.mail("app@example.org")
            assert client.rcpt(box["address"]) == (421, b"4.7.0 Go away")
            with pytest.raises(smtplib.SMTPServerDisconnected):
                client.rcpt(box["address"])

    await asyncio.to_thread(attempt)


@sqlite_only
async def test_a_disconnect_at_data_drops_the_connection_without_a_reply(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "data", "disconnect": True, "times": 1}]})
    with pytest.raises(smtplib.SMTPServerDisconnected):
        await harness.send(box["address"])
    await harness.send(box["address"])  # times: 1, the next attempt goes through
    assert await count(harness, box) == 1


@sqlite_only
async def test_a_reply_at_data_end_stores_nothing(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "data_end", "reply": "451 4.3.0 Try later", "times": 1}]})
    with pytest.raises(smtplib.SMTPDataError) as raised:
        await harness.send(box["address"])
    assert raised.value.smtp_code == 451
    assert await count(harness, box) == 0


@sqlite_only
async def test_a_delay_holds_the_reply_that_long(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "data_end", "delay_ms": 400}]})
    started = time.monotonic()
    await harness.send(box["address"])
    assert time.monotonic() - started >= 0.4
    assert await count(harness, box) == 1


@sqlite_only
async def test_probability_zero_never_fires_and_one_always_does(harness: Harness) -> None:
    never, always = await harness.new_mailbox(), await harness.new_mailbox()
    await put_faults(harness, never, {"rules": [{"stage": "rcpt", "reply": "450 4.2.1 Busy", "probability": 0}]})
    await put_faults(harness, always, {"rules": [{"stage": "rcpt", "reply": "450 4.2.1 Busy", "probability": 1}]})
    port = harness.server.smtp_port
    for _ in range(3):
        assert (await asyncio.to_thread(rcpt, port, never["address"]))[0] == 250
        assert (await asyncio.to_thread(rcpt, port, always["address"]))[0] == 450


async def test_rate_allows_n_messages_per_window_then_throttles(harness: Harness) -> None:
    box = await harness.new_mailbox()
    rate = {"messages": 2, "per_s": 60, "reply": "451 4.7.0 Slow down"}
    await put_faults(harness, box, {"rules": [{"stage": "rcpt", "rate": rate}]})
    await harness.send(box["address"])
    await harness.send(box["address"])
    with pytest.raises(smtplib.SMTPRecipientsRefused) as raised:
        await harness.send(box["address"])
    assert raised.value.recipients[box["address"]] == (451, b"4.7.0 Slow down")
    harness.clock.advance(61)  # the window moves on
    await harness.send(box["address"])
    assert await count(harness, box) == 3


async def test_greylisting_defers_the_first_attempt_and_accepts_a_later_retry(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "rcpt", "greylist": {"min_retry_s": 30}}]})
    port = harness.server.smtp_port
    assert await asyncio.to_thread(rcpt, port, box["address"]) == (451, b"4.7.1 Greylisted, please try again later")
    assert (await asyncio.to_thread(rcpt, port, box["address"]))[0] == 451  # too early
    assert (await asyncio.to_thread(rcpt, port, box["address"], sender="other@example.org"))[0] == 451  # new triplet
    harness.clock.advance(31)
    await harness.send(box["address"], sender="app@example.org")
    await harness.send(box["address"], sender="app@example.org")  # passed from then on
    assert await count(harness, box) == 2


@sqlite_only
async def test_a_rule_lapses_after_expires_in(harness: Harness) -> None:
    box = await harness.new_mailbox()
    body = {"expires_in": 60, "rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full"}]}
    await put_faults(harness, box, body)
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 452
    harness.clock.advance(61)
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 250
    got = await harness.http.get(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert got.json() == {"rules": []}


@sqlite_only
async def test_clearing_applies_at_once_despite_the_recipient_cache(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await put_faults(harness, box, {"rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full"}]})
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 452
    await harness.http.delete(f"/api/accounts/{box['address']}/faults", headers=harness.auth())
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 250


# The sandbox ---------------------------------------------------------------------------------------


async def put_sandbox_faults(sandbox: Sandbox, body: dict[str, Any]) -> Any:
    response = await sandbox.http.put("/api/user/sandbox/faults", json=body, headers=sandbox.auth())
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_sandbox_answers_its_auth_and_mail_faults(harness: Harness, sandbox: Sandbox) -> None:
    await put_sandbox_faults(
        sandbox,
        {
            "rules": [
                {"stage": "auth", "reply": "454 4.7.0 Temporary authentication failure", "times": 1},
                {"stage": "mail", "reply": "451 4.3.0 Not now", "times": 1},
            ]
        },
    )

    def attempt() -> None:
        with session(sandbox.port) as client:
            code, _ = client.docmd("AUTH", "PLAIN " + plain(sandbox.username, sandbox.token))
            assert code == 454
            code, _ = client.docmd("AUTH", "PLAIN " + plain(sandbox.username, sandbox.token))
            assert code == 235
            assert client.mail("app@example.com")[0] == 451
            assert client.mail("app@example.com")[0] == 250

    await asyncio.to_thread(attempt)
    await asyncio.to_thread(sandbox.send, ["someone@example.org"], simple_message().as_bytes())
    assert len(await sandbox.messages()) == 1


@sqlite_only
async def test_the_sandbox_connect_fault_closes_at_auth(harness: Harness, sandbox: Sandbox) -> None:
    await put_sandbox_faults(sandbox, {"rules": [{"stage": "connect", "reply": "421 4.3.2 Down", "times": 1}]})

    def attempt() -> None:
        with session(sandbox.port) as client:
            code, _ = client.docmd("AUTH", "PLAIN " + plain(sandbox.username, sandbox.token))
            assert code == 421
            with pytest.raises(smtplib.SMTPServerDisconnected):
                client.noop()

    await asyncio.to_thread(attempt)
    await asyncio.to_thread(sandbox.send, ["someone@example.org"], simple_message().as_bytes())


@sqlite_only
async def test_the_sandbox_rcpt_fault_and_clear(harness: Harness, sandbox: Sandbox) -> None:
    await put_sandbox_faults(sandbox, {"rules": [{"stage": "rcpt", "reply": "452 4.5.3 Too many", "times": 1}]})
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        await asyncio.to_thread(sandbox.send, ["someone@example.org"], simple_message().as_bytes())
    await asyncio.to_thread(sandbox.send, ["someone@example.org"], simple_message().as_bytes())
    assert len(await sandbox.messages()) == 1
    cleared = await sandbox.http.delete("/api/user/sandbox/faults", headers=sandbox.auth())
    assert cleared.status_code == 204


# The hot path -------------------------------------------------------------------------------------


@sqlite_only
async def test_faults_ride_on_the_cached_recipient_row_not_on_a_query_per_message(harness: Harness) -> None:
    """Faults written behind the server's back (no `changed` on the bus, as another process
    without a shared bus would) are not seen while the recipient's row is cached: RCPT reads no
    faults of its own. Once the row is older than the TTL, the lookup brings them with it."""
    box = await harness.new_mailbox()
    await harness.send(box["address"])  # the recipient row is now cached, without faults
    db = harness.server._db
    assert db is not None
    rules = '[{"stage":"rcpt","reply":"452 4.2.2 Mailbox full"}]'
    add_faults = Statement(
        lambda: sa.insert(mailbox_faults).values(
            mailbox_id=sa.bindparam("mailbox_id"), version="v1", rules=sa.bindparam("rules"), created_at=0
        )
    )

    async def insert(tx: Tx) -> None:
        await tx.execute(add_faults, mailbox_id=box["id"], rules=rules)

    await db.write(insert)
    await harness.send(box["address"])  # still the cached row: no query looked for faults
    harness.clock.advance(harness.server.settings.recipient_cache_ttl)
    assert (await asyncio.to_thread(rcpt, harness.server.smtp_port, box["address"]))[0] == 452
    assert await count(harness, box) == 2


# The typed client ---------------------------------------------------------------------------------


@sqlite_only
async def test_the_async_client_sets_reads_and_clears_faults(harness: Harness, sandbox: Sandbox) -> None:
    box = await harness.new_mailbox()
    url = f"http://127.0.0.1:{harness.server.http_port}"
    async with AsyncClient(url, harness.admin_token) as client:
        stored = await client.set_faults(box["address"], [{"stage": "rcpt", "reply": "450 4.2.1 Busy"}], expires_in=60)
        assert [r["reply"] for r in stored] == ["450 4.2.1 Busy"] and stored[0]["expires_at"]
        assert await client.faults(box["address"]) == stored
        await client.clear_faults(box["address"])
        assert await client.faults(box["address"]) == []
    async with AsyncClient(url, sandbox.token) as client:
        await client.set_sandbox_faults([{"stage": "mail", "delay_ms": 10}])
        assert await client.sandbox_faults() == [{"stage": "mail", "delay_ms": 10}]
        await client.clear_sandbox_faults()
        assert await client.sandbox_faults() == []
        with pytest.raises(ApiError) as refused:
            await client.set_sandbox_faults([{"stage": "rcpt", "probability": 2, "reply": "450 4.2.1 Busy"}])
        assert refused.value.status == 400 and "rule 1" in refused.value.message


# Across processes: the counters in Redis ------------------------------------------------------------


async def test_two_instances_sharing_redis_count_times_rate_and_greylisting_once(
    make_settings: Any, clock: Clock
) -> None:
    """Two servers on one database and one Redis, as `--workers 2` runs: a rule's `times`, its
    `rate` window and its greylisting triplets are counted once across both."""
    settings = make_settings(redis_url=REDIS_URL)
    servers = [Inboxd(settings, clock=clock), Inboxd(settings, clock=clock)]
    for server in servers:
        await server.start()
    try:
        assert servers[0].bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{servers[0].http_port}", timeout=30) as http:
            h = Harness(server=servers[0], http=http, clock=clock, admin_token=servers[0].bootstrap_token)
            times, rate, grey = await h.new_mailbox(), await h.new_mailbox(), await h.new_mailbox()
            await put_faults(h, times, {"rules": [{"stage": "rcpt", "reply": "452 4.2.2 Mailbox full", "times": 2}]})
            limit = {"messages": 2, "per_s": 60, "reply": "451 4.7.0 Slow down"}
            await put_faults(h, rate, {"rules": [{"stage": "rcpt", "rate": limit}]})
            await put_faults(h, grey, {"rules": [{"stage": "rcpt", "greylist": {"min_retry_s": 30}}]})
            ports = [s.smtp_port for s in servers]

            codes = [(await asyncio.to_thread(rcpt, ports[n % 2], times["address"]))[0] for n in range(4)]
            assert codes == [452, 452, 250, 250]
            codes = [(await asyncio.to_thread(rcpt, ports[n % 2], rate["address"]))[0] for n in range(3)]
            assert codes == [250, 250, 451]
            assert (await asyncio.to_thread(rcpt, ports[0], grey["address"]))[0] == 451
            assert (await asyncio.to_thread(rcpt, ports[1], grey["address"]))[0] == 451  # seen by the other
            clock.advance(31)
            assert (await asyncio.to_thread(rcpt, ports[1], grey["address"]))[0] == 250
    finally:
        for server in servers:
            await server.stop()
