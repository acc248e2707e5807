"""Webhooks end to end: the REST endpoints, and mail over SMTP reaching a real HTTPS receiver
signed, retried, disabled, re-signed after rotation, surviving restarts and crashes, and kept
from private addresses by the guard.
"""

from __future__ import annotations

import asyncio
import json
import os
import smtplib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.errors import InvalidRequest
from inboxd.services.webhooks import check_url
from inboxd.store.schema import webhook_jobs
from inboxd.store.sql import Statement
from inboxd.webhooks import VerificationError, verify
from tests.conftest import Clock, Harness, free_port, send_mail
from tests.webhook_receiver import Receiver

Start = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start(make_settings: Any, clock: Clock, receiver: Receiver) -> AsyncIterator[Start]:
    """Start an inboxd on the test's storage that trusts the receiver's CA; callable again to restart."""
    running: list[tuple[Inboxd, httpx.AsyncClient]] = []
    admin: list[str] = []

    async def run(**overrides: Any) -> Harness:
        settings = make_settings(
            **{
                "webhook_ca_file": str(receiver.ca_path),
                "webhook_allow_private": True,
                "webhook_poll_interval": 0.05,
                "webhook_retry_schedule": [0, 0.2, 0.4, 0.6],
                **overrides,
            }
        )
        server = Inboxd(settings, clock=clock)
        await server.start()
        if server.bootstrap_token:
            admin.append(server.bootstrap_token)
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        running.append((server, http))
        return Harness(server=server, http=http, clock=clock, admin_token=admin[0] if admin else "")

    try:
        yield run
    finally:
        for server, http in reversed(running):
            await http.aclose()
            if server._db is not None:  # not stopped by the test itself
                await server.stop()


async def create_webhook(h: Harness, url: str, token: str | None = None) -> dict[str, Any]:
    response = await h.http.post(
        "/api/user/webhooks", json={"url": url, "events": ["email.received"]}, headers=h.auth(token)
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def deliveries(h: Harness, webhook_id: str, token: str | None = None) -> list[dict[str, Any]]:
    response = await h.http.get(f"/api/user/webhooks/{webhook_id}/deliveries", headers=h.auth(token))
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["deliveries"]
    return found


async def wait_deliveries(
    h: Harness, webhook_id: str, count: int, *, within: float = 10.0, token: str | None = None
) -> list[dict[str, Any]]:
    """Poll the deliveries log (short deadline) until it holds `count` attempts."""
    async with asyncio.timeout(within):
        while len(found := await deliveries(h, webhook_id, token)) < count:
            await asyncio.sleep(0.02)
    return found


async def webhook_state(h: Harness, webhook_id: str) -> dict[str, Any]:
    listed = (await h.http.get("/api/user/webhooks", headers=h.auth())).json()["webhooks"]
    [found] = [w for w in listed if w["id"] == webhook_id]
    return dict(found)


JOB_COUNT = Statement(lambda: sa.select(sa.func.count()).select_from(webhook_jobs))


async def job_count(h: Harness) -> int:
    db = h.server._db
    assert db is not None
    return int(await db.read(lambda tx: tx.fetchval(JOB_COUNT)))


# --- endpoints ------------------------------------------------------------------------------


async def test_create_list_delete(start: Start) -> None:
    h = await start()
    created = await create_webhook(h, "https://their.app/hooks/mail")
    assert set(created) == {"id", "url", "events", "secret", "status", "created_at"}
    assert created["url"] == "https://their.app/hooks/mail" and created["events"] == ["email.received"]
    assert created["secret"].startswith("whsec_") and created["status"] == "active"
    listed = (await h.http.get("/api/user/webhooks", headers=h.auth())).json()["webhooks"]
    assert listed == [
        {
            "id": created["id"],
            "url": created["url"],
            "events": ["email.received"],
            "status": "active",
            "failure_count": 0,
            "last_triggered_at": None,
            "created_at": created["created_at"],
        }
    ]
    assert await deliveries(h, created["id"]) == []
    deleted = await h.http.delete(f"/api/user/webhooks/{created['id']}", headers=h.auth())
    assert deleted.status_code == 204
    assert (await h.http.get("/api/user/webhooks", headers=h.auth())).json()["webhooks"] == []
    again = await h.http.delete(f"/api/user/webhooks/{created['id']}", headers=h.auth())
    assert again.status_code == 404 and again.json()["error"] == "not_found"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"url": "http://their.app/hook", "events": ["email.received"]}, "invalid_url"),
        ({"url": "/hook", "events": ["email.received"]}, "invalid_url"),
        ({"url": "https://their.app/" + "a" * 2048, "events": ["email.received"]}, "invalid_url"),
        ({"url": "https://a..com/hook", "events": ["email.received"]}, "invalid_url"),
        ({"url": "https://their.app/hook", "events": []}, "invalid_request"),
        ({"url": "https://their.app/hook", "events": ["email.sent"]}, "invalid_request"),
        ({"url": "https://their.app/hook"}, "invalid_request"),
        ({"events": ["email.received"]}, "invalid_request"),
        ({"url": 5, "events": ["email.received"]}, "invalid_request"),
    ],
)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_create_errors(start: Start, body: dict[str, Any], code: str) -> None:
    h = await start()
    response = await h.http.post("/api/user/webhooks", json=body, headers=h.auth())
    assert response.status_code == 400, response.text
    assert response.json()["error"] == code and response.json()["message"]


