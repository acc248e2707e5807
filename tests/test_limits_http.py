"""The limits as a client meets them over HTTP: 429 answers, headers, sign-in and public limits.

Each test starts an inboxd with the spec's limit values (the harness default is generous). The
clock runs with wall time, so where a refill could slip in between two requests the rate is low
enough that it cannot within any plausible test run.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.model import User
from tests.conftest import OTHER_CLIENT_IP, REDIS_URL, Clock, http_client_from
from tests.test_limits import REAL

Start = Callable[..., Awaitable[tuple[Inboxd, httpx.AsyncClient]]]


@pytest.fixture
async def start(make_settings: Any, clock: Clock) -> AsyncIterator[Start]:
    running: list[tuple[Inboxd, httpx.AsyncClient]] = []

    async def go(**overrides: Any) -> tuple[Inboxd, httpx.AsyncClient]:
        server = Inboxd(make_settings(**{**REAL, **overrides}), clock=clock)
        await server.start()
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        running.append((server, http))
        return server, http

    try:
        yield go
    finally:
        for server, http in running:
            await http.aclose()
            await server.stop()


async def user_and_auth(server: Inboxd, plan: str) -> tuple[User, dict[str, str]]:
    users = server.services.users
    user = await users.create_user(f"{uuid.uuid4().hex[:8]}@example.test", plan=plan)
    return user, {"Authorization": f"Bearer {(await users.create_token(user, 't')).value}"}


def new_account() -> dict[str, str]:
    return {"address": f"c{uuid.uuid4().hex[:6]}@inboxd.localhost", "password": "secret123"}


async def token_for(server: Inboxd, plan: str) -> dict[str, str]:
    return (await user_and_auth(server, plan))[1]


async def test_free_user_paced_to_one_per_second(start: Start, clock: Clock) -> None:
    # 0.2/s: a token every 5 s, so no refill lands between two requests of this test.
    server, http = await start(free_rps=0.2)
    auth = await token_for(server, "free")
    missing = f"/api/accounts/{uuid.uuid4()}"
    first = await http.get(missing, headers=auth)
    assert first.status_code == 404
    # An error after admission still carries the headers.
    assert first.headers["RateLimit-Limit"] == "1"
    assert first.headers["RateLimit-Remaining"] == "0"
    assert first.headers["RateLimit-Reset"] == "5"
    assert first.headers["X-Ops-Used"] == "1"
    assert first.headers["X-Ops-Limit"] == "500"
    second = await http.get(missing, headers=auth)
    assert second.status_code == 429
    assert second.json() == {"error": "rate_limit_exceeded"}
    assert 1 <= int(second.headers["Retry-After"]) <= 5
    assert second.headers["RateLimit-Remaining"] == "0"
    assert second.headers["X-Ops-Used"] == "1"
    clock.advance(5)
    assert (await http.get(missing, headers=auth)).status_code == 404


async def test_one_bucket_over_all_of_a_users_tokens(start: Start) -> None:
    server, http = await start(free_rps=0.2)
    user, auth = await user_and_auth(server, "free")
    other = {"Authorization": f"Bearer {(await server.services.users.create_token(user, 'second')).value}"}
    address = f"b{uuid.uuid4().hex[:6]}@inboxd.localhost"
    created = await http.post("/api/accounts", json={"address": address, "password": "secret123"}, headers=auth)
    assert created.status_code == 201
    signed = await http.post("/api/token", json={"address": address, "password": "secret123"})
    mailbox = {"Authorization": f"Bearer {signed.json()['token']}"}
    path = f"/api/accounts/{created.json()['id']}"
    # The one token of the bucket went to the creation: the user's other API token and the
    # mailbox's token are refused alike.
    assert (await http.get(path, headers=other)).status_code == 429
    assert (await http.get(path, headers=mailbox)).status_code == 429


async def test_pro_user_gets_ten_per_second(start: Start) -> None:
    server, http = await start()
    auth = await token_for(server, "pro")
    path = f"/api/accounts/{uuid.uuid4()}"
    began = time.monotonic()
    answers = await asyncio.gather(*(http.get(path, headers=auth) for _ in range(40)))
    elapsed = time.monotonic() - began
    passed = [a for a in answers if a.status_code == 404]
    # The burst of ten, plus whatever refilled at 10/s while the requests were under way.
    assert 10 <= len(passed) <= 10 + int(elapsed * 10) + 1
    assert any(a.status_code == 429 for a in answers)
    assert {a.headers["RateLimit-Limit"] for a in answers} == {"10"}
    assert max(int(a.headers["X-Ops-Used"]) for a in passed) == len(passed)
    assert passed[0].headers["X-Ops-Limit"] == "100000"


async def test_mailbox_creation_interval_over_http(start: Start, clock: Clock) -> None:
    server, http = await start(free_rps=1000.0)
    auth = await token_for(server, "free")

    created = await http.post("/api/accounts", json=new_account(), headers=auth)
    assert created.status_code == 201
    # A success carries the headers too.
    assert created.headers["RateLimit-Limit"] == "1000"
    assert created.headers["RateLimit-Remaining"] == "999"
    assert created.headers["RateLimit-Reset"] == "1"
    assert created.headers["X-Ops-Used"] == "1"
    assert created.headers["X-Ops-Limit"] == "500"
    refused = await http.post("/api/accounts", json=new_account(), headers=auth)
    assert refused.status_code == 429
    assert refused.json() == {"error": "rate_limit_exceeded"}
    assert 7 <= int(refused.headers["Retry-After"]) <= 8
    clock.advance(8)
    assert (await http.post("/api/accounts", json=new_account(), headers=auth)).status_code == 201


async def test_refused_creations_do_not_start_the_interval(start: Start, clock: Clock) -> None:
    server, http = await start(pro_rps=1000.0)
    pro_auth = await token_for(server, "pro")

    first = await http.post("/api/accounts", json=new_account(), headers=pro_auth)
    assert first.status_code == 201
    clock.advance(1.5)
    signed = await http.post("/api/token", json={"address": first.json()["address"], "password": "secret123"})
    mailbox_auth = {"Authorization": f"Bearer {signed.json()['token']}"}
    # A mailbox token may not create mailboxes: 403, and the owner may still create at once.
    denied = await http.post("/api/accounts", json=new_account(), headers=mailbox_auth)
    assert denied.status_code == 403 and denied.json()["error"] == "access_denied", (signed.json(), denied.json())
    assert (await http.post("/api/accounts", json=new_account(), headers=pro_auth)).status_code == 201


async def test_quota_runs_out_and_comes_back_next_month(start: Start, clock: Clock) -> None:
    server, http = await start(free_rps=1000.0, free_ops_limit=3)
    user, auth = await user_and_auth(server, "free")
    path = f"/api/accounts/{uuid.uuid4()}"
    for n in range(3):
        answer = await http.get(path, headers=auth)
        assert answer.status_code == 404
        assert answer.headers["X-Ops-Used"] == str(n + 1)
    out = await http.get(path, headers=auth)
    assert out.status_code == 429
    assert out.json()["error"] == "ops_quota_exceeded"
    assert out.json()["message"]
    assert int(out.headers["Retry-After"]) >= 1
    assert out.headers["X-Ops-Used"] == "3"
    assert await server.services.admission.usage(user) == (3, 3)
    now = datetime.fromtimestamp(clock(), UTC)
    next_month = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC).timestamp()
    clock.advance(next_month - clock() + 1)
    back = await http.get(path, headers=auth)
    assert back.status_code == 404
    assert back.headers["X-Ops-Used"] == "1"


async def test_failed_sign_ins_are_limited_per_address(start: Start) -> None:
    server, http = await start()
    auth = await token_for(server, "pro")
    address = f"s{uuid.uuid4().hex[:6]}@inboxd.localhost"
    assert (
        await http.post("/api/accounts", json={"address": address, "password": "secret123"}, headers=auth)
    ).status_code == 201
    for _ in range(10):
        wrong = await http.post("/api/token", json={"address": address, "password": "wrongpass"})
        assert wrong.status_code == 401
    # The eleventh try is refused before the password is even looked at, right or wrong.
    blocked = await http.post("/api/token", json={"address": address, "password": "secret123"})
    assert blocked.status_code == 429
    assert blocked.json() == {"error": "rate_limit_exceeded"}
    assert 500 <= int(blocked.headers["Retry-After"]) <= 600


async def test_successful_sign_in_resets_the_address(start: Start) -> None:
    server, http = await start(login_max_failures=3)
    auth = await token_for(server, "pro")
    address = f"s{uuid.uuid4().hex[:6]}@inboxd.localhost"
    assert (
        await http.post("/api/accounts", json={"address": address, "password": "secret123"}, headers=auth)
    ).status_code == 201
    for _ in range(2):
        assert (await http.post("/api/token", json={"address": address, "password": "wrongpass"})).status_code == 401
    assert (await http.post("/api/token", json={"address": address, "password": "secret123"})).status_code == 200
    # The IP has 2 failures of 3 left over; the address starts again.
    assert (await http.post("/api/token", json={"address": address, "password": "wrongpass"})).status_code == 401
    assert (await http.post("/api/token", json={"address": address, "password": "wrongpass"})).status_code == 429


async def test_failed_sign_ins_are_limited_per_ip(start: Start, clock: Clock) -> None:
    _, http = await start()
    for n in range(10):
        answer = await http.post("/api/token", json={"address": f"n{n}@inboxd.localhost", "password": "wrongpass"})
        assert answer.status_code == 401
    blocked = await http.post("/api/token", json={"address": "fresh@inboxd.localhost", "password": "wrongpass"})
    assert blocked.status_code == 429
    assert blocked.json() == {"error": "rate_limit_exceeded"}
    # Another IP is not held back by this one's failures.
    async with http_client_from(OTHER_CLIENT_IP, str(http.base_url)) as other:
        fresh = {"address": "fresh@inboxd.localhost", "password": "wrongpass"}
        assert (await other.post("/api/token", json=fresh)).status_code == 401
    clock.advance(601)
    assert (
        await http.post("/api/token", json={"address": "fresh@inboxd.localhost", "password": "x" * 8})
    ).status_code == 401


async def test_forwarding_headers_do_not_change_the_client_ip(start: Start) -> None:
    # uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told not to: each try below would then
    # count against a fresh, made-up address and the per-IP limit would never bite.
    _, http = await start()
    for n in range(10):
        forged = {"X-Forwarded-For": f"203.0.113.{n}", "Forwarded": f"for=198.51.100.{n}"}
        body = {"address": f"n{n}@inboxd.localhost", "password": "wrongpass"}
        assert (await http.post("/api/token", json=body, headers=forged)).status_code == 401
    blocked = await http.post(
        "/api/token",
        json={"address": "fresh@inboxd.localhost", "password": "wrongpass"},
        headers={"X-Forwarded-For": "192.0.2.77"},
    )
    assert blocked.status_code == 429


async def test_public_domain_list_is_limited_per_ip(start: Start) -> None:
    # 0.5/s, burst 1: the second request within 2 s is refused.
    _, http = await start(public_rps=0.5)
    assert (await http.get("/api/domains")).status_code == 200
    refused = await http.get("/api/domains")
    assert refused.status_code == 429
    assert refused.json() == {"error": "rate_limit_exceeded"}
    assert refused.headers["Retry-After"] in {"1", "2"}
    # Another IP has a budget of its own.
    async with http_client_from(OTHER_CLIENT_IP, str(http.base_url)) as other:
        assert (await other.get("/api/domains")).status_code == 200


async def test_default_public_limit_is_generous(start: Start) -> None:
    _, http = await start()
    for _ in range(30):
        assert (await http.get("/api/domains")).status_code == 200


@pytest.fixture(params=["memory", "redis"])
def limiter_store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings for the limiter's counters: this process's memory, or the Redis on this machine."""
    return {"redis_url": REDIS_URL} if request.param == "redis" else {}


