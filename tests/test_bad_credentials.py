"""A bad credential is a 401 (or its face's refusal), never a 500, on every face that takes one:
the bearer value of every authenticated route, `/api/ws`'s auth message, the dashboard's session
cookie, and SMTP AUTH on the submission listener. Random byte strings go over real sockets: raw
HTTP (httpx would refuse some header bytes itself), a real WebSocket client, smtplib.
"""

from __future__ import annotations

import asyncio
import base64
import json
import smtplib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from inboxd.api.app import api_routes
from inboxd.app import Inboxd
from inboxd.errors import Unauthorized
from inboxd.services.credentials import MailboxClaims, MailboxTokens
from inboxd.smtp.session import LINE_LIMIT
from tests.conftest import Clock, Harness
from tests.wsclient import open_ws, refused

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CODES_401 = {"invalid_token", "invalid_or_expired_token", "account_revoked"}


def b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def nested_header(depth: int) -> bytes:
    """A JWT whose header segment is `[` nested `depth` deep."""
    return b64url(b"[" * depth) + b".e30." + b64url(b"x" * 32)


# Values shaped like our credentials go furthest into the parser: JWT-like segments (random bytes,
# base64url or not), API-token-like values, nested headers, and plain random bytes.
_segment = st.one_of(st.binary(max_size=80).map(b64url), st.binary(max_size=40))
_jwtish = st.lists(_segment, min_size=1, max_size=4).map(b".".join)
BEARERS = st.one_of(
    st.binary(max_size=300),
    _jwtish,
    st.binary(max_size=60).map(lambda b: b"ibx_" + b),
    st.integers(1, 60_000).map(nested_header),
    st.integers(1, 200_000).map(lambda n: b"A" * n),
)


def parser_refuses(value: bytes) -> bool:
    """Bytes a header value may not hold (RFC 9110 field-value): the HTTP parser answers 400
    before the request reaches inboxd."""
    return any((b < 0x20 and b != 0x09) or b == 0x7F for b in value)


def authenticated_routes() -> list[tuple[str, str]]:
    """Every route behind a bearer value, as (method, concrete path)."""
    found = []
    for route in api_routes():
        if isinstance(route, Route) and getattr(route.endpoint, "access", None) in ("token", "mailbox_token", "pro"):
            method = sorted((route.methods or set()) - {"HEAD"})[0]
            path = route.path.format(mailbox=uuid.uuid4(), id=uuid.uuid4(), index=0)
            found.append((method, path))
    assert len(found) > 30
    return found


ROUTES = authenticated_routes()