@pytest.mark.parametrize(
    "url",
    [
        "https://a..com/",
        "https://-a.com/",
        "https://%ff.com/",
        "https://[v1.x]/",
        "https://a.com:0/",
        "https://xn--/",
        "https://a.com:99999/",
        "https://user:pw@a.com/",
        "https://" + "a" * 64 + ".com/",
    ],
)
def test_malformed_hosts_are_invalid_urls(url: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_url(url)
    assert refused.value.code == "invalid_url"


@pytest.mark.parametrize(
    "url",
    # IP literals in every notation are URLs: whether they may be called is the delivery guard's
    # decision (blocked_address), tested below.
    [
        "https://their.app/hook",
        "https://bücher.de/x",
        "https://my_host.example.com/",
        "https://my_host.xn--bcher-kva.de/",
        "https://a.com:8443/x?y=1",
        "https://localhost/",
        "https://127.1/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://[::1]/",
    ],
)
def test_well_formed_urls_are_taken(url: str) -> None:
    assert check_url(url) == url


async def test_limit_ownership_and_plan(start: Start) -> None:
    h = await start()
    for i in range(10):
        await create_webhook(h, f"https://their.app/hooks/{i}")
    over = await h.http.post(
        "/api/user/webhooks", json={"url": "https://their.app/x", "events": ["email.received"]}, headers=h.auth()
    )
    assert over.status_code == 403 and over.json()["error"] == "webhook_limit_reached"
    before = (await h.http.get("/api/user/webhooks", headers=h.auth())).json()["webhooks"]
    mine = before[0]["id"]
    other = await h.new_user("pro")
    assert (await h.http.get("/api/user/webhooks", headers=h.auth(other))).json()["webhooks"] == []
    for method, path in (
        ("DELETE", f"/api/user/webhooks/{mine}"),
        ("POST", f"/api/user/webhooks/{mine}/rotate"),
        ("GET", f"/api/user/webhooks/{mine}/deliveries"),
    ):
        response = await h.http.request(method, path, headers=h.auth(other))
        assert response.status_code == 404 and response.json()["error"] == "not_found", path
    # The refused DELETE and rotate changed nothing: the ten webhooks are there as they were.
    assert (await h.http.get("/api/user/webhooks", headers=h.auth())).json()["webhooks"] == before
    free = await h.new_user("free")
    for method in ("GET", "POST"):
        response = await h.http.request(
            method,
            "/api/user/webhooks",
            json={"url": "https://a.b/", "events": ["email.received"]},
            headers=h.auth(free),
        )
        assert response.status_code == 403 and response.json()["error"] == "pro_required"
    box = await h.new_mailbox()
    response = await h.http.get("/api/user/webhooks", headers=h.auth(box["token"]))
    assert response.status_code == 403 and response.json()["error"] == "access_denied"


# --- delivery -------------------------------------------------------------------------------


async def test_mail_arrives_signed(start: Start, receiver: Receiver, clock: Clock) -> None:
    h = await start()
    hook = await create_webhook(h, receiver.url())
    box = await h.new_mailbox()
    await h.send(box["address"])
    [call] = await receiver.wait_for(1)
    assert call.method == "POST" and call.path == "/hooks/mail"
    event_id = verify(hook["secret"], call.headers, call.body, now=clock())
    assert call.headers["Content-Type"] == "application/json"
    assert call.headers["User-Agent"] == "inboxd-webhooks/1"
    assert abs(int(call.headers["X-Webhook-Timestamp"]) - clock()) <= 2
    body = json.loads(call.body)
    assert body["id"] == event_id and event_id.startswith("evt_")
    assert body["type"] == "email.received"
    [message] = (await h.http.get(f"/api/accounts/{box['id']}/messages", headers=h.auth())).json()["messages"]
    assert set(body) == {"id", "type", "created_at", "data"}
    assert body["data"] == {
        "email_id": message["id"],
        "account_id": box["id"],
        "address": box["address"],
        "from": message["from"],
        "sender": message["sender"],
        "subject": message["subject"],
        "preview_text": message["preview_text"],
        "size": message["size"],
        "created_at": message["created_at"],
    }
    with pytest.raises(VerificationError):
        verify("whsec_wrong", call.headers, call.body, now=clock())
    [logged] = await wait_deliveries(h, hook["id"], 1)
    assert logged["event_id"] == event_id and logged["event_type"] == "email.received"
    assert logged["status_code"] == 200 and logged["error"] is None and logged["attempt"] == 1
    assert isinstance(logged["duration_ms"], int) and logged["duration_ms"] >= 0
    assert set(logged) == {
        "id",
        "event_type",
        "event_id",
        "status_code",
        "error",
        "attempt",
        "duration_ms",
        "created_at",
    }
    state = await webhook_state(h, hook["id"])
    assert state["failure_count"] == 0 and state["last_triggered_at"] is not None
    assert await job_count(h) == 0


async def test_every_webhook_of_the_user_fires_for_every_mailbox(start: Start, receiver: Receiver) -> None:
    h = await start()
    first = await create_webhook(h, receiver.url("/one"))
    second = await create_webhook(h, receiver.url("/two"))
    other = await h.new_user("pro")
    await create_webhook(h, receiver.url("/other"), token=other)
    boxes = [await h.new_mailbox(), await h.new_mailbox()]
    await h.send([b["address"] for b in boxes])
    calls = await receiver.wait_for(4)
    assert sorted(c.path for c in calls) == ["/one", "/one", "/two", "/two"]
    assert len({c.headers["X-Webhook-ID"] for c in calls}) == 4
    for hook in (first, second):
        assert len(await wait_deliveries(h, hook["id"], 2)) == 2


async def test_downgraded_users_webhooks_stop_firing(start: Start, receiver: Receiver) -> None:
    h = await start()
    token = await h.new_user("pro", email="down@example.test")
    hook = await create_webhook(h, receiver.url("/down"), token=token)
    box = await h.new_mailbox(token)
    await h.send(box["address"])
    await wait_deliveries(h, hook["id"], 1, token=token)  # recorded once the attempt is finished
    await h.server.services.users.set_user("down@example.test", plan="free")
    await h.send(box["address"])
    assert await job_count(h) == 0  # nothing queued for a free user's webhook
    await h.server.services.users.set_user("down@example.test", plan="pro")
    assert len(await deliveries(h, hook["id"], token)) == 1


async def test_suspended_users_mailboxes_refuse_mail_and_fire_no_webhook(start: Start, receiver: Receiver) -> None:
    h = await start()
    token = await h.new_user("pro", email="held@example.test")
    hook = await create_webhook(h, receiver.url("/held"), token=token)
    box = await h.new_mailbox(token)
    users = h.server.services.users
    await users.set_user("held@example.test", status="suspended")
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        await h.send(box["address"])
    [(code, reply)] = refused.value.recipients.values()
    assert code == 550 and reply.startswith(b"5.2.1")
    # Plus addressing lands in the same mailbox, and is refused the same way.
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        await h.send(box["address"].replace("@", "+tag@"))

    # A message accepted at RCPT just before the suspension is stored, but queues no webhook.
    await users.set_user("held@example.test", status="active")
    client = await asyncio.to_thread(smtplib.SMTP, "127.0.0.1", h.server.smtp_port, timeout=30)
    try:
        await asyncio.to_thread(client.ehlo)
        await asyncio.to_thread(client.mail, "alice@example.org")
        assert (await asyncio.to_thread(client.rcpt, box["address"]))[0] == 250
        await users.set_user("held@example.test", status="suspended")
        assert (await asyncio.to_thread(client.data, b"Subject: late\r\n\r\nbody\r\n"))[0] == 250
    finally:
        await asyncio.to_thread(client.quit)
    assert await job_count(h) == 0
    assert receiver.requests == []

    # Reactivated: mail is taken again and the webhook fires.
    await users.set_user("held@example.test", status="active")
    await h.send(box["address"])
    [call] = await receiver.wait_for(1)
    assert call.path == "/held"
    assert len(await wait_deliveries(h, hook["id"], 1, token=token)) == 1


@pytest.mark.alone  # a bound on time
async def test_failures_are_retried_with_the_same_event_id(start: Start, receiver: Receiver, clock: Clock) -> None:
    h = await start(webhook_retry_schedule=[0, 0.2, 0.4, 0.6])
    hook = await create_webhook(h, receiver.url())
    receiver.statuses = [500, 302]
    box = await h.new_mailbox()
    await h.send(box["address"])
    calls = await receiver.wait_for(3)
    assert [c.path for c in calls] == ["/hooks/mail"] * 3  # the 302's Location was not followed
    assert len({c.headers["X-Webhook-ID"] for c in calls}) == 1
    for call in calls:
        verify(hook["secret"], call.headers, call.body, now=clock())
    # No attempt comes before its time in the schedule (0, 0.2, 0.4 s after the event, -10 % jitter).
    event_at = datetime.fromisoformat(json.loads(calls[0].body)["created_at"]).timestamp()
    for call, offset in zip(calls, [0.0, 0.2, 0.4], strict=True):
        assert offset * 0.9 - 0.005 <= call.wall - event_at < offset * 1.1 + 3.0, (offset, call.wall - event_at)
    logged = await wait_deliveries(h, hook["id"], 3)
    assert [d["attempt"] for d in logged] == [3, 2, 1]
    assert [d["status_code"] for d in logged] == [200, 302, 500]
    assert logged[0]["error"] is None and logged[2]["error"] == "HTTP 500"
    assert "redirect" in logged[1]["error"]
    assert len({d["event_id"] for d in logged}) == 1
    state = await webhook_state(h, hook["id"])
    assert state["failure_count"] == 0 and state["status"] == "active"
    await asyncio.sleep(0.8)  # past the whole schedule: nothing more arrives
    assert len(receiver.requests) == 3 and await job_count(h) == 0


async def test_last_attempt_drops_the_job(start: Start, receiver: Receiver) -> None:
    h = await start(webhook_retry_schedule=[0, 0.1])
    hook = await create_webhook(h, receiver.url())
    receiver.statuses = [503, 503, 503]
    box = await h.new_mailbox()
    await h.send(box["address"])
    logged = await wait_deliveries(h, hook["id"], 2)
    assert [d["attempt"] for d in logged] == [2, 1] and {d["status_code"] for d in logged} == {503}
    assert await job_count(h) == 0
    state = await webhook_state(h, hook["id"])
    assert state["failure_count"] == 2 and state["status"] == "active" and state["last_triggered_at"] is None


@pytest.mark.alone  # a bound on time
async def test_a_hanging_receiver_does_not_hold_up_smtp(start: Start, receiver: Receiver) -> None:
    """Delivery runs apart from ingest, at most `webhook_concurrency` attempts at once."""
    h = await start(webhook_concurrency=3)
    hook = await create_webhook(h, receiver.url())
    receiver.hold = asyncio.Event()
    box = await h.new_mailbox()
    started = time.monotonic()
    for _ in range(20):
        assert await h.send(box["address"]) == {}
    smtp_seconds = time.monotonic() - started
    await receiver.wait_for(3)
    await asyncio.sleep(0.2)  # give a fourth attempt the chance to start, were it allowed to
    assert len(receiver.requests) == 3
    assert smtp_seconds < 10, smtp_seconds
    receiver.hold.set()
    calls = await receiver.wait_for(20)
    assert len({c.headers["X-Webhook-ID"] for c in calls}) == 20
    assert len(await wait_deliveries(h, hook["id"], 20)) == 20


async def test_tenth_failure_disables_and_drops_pending(start: Start, receiver: Receiver) -> None:
    h = await start(webhook_retry_schedule=[0.05 * i for i in range(14)])
    hook = await create_webhook(h, receiver.url())
    receiver.statuses = [500] * 20
    box = await h.new_mailbox()
    await h.send(box["address"])
    logged = await wait_deliveries(h, hook["id"], 10)
    assert [d["attempt"] for d in logged] == list(range(10, 0, -1))
    state = await webhook_state(h, hook["id"])
    assert state["status"] == "disabled" and state["failure_count"] == 10
    assert await job_count(h) == 0  # attempts 11 to 14 were pending: dropped
    # A disabled webhook queues nothing; jobs are written with the message, so once the 250
    # came back there is nothing left that could still reach the receiver.
    await h.send(box["address"])
    assert await job_count(h) == 0 and len(receiver.requests) == 10
    rotated = await h.http.post(f"/api/user/webhooks/{hook['id']}/rotate", headers=h.auth())
    assert rotated.status_code == 200
    state = await webhook_state(h, hook["id"])
    assert state["status"] == "disabled" and state["failure_count"] == 0


async def test_rotate_switches_the_signature_at_once(start: Start, receiver: Receiver, clock: Clock) -> None:
    h = await start()
    hook = await create_webhook(h, receiver.url())
    box = await h.new_mailbox()
    await h.send(box["address"])
    [first] = await receiver.wait_for(1)
    verify(hook["secret"], first.headers, first.body, now=clock())
    rotated = await h.http.post(f"/api/user/webhooks/{hook['id']}/rotate", headers=h.auth())
    assert rotated.status_code == 200
    body = rotated.json()
    assert set(body) == {"id", "secret"} and body["id"] == hook["id"]
    assert body["secret"].startswith("whsec_") and body["secret"] != hook["secret"]
    await h.send(box["address"])
    second = (await receiver.wait_for(2))[1]
    verify(body["secret"], second.headers, second.body, now=clock())
    with pytest.raises(VerificationError, match="signature mismatch"):
        verify(hook["secret"], second.headers, second.body, now=clock())


async def test_rotate_applies_to_retries_of_earlier_events(start: Start, receiver: Receiver, clock: Clock) -> None:
    h = await start(webhook_retry_schedule=[0, 0.5])
    hook = await create_webhook(h, receiver.url())
    receiver.statuses = [500]
    box = await h.new_mailbox()
    await h.send(box["address"])
    [first] = await receiver.wait_for(1)
    rotated = (await h.http.post(f"/api/user/webhooks/{hook['id']}/rotate", headers=h.auth())).json()
    retry = (await receiver.wait_for(2))[1]
    assert retry.headers["X-Webhook-ID"] == first.headers["X-Webhook-ID"]
    verify(rotated["secret"], retry.headers, retry.body, now=clock())


async def test_pending_jobs_survive_a_restart(start: Start, receiver: Receiver, clock: Clock) -> None:
    """Stop inboxd while the receiver is down and retries are pending; a new inboxd on the same
    storage delivers them."""
    h = await start(webhook_retry_schedule=[0, 2.0])
    hook = await create_webhook(h, receiver.url())
    port = receiver.port
    await receiver.stop()  # down: connections are refused
    box = await h.new_mailbox()
    await h.send([box["address"]])
    await h.send([box["address"]])
    failed = await wait_deliveries(h, hook["id"], 2)
    assert {d["status_code"] for d in failed} == {0}
    assert all(d["error"].startswith("connection_error") for d in failed), failed
    assert await job_count(h) == 2
    await h.server.stop()
    await receiver.start(port)
    again = await start(webhook_retry_schedule=[0, 2.0])
    calls = await receiver.wait_for(2)
    assert {c.headers["X-Webhook-ID"] for c in calls} == {d["event_id"] for d in failed}
    for call in calls:
        verify(hook["secret"], call.headers, call.body, now=clock())
    logged = await wait_deliveries(again, hook["id"], 4)
    assert sorted((d["attempt"], d["status_code"]) for d in logged) == [(1, 0), (1, 0), (2, 200), (2, 200)]
    assert await job_count(again) == 0


async def test_stop_is_bounded_and_gives_claims_back(start: Start, receiver: Receiver, clock: Clock) -> None:
    """A receiver that hangs does not hold up stop; the cut attempt is retried after restart."""
    h = await start(webhook_shutdown_grace=0.2, webhook_retry_schedule=[0, 60])
    hook = await create_webhook(h, receiver.url())
    receiver.hold = asyncio.Event()
    box = await h.new_mailbox()
    await h.send(box["address"])
    [first] = await receiver.wait_for(1)
    async with asyncio.timeout(8):
        await h.server.stop()
    receiver.hold.set()
    again = await start(webhook_retry_schedule=[0, 60])
    second = (await receiver.wait_for(2))[1]
    assert second.headers["X-Webhook-ID"] == first.headers["X-Webhook-ID"]
    [logged] = await wait_deliveries(again, hook["id"], 1)
    assert logged["attempt"] == 1 and logged["status_code"] == 200
    verify(hook["secret"], second.headers, second.body, now=clock())


async def test_failure_kinds_are_recorded_with_status_zero(start: Start, receiver: Receiver, tmp_path: Path) -> None:
    h = await start(webhook_timeout=0.5, webhook_retry_schedule=[0])
    receiver.delay = 2.0
    (tmp_path / "untrusted").mkdir()
    untrusted = Receiver.create(tmp_path / "untrusted")  # a certificate from a CA inboxd does not trust
    await untrusted.start()
    try:
        refused_port = free_port()
        hooks = {
            "timeout": await create_webhook(h, receiver.url()),
            "connection_error": await create_webhook(h, f"https://127.0.0.1:{refused_port}/"),
            "dns_error": await create_webhook(h, "https://no-such-host.invalid/hook"),
            "tls_error": await create_webhook(h, untrusted.url()),
        }
        box = await h.new_mailbox()
        await h.send(box["address"])
        for kind, hook in hooks.items():
            [logged] = await wait_deliveries(h, hook["id"], 1)
            assert logged["status_code"] == 0, (kind, logged)
            assert logged["error"].startswith(kind), (kind, logged)
            assert (await webhook_state(h, hook["id"]))["failure_count"] == 1
    finally:
        await untrusted.stop()
    assert untrusted.requests == []


# --- the address guard ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]"]
)
async def test_guard_keeps_webhooks_off_loopback(start: Start, receiver: Receiver, host: str) -> None:
    h = await start(webhook_allow_private=False, webhook_retry_schedule=[0, 0.1])
    hook = await create_webhook(h, f"https://{host}:{receiver.port}/hooks/mail")
    box = await h.new_mailbox()
    await h.send(box["address"])
    logged = await wait_deliveries(h, hook["id"], 2)
    assert [(d["status_code"], d["error"], d["attempt"]) for d in logged] == [
        (0, "blocked_address", 2),
        (0, "blocked_address", 1),
    ]
    assert (await webhook_state(h, hook["id"]))["failure_count"] == 2
    assert receiver.requests == []