async def test_refused_creations_answer_their_own_error_and_leave_the_interval(
    start: Start, clock: Clock, limiter_store: dict[str, Any]
) -> None:
    server, http = await start(free_rps=1000.0, **limiter_store)
    auth = await token_for(server, "free")
    taken = new_account()
    assert (await http.post("/api/accounts", json=taken, headers=auth)).status_code == 201
    json_type = {**auth, "Content-Type": "application/json"}
    bad: list[tuple[dict[str, Any], int, str]] = [
        ({"content": b'{"address": '}, 400, "invalid_request"),
        ({"content": b'{"address": "' + b"a" * (2 << 20) + b'"}'}, 413, "payload_too_large"),
        ({"json": {"address": 5, "password": "secret123"}}, 400, "invalid_request"),
        ({"json": {"address": "not an address", "password": "secret123"}}, 400, "invalid_address"),
        ({"json": {"address": "x@nowhere.invalid", "password": "secret123"}}, 400, "invalid_domain"),
        ({"json": {**new_account(), "password": "short"}}, 400, "password_too_short"),
        ({"json": taken}, 409, "address_taken"),
    ]

    async def refuse_all() -> None:
        for kwargs, status, code in bad:
            answer = await http.post("/api/accounts", headers=json_type, **kwargs)
            assert (answer.status_code, answer.json()["error"]) == (status, code), kwargs
            assert answer.headers["X-Ops-Limit"] == "500"  # limited and counted all the same

    # Within the interval of the creation above, each bad request still gets its own answer.
    await refuse_all()
    assert (await http.post("/api/accounts", json=new_account(), headers=auth)).status_code == 429
    clock.advance(8)
    # Refused requests start no interval: a good one right after them is created.
    await refuse_all()
    assert (await http.post("/api/accounts", json=new_account(), headers=auth)).status_code == 201
    assert (await http.post("/api/accounts", json=new_account(), headers=auth)).status_code == 429