async def raw_request(port: int, method: str, path: str, header: bytes) -> tuple[int, bytes]:
    """One request with `header` written as given; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
            + header
            + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def assert_refused_bearer(port: int, method: str, path: str, value: bytes) -> None:
    value = value.replace(b"\r", b"").replace(b"\n", b"")
    status, body = await raw_request(port, method, path, b"Authorization: Bearer " + value)
    if status == 400 and parser_refuses(value):
        return
    assert status == 401, (method, path, value[:80], status, body[:300])
    assert json.loads(body)["error"] in CODES_401


async def test_a_deeply_nested_token_header_is_a_401_and_a_clean_websocket_refusal(harness: Harness) -> None:
    port = harness.server.http_port
    # 50,000 `[` once gave 500 RecursionError on REST; 40,000 still fits the WebSocket's 64 KiB frame.
    for method, path in ROUTES:
        await assert_refused_bearer(port, method, path, nested_header(50_000))
    async with open_ws(port) as ws:
        await ws.send(json.dumps({"type": "auth", "token": nested_header(40_000).decode()}))
        assert await refused(ws) == ({"error": "invalid_token"}, 1008)
    with pytest.raises(Unauthorized):
        harness.server.services.mailbox_tokens.check(nested_header(50_000).decode(), now=harness.clock())


@PROPERTY
@given(route=st.sampled_from(ROUTES), value=BEARERS)
async def test_any_bearer_value_is_a_401_on_every_route(harness: Harness, route: tuple[str, str], value: bytes) -> None:
    await assert_refused_bearer(harness.server.http_port, *route, value)


@PROPERTY
@given(
    token=st.one_of(
        st.text(max_size=300),
        _jwtish.map(lambda b: b.decode("latin-1")),
        st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
        st.integers(1, 40_000).map(lambda n: nested_header(n).decode()),
    )
)
@example(token=nested_header(40_000).decode())
@example(token="ibx_\ud800")
async def test_any_token_on_the_websocket_is_refused_cleanly(harness: Harness, token: str) -> None:
    async with open_ws(harness.server.http_port) as ws:
        # `json.dumps` escapes lone surrogates, which a decoder may refuse as a malformed message.
        await ws.send(json.dumps({"type": "auth", "token": token}))
        message, code = await refused(ws)
    assert code == 1008 and message["error"] in ("invalid_token", "invalid_auth_message"), message


@PROPERTY
@given(value=st.one_of(st.binary(max_size=300), st.binary(max_size=60).map(b64url)))
async def test_any_session_cookie_is_a_sign_in_redirect(harness: Harness, value: bytes) -> None:
    value = value.replace(b"\r", b"").replace(b"\n", b"")
    for path in ("/mailboxes", "/account"):
        status, body = await raw_request(harness.server.http_port, "GET", path, b"Cookie: inboxd_session=" + value)
        if status == 400 and parser_refuses(value):
            continue
        assert status == 303, (path, value[:80], status, body[:300])


def smtp_auth(port: int, username: bytes, password: bytes) -> list[tuple[int, int]]:
    """AUTH PLAIN and AUTH LOGIN with these bytes: each exchange's final reply code, and the
    length of its longest line."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode() or "="  # "=": an empty response (RFC 4954)

    answers = []
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo()
        plain = "PLAIN " + b64(b"\0" + username + b"\0" + password)
        answers.append((client.docmd("AUTH", plain)[0], len(plain)))
        login = "LOGIN " + b64(username)
        code, _ = client.docmd("AUTH", login)
        longest = len(login)
        if code == 334:
            code, _ = client.docmd(b64(password))
            longest = max(longest, len(b64(password)))
        answers.append((code, longest))
    return answers


@pytest.fixture
async def submission(make_settings: Any, clock: Clock) -> AsyncIterator[int]:
    """The submission listener's port, on a server that does not count these failures against
    the client (the failure limit has tests of its own)."""
    server = Inboxd(make_settings(login_max_failures=1_000_000), clock=clock)
    await server.start()
    try:
        yield server.submission_port
    finally:
        await server.stop()


@PROPERTY
@given(
    username=st.one_of(st.binary(max_size=100), st.text(max_size=100).map(lambda t: t.encode())),
    password=st.one_of(st.binary(max_size=300), st.binary(max_size=60).map(lambda b: b"ibx_" + b64url(b))),
)
# A NUL reaches the lookup through AUTH LOGIN (PostgreSQL refuses it in text), as do long values.
@example(username=b"sandbox\0x", password=b"ibx_\0" + b"x" * 42)
@example(username="é".encode() * 300, password=b"ibx_" + b"\xc3\xa9" * 5000)
@example(username=b"\xff", password=b"\xff")
async def test_any_smtp_auth_credential_is_refused_cleanly(submission: int, username: bytes, password: bytes) -> None:
    answers = await asyncio.to_thread(smtp_auth, submission, username, password)
    # 535 wrong credentials; 501 undecodable (not UTF-8, or a NUL inside PLAIN's fields); 500 a
    # line longer than the engine reads.
    for code, longest in answers:
        assert code in (535, 501) or (code == 500 and longest > LINE_LIMIT), answers


def test_a_token_minted_by_the_old_code_still_verifies() -> None:
    # Issued by the hand-written code before the parser was hardened (key b"k" * 32, now=1e9).
    old = (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiJtMSIsImdlbiI6MiwiaWF0IjoxMDAwMDAwMDAwLCJleHAiOjEwMDAwODY0MDB9."
        "uzft4ZlBpAX5TK2XL1L-C_P9g1OODoKVBdKyvef-rD4"
    )
    tokens = MailboxTokens([b"k" * 32], ttl=86400)
    assert tokens.check(old, now=1e9 + 60) == MailboxClaims(mailbox_id="m1", password_gen=2)