# --- a crash mid-attempt --------------------------------------------------------------------


async def test_job_in_flight_when_the_process_dies_is_retried(
    make_settings: Any, start: Start, receiver: Receiver, clock: Clock
) -> None:
    """`inboxd serve` in a child process is SIGKILLed while the receiver holds its POST; an
    inboxd started on the same storage delivers the event once the dead claim's lease lapsed."""
    settings = make_settings()
    env = {
        **os.environ,
        "INBOXD_DATA_DIR": str(settings.data_dir),
        "INBOXD_DATABASE_URL": settings.database_url,
        "INBOXD_DATABASE_SCHEMA": settings.database_schema,
        "INBOXD_HTTP_PORT": "0",
        "INBOXD_SMTP_PORT": "0",
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_WEBHOOK_CA_FILE": str(receiver.ca_path),
        "INBOXD_WEBHOOK_ALLOW_PRIVATE": "true",
        "INBOXD_WEBHOOK_LEASE": "1",
        "INBOXD_WEBHOOK_TIMEOUT": "1",
        "INBOXD_WEBHOOK_RETRY_SCHEDULE": "0,3600",
        "INBOXD_LOG_LEVEL": "warning",
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "inboxd", "serve", env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        lines: list[str] = []
        async with asyncio.timeout(30):
            while len(lines) < 3:
                lines.append((await child.stdout.readline()).decode().strip())
        http_url = lines[0].split("HTTP on ")[1].split()[0]
        smtp_port = int(lines[0].split("SMTP on ")[1].split()[0].rsplit(":", 1)[1])
        token = lines[2]
        async with httpx.AsyncClient(base_url=http_url, timeout=30) as http:
            auth = {"Authorization": f"Bearer {token}"}
            hook = (
                await http.post(
                    "/api/user/webhooks", json={"url": receiver.url(), "events": ["email.received"]}, headers=auth
                )
            ).json()
            box = (
                await http.post(
                    "/api/accounts", json={"address": "crash@inboxd.localhost", "password": "secret123"}, headers=auth
                )
            ).json()
        receiver.hold = asyncio.Event()
        await asyncio.to_thread(send_mail, smtp_port, box["address"])
        [first] = await receiver.wait_for(1)
        child.kill()
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    receiver.hold.set()
    receiver.hold = None
    again = await start(webhook_lease=1.0)
    second = (await receiver.wait_for(2, within=15))[1]
    assert second.headers["X-Webhook-ID"] == first.headers["X-Webhook-ID"]
    verify(hook["secret"], second.headers, second.body, now=clock())
    [logged] = await wait_deliveries(again, hook["id"], 1, token=token)
    assert logged["status_code"] == 200 and logged["attempt"] == 1


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_two_processes_share_the_queue_without_double_delivery(start: Start, receiver: Receiver) -> None:
    """Two inboxd on one PostgreSQL database: claims skip each other's rows, each event goes out once."""
    first = await start()
    second = await start()
    hook = await create_webhook(first, receiver.url())
    receiver.delay = 0.05  # attempts overlap, so both workers find due jobs while others are in flight
    boxes = [await first.new_mailbox() for _ in range(4)]
    for _ in range(10):
        await asyncio.gather(
            first.send([b["address"] for b in boxes[:2]]), second.send([b["address"] for b in boxes[2:]])
        )
    calls = await receiver.wait_for(40, within=20)
    await asyncio.sleep(0.3)  # nothing arrives twice
    ids = [c.headers["X-Webhook-ID"] for c in receiver.requests]
    assert len(ids) == 40 and len(set(ids)) == 40, len(calls)
    logged = await wait_deliveries(first, hook["id"], 40)
    assert {d["attempt"] for d in logged[:40]} == {1} and await job_count(first) == 0