async def test_concurrent_wrong_passwords_stop_at_the_limit(start: Start, limiter_store: dict[str, Any]) -> None:
    server, http = await start(**limiter_store)
    auth = await token_for(server, "pro")
    account = new_account()
    assert (await http.post("/api/accounts", json=account, headers=auth)).status_code == 201
    wrong = {"address": account["address"], "password": "wrongpass"}
    answers = await asyncio.gather(*(http.post("/api/token", json=wrong) for _ in range(100)))
    codes = sorted(a.status_code for a in answers)
    assert set(codes) <= {401, 429}, codes
    assert codes.count(401) <= 10 and codes.count(429) >= 90, codes
    # The right password is refused too now: the address has used up its tries.
    right = await http.post("/api/token", json=account)
    assert right.status_code == 429


def client_from(server: Inboxd, source: str) -> httpx.AsyncClient:
    """An HTTP client whose connections come from `source` (any 127.x address is this host)."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", transport=transport, timeout=30)


async def test_a_stranger_cannot_lock_the_owner_out_over_http(start: Start, limiter_store: dict[str, Any]) -> None:
    # Ten wrong passwords from one client used to make the owner's right one, from another, 429 for 600 s.
    server, http = await start(**limiter_store)
    auth = await token_for(server, "pro")
    account = new_account()
    assert (await http.post("/api/accounts", json=account, headers=auth)).status_code == 201
    wrong = {"address": account["address"], "password": "wrongpass"}
    async with client_from(server, "127.0.0.2") as stranger, client_from(server, "127.0.0.3") as owner:
        for _ in range(10):
            assert (await stranger.post("/api/token", json=wrong)).status_code == 401
        assert (await stranger.post("/api/token", json=account)).status_code == 429
        signed_in = await owner.post("/api/token", json=account)
        assert signed_in.status_code == 200, signed_in.text


async def test_a_trusted_proxy_names_the_client(start: Start, limiter_store: dict[str, Any]) -> None:
    server, http = await start(trusted_proxies=["127.0.0.1/32", "10.9.0.0/16"], **limiter_store)

    async def failures(source: httpx.AsyncClient, forwarded_for: str) -> list[int]:
        body = {"address": f"n{uuid.uuid4().hex[:6]}@inboxd.localhost", "password": "wrongpass"}
        headers = {"X-Forwarded-For": forwarded_for}
        return [(await source.post("/api/token", json=body, headers=headers)).status_code for _ in range(11)]

    # The rightmost hop that is not a trusted proxy is the client; what the client wrote left of
    # it does not matter. Each client below has a budget of its own.
    assert await failures(http, "203.0.113.1") == [401] * 10 + [429]
    assert await failures(http, "198.51.100.7, 203.0.113.2") == [401] * 10 + [429]
    assert await failures(http, "203.0.113.3, 10.9.4.4") == [401] * 10 + [429]
    assert (await failures(http, "1.1.1.1, 203.0.113.3, 10.9.4.4"))[0] == 429  # the same client as above
    # An untrusted peer's header is ignored: 127.0.0.2 is counted as itself whatever it claims.
    async with client_from(server, "127.0.0.2") as direct:
        assert await failures(direct, "192.0.2.1") == [401] * 10 + [429]
        assert (await failures(direct, "192.0.2.2"))[0] == 429
