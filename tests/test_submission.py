"""The SMTP sandbox's submission listener over real sockets: AUTH, capture, TLS and bad input."""

from __future__ import annotations

import asyncio
import base64
import smtplib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from inboxd.app import Inboxd
from inboxd.smtp.server import SmtpServer
from inboxd.smtp.submission import Submission
from tests.conftest import OTHER_CLIENT_IP, REDIS_URL, Clock, Harness, simple_message
from tests.test_smtp import RawSmtp

# Most cases are about the protocol and run on SQLite; capture and concurrency run on both back ends.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def plain(username: str, password: str) -> str:
    return base64.b64encode(f"\0{username}\0{password}".encode()).decode()


@dataclass
class Sandbox:
    """A Pro user with a token, its sandbox username, and the harness's HTTP client."""

    http: httpx.AsyncClient
    token: str
    username: str
    port: int

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def messages(self, page: int = 1) -> list[dict[str, Any]]:
        response = await self.http.get("/api/user/sandbox/messages", params={"page": page}, headers=self.auth())
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["messages"]
        return found

    def send(self, recipients: list[str], raw: bytes, *, context: ssl.SSLContext | None = None) -> dict[str, Any]:
        with smtplib.SMTP("127.0.0.1", self.port, timeout=30) as client:
            if context is not None:
                client.starttls(context=context)
            client.login(self.username, self.token)
            refused: dict[str, Any] = client.sendmail("app@example.com", recipients, raw)
        return refused


async def open_sandbox(http: httpx.AsyncClient, token: str, port: int) -> Sandbox:
    info = await http.get("/api/user/sandbox", headers={"Authorization": f"Bearer {token}"})
    assert info.status_code == 200, info.text
    return Sandbox(http=http, token=token, username=info.json()["username"], port=port)


@pytest.fixture
async def sandbox(harness: Harness) -> Sandbox:
    return await open_sandbox(harness.http, await harness.new_user("pro"), harness.server.submission_port)


@dataclass
class Certs:
    ca: trustme.CA
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return Certs(ca=ca, cert=cert, key=key)


Start = Callable[..., Any]


@pytest.fixture
async def start(make_settings: Any, clock: Clock) -> AsyncIterator[Start]:
    """Start an inboxd with settings overrides; yields (server, http client)."""
    stack: list[tuple[Inboxd, httpx.AsyncClient]] = []

    async def run(**overrides: Any) -> tuple[Inboxd, httpx.AsyncClient]:
        server = Inboxd(make_settings(**overrides), clock=clock)
        await server.start()
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        stack.append((server, http))
        return server, http

    yield run
    for server, http in reversed(stack):
        await http.aclose()
        await server.stop()


# Capture -------------------------------------------------------------------------------------


async def test_login_captures_every_recipient_once_and_relays_nothing(harness: Harness, sandbox: Sandbox) -> None:
    # One of the "outside" recipients is a real mailbox here: it must not receive the message.
    box = await harness.new_mailbox()
    recipients = ["one@example.org", "two@example.net", box["address"]]
    raw = simple_message(subject="Welcome aboard").as_bytes()
    assert await asyncio.to_thread(sandbox.send, recipients, raw) == {}
    listed = await sandbox.messages()
    assert len(listed) == 1
    item = listed[0]
    assert item["subject"] == "Welcome aboard"
    assert item["recipients"] == recipients
    assert item["sender"] == "app@example.com"
    mailbox_list = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    assert mailbox_list.json()["messages"] == []
    detail = (await harness.http.get(f"/api/user/sandbox/messages/{item['id']}", headers=sandbox.auth())).json()
    assert detail["recipients"] == recipients
    assert detail["to"] == "someone@example.test"
    assert detail["cc"] == ""
    # Envelope recipients the headers do not show are the blind copies.
    assert detail["bcc"] == recipients
    assert detail["text_body"].startswith("Your code is 123456.")


@sqlite_only
async def test_to_cc_bcc_as_headers_and_envelope_show_them(harness: Harness, sandbox: Sandbox) -> None:
    msg = simple_message()
    del msg["To"]
    msg["To"] = "Ann <ann@example.org>, bob@example.org"
    msg["Cc"] = "carol@example.org"
    envelope = ["ann@example.org", "bob@example.org", "carol@example.org", "dave@example.org"]
    await asyncio.to_thread(sandbox.send, envelope, msg.as_bytes())
    item = (await sandbox.messages())[0]
    detail = (await harness.http.get(f"/api/user/sandbox/messages/{item['id']}", headers=sandbox.auth())).json()
    assert detail["to"] == "Ann <ann@example.org>, bob@example.org"
    assert detail["cc"] == "carol@example.org"
    assert detail["bcc"] == ["dave@example.org"]
    assert detail["recipients"] == envelope


@sqlite_only
async def test_sandbox_address_is_no_recipient_of_received_mail(harness: Harness, sandbox: Sandbox) -> None:
    info = (await harness.http.get("/api/user/sandbox", headers=sandbox.auth())).json()
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    await client.cmd("MAIL FROM:<a@example.org>")
    assert (await client.cmd(f"RCPT TO:<{info['address']}>"))[:3] == "550"
    await client.close()
    # Nor is it one of the user's mailboxes.
    accounts = await harness.http.get("/api/user/accounts", headers=sandbox.auth())
    assert info["account_id"] not in [a["id"] for a in accounts.json()["accounts"]]
    deleted = await harness.http.delete(f"/api/user/accounts/{info['account_id']}", headers=sandbox.auth())
    assert deleted.status_code == 404


async def test_32_concurrent_senders_every_250_stored(harness: Harness, sandbox: Sandbox) -> None:
    per_sender = 3

    def sender(n: int) -> int:
        accepted = 0
        with smtplib.SMTP("127.0.0.1", sandbox.port, timeout=60) as client:
            client.login(sandbox.username, sandbox.token)
            for i in range(per_sender):
                raw = simple_message(subject=f"s{n}-m{i}").as_bytes()
                if client.sendmail("app@example.com", [f"r{n}@example.org"], raw) == {}:
                    accepted += 1
        return accepted

    accepted = await asyncio.gather(*(asyncio.to_thread(sender, n) for n in range(32)))
    assert sum(accepted) == 32 * per_sender
    subjects = {m["subject"] for page in (1, 2, 3, 4) for m in await sandbox.messages(page)}
    assert subjects == {f"s{n}-m{i}" for n in range(32) for i in range(per_sender)}


@sqlite_only
async def test_anonymous_user_captures_without_auth(start: Start) -> None:
    server, http = await start(sandbox_anonymous_user="admin@localhost")
    client = await RawSmtp.connect(server.submission_port)
    await client.cmd("EHLO laptop")
    assert (await client.cmd("MAIL FROM:<app@example.com>"))[:3] == "250"
    assert (await client.cmd("RCPT TO:<x@example.org>"))[:3] == "250"
    assert (await client.cmd("DATA"))[:3] == "354"
    assert (await client.cmd(b"Subject: anon\r\n\r\nhi\r\n.\r\n"))[:3] == "250"
    await client.close()
    listed = await http.get("/api/user/sandbox/messages", headers={"Authorization": f"Bearer {server.bootstrap_token}"})
    assert [m["subject"] for m in listed.json()["messages"]] == ["anon"]


# AUTH and bad input ----------------------------------------------------------------------------


@sqlite_only
async def test_bad_auth_input_gets_the_right_replies(harness: Harness, sandbox: Sandbox) -> None:
    client = await RawSmtp.connect(sandbox.port)
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}"))[:3] == "503"  # before EHLO
    ehlo = await client.cmd("EHLO app")
    assert "AUTH PLAIN LOGIN" in ehlo
    assert (await client.cmd("MAIL FROM:<a@example.com>")).startswith("530 5.7.0")
    assert (await client.cmd("AUTH PLAIN !!!not-base64!!!"))[:3] == "501"
    assert (await client.cmd("AUTH PLAIN " + base64.b64encode(b"no-nuls").decode()))[:3] == "501"
    assert (await client.cmd("AUTH CRAM-MD5"))[:3] == "504"
    assert (await client.cmd("AUTH LOGIN")) == "334 VXNlcm5hbWU6"
    assert (await client.cmd("*"))[:3] == "501"
    assert (await client.cmd("AUTH PLAIN")) == "334 "
    assert (await client.cmd(plain(sandbox.username, sandbox.token))).startswith("235 ")
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}"))[:3] == "503"  # twice
    assert (await client.cmd("MAIL FROM:<a@example.com>"))[:3] == "250"
    await client.close()
    assert await sandbox.messages() == []


@sqlite_only
async def test_auth_login_exchange(sandbox: Sandbox) -> None:
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    assert await client.cmd("AUTH LOGIN " + base64.b64encode(sandbox.username.encode()).decode()) == (
        "334 UGFzc3dvcmQ6"
    )
    assert (await client.cmd(base64.b64encode(sandbox.token.encode()).decode())).startswith("235 ")
    await client.close()


@sqlite_only
async def test_failures_are_limited_per_ip_and_never_name_the_user(start: Start) -> None:
    server, http = await start(login_max_failures=3)
    token = server.bootstrap_token
    assert token is not None
    good = await open_sandbox(http, token, server.submission_port)
    client = await RawSmtp.connect(server.submission_port)
    await client.cmd("EHLO app")
    unknown_user = await client.cmd(f"AUTH PLAIN {plain('sbx_nobody', token)}")
    wrong_token = await client.cmd(f"AUTH PLAIN {plain(good.username, 'ibx_wrong')}")
    assert unknown_user == wrong_token == "535 5.7.8 Authentication credentials invalid"
    assert (await client.cmd(f"AUTH PLAIN {plain(good.username, 'not-a-token')}"))[:3] == "535"
    # The budget is spent: even the right credentials get 421 and the connection closes.
    assert (await client.cmd(f"AUTH PLAIN {plain(good.username, token)}")).startswith("421 ")
    assert await client.reader.read() == b""
    await client.close()
    # The listener is still up.
    again = await RawSmtp.connect(server.submission_port)
    assert (await again.cmd("EHLO app"))[:3] == "250"
    await again.close()
    # The budget spent was this IP's: from another address the same username and token sign in.
    other = await RawSmtp.connect(server.submission_port, source=OTHER_CLIENT_IP)
    await other.cmd("EHLO app")
    assert (await other.cmd(f"AUTH PLAIN {plain(good.username, token)}"))[:3] == "235"
    await other.close()


@sqlite_only
async def test_revoked_token_and_suspended_user_stop_at_once(harness: Harness, sandbox: Sandbox) -> None:
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}"))[:3] == "235"
    tokens = (await harness.http.get("/api/user/tokens", headers=sandbox.auth())).json()["tokens"]
    second = await harness.http.post("/api/user/tokens", json={"name": "other"}, headers=sandbox.auth())
    other = second.json()["token"]
    await harness.http.delete(f"/api/user/tokens/{tokens[0]['id']}", headers={"Authorization": f"Bearer {other}"})
    # The open session's next message is refused, and a new AUTH with that token fails.
    assert (await client.cmd("MAIL FROM:<a@example.com>"))[:3] == "250"
    assert (await client.cmd("RCPT TO:<x@example.org>")).startswith("535 ")
    await client.close()
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}"))[:3] == "535"
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, other)}"))[:3] == "235"
    await client.close()
    me = (await harness.http.get("/api/user/me", headers={"Authorization": f"Bearer {other}"})).json()
    await harness.server.services.users.set_user(me["email"], status="suspended")
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, other)}"))[:3] == "535"
    await client.close()


@sqlite_only
async def test_free_user_is_refused(harness: Harness, sandbox: Sandbox) -> None:
    services = harness.server.services
    token = await harness.new_user("free")
    response = await harness.http.get("/api/user/sandbox", headers=harness.auth(token))
    assert response.status_code == 403 and response.json()["error"] == "pro_required"
    # Right credentials of a free user (its sandbox made directly: the API will not show it).
    free = (await services.users.authenticate(token, services.mailbox_tokens)).user
    username = (await services.sandboxes.of(free)).username
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    assert await client.cmd(f"AUTH PLAIN {plain(username, token)}") == "535 5.7.8 The SMTP sandbox needs a Pro account"
    # A Pro user downgraded while its session is open: the next message is refused.
    assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}"))[:3] == "235"
    pro = (await services.users.authenticate(sandbox.token, services.mailbox_tokens)).user
    await services.users.set_user(pro.email, plan="free")
    assert (await client.cmd("MAIL FROM:<a@example.com>"))[:3] == "250"
    assert (await client.cmd("RCPT TO:<x@example.org>")).startswith("535 ")
    await client.close()


@sqlite_only
async def test_ten_thousand_recipients(sandbox: Sandbox) -> None:
    client = await RawSmtp.connect(sandbox.port)
    await client.cmd("EHLO app")
    await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}")
    await client.cmd("MAIL FROM:<a@example.com>")
    client.writer.write(b"".join(f"RCPT TO:<r{i}@example.org>\r\n".encode() for i in range(10_000)))
    codes = [(await client.reply())[:3] for _ in range(10_000)]
    assert codes[:100] == ["250"] * 100
    assert set(codes[100:]) == {"452"}
    assert (await client.cmd("DATA"))[:3] == "354"
    assert (await client.cmd(b"Subject: many\r\n\r\nhi\r\n.\r\n"))[:3] == "250"
    await client.close()
    listed = await sandbox.messages()
    assert listed[0]["recipients"] == [f"r{i}@example.org" for i in range(100)]


@sqlite_only
async def test_no_auth_without_tls_off_loopback(harness: Harness, sandbox: Sandbox) -> None:
    """A listener that may not take credentials in the clear: no AUTH keyword, 538 to AUTH."""
    services = harness.server.services
    hooks = Submission(
        sandboxes=services.sandboxes,
        ingest=services.ingest,
        admission=services.admission,
        settings=services.settings,
        plaintext_auth=False,
    )
    listener = SmtpServer(services.ingest, settings=services.settings, hooks=hooks)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    await listener.start(sock)
    try:
        client = await RawSmtp.connect(listener.port)
        assert "AUTH" not in await client.cmd("EHLO app")
        assert (await client.cmd(f"AUTH PLAIN {plain(sandbox.username, sandbox.token)}")).startswith("538 ")
        await client.close()
    finally:
        await listener.stop()


# TLS ----------------------------------------------------------------------------------------


@sqlite_only
async def test_starttls_then_login(start: Start, certs: Certs) -> None:
    server, http = await start(tls_cert=str(certs.cert), tls_key=str(certs.key))
    token = server.bootstrap_token
    assert token is not None
    box = await open_sandbox(http, token, server.submission_port)
    info = (await http.get("/api/user/sandbox", headers=box.auth())).json()
    assert info["starttls"] is True and "smtp.starttls()" in info["snippets"]["smtplib"]
    context = certs.client_context()
    raw = simple_message(subject="over tls").as_bytes()
    assert await asyncio.to_thread(box.send, ["x@example.org"], raw, context=context) == {}
    source = await http.get(f"/api/user/sandbox/messages/{(await box.messages())[0]['id']}/source", headers=box.auth())
    head = source.content.split(b"\r\n\r\n")[0]
    assert b"with ESMTPSA" in head and b"for <x@example.org>" in head and b"sandbox.invalid" not in head

    # The receiving port offers STARTTLS too.
    client = await RawSmtp.connect(server.smtp_port)
    assert "STARTTLS" in await client.cmd("EHLO c")
    await client.close()


@sqlite_only
async def test_starttls_discards_pipelined_commands(start: Start, certs: Certs) -> None:
    server, http = await start(tls_cert=str(certs.cert), tls_key=str(certs.key))
    assert server.bootstrap_token is not None
    box = await open_sandbox(http, server.bootstrap_token, server.submission_port)
    client = await RawSmtp.connect(server.submission_port)
    await client.cmd("EHLO app")
    # An attacker in the middle appends commands after STARTTLS in the same packet.
    injected = f"STARTTLS\r\nAUTH PLAIN {plain(box.username, box.token)}\r\nMAIL FROM:<evil@example.com>\r\n"
    assert (await client.cmd(injected.encode()))[:3] == "220"
    await client.writer.start_tls(certs.client_context(), server_hostname="localhost")
    # The first reply under TLS answers our EHLO: nothing injected was run or answered.
    ehlo = await client.cmd("EHLO app")
    assert ehlo.startswith("250-") and "AUTH PLAIN LOGIN" in ehlo and "STARTTLS" not in ehlo
    assert (await client.cmd("MAIL FROM:<a@example.com>")).startswith("530 ")
    assert (await client.cmd("STARTTLS"))[:3] == "503"  # twice
    await client.close()


@sqlite_only
async def test_tls_handshake_that_never_ends_times_out(start: Start, certs: Certs) -> None:
    server, _ = await start(tls_cert=str(certs.cert), tls_key=str(certs.key), tls_handshake_timeout=0.5)
    client = await RawSmtp.connect(server.submission_port)
    await client.cmd("EHLO app")
    assert (await client.cmd("STARTTLS"))[:3] == "220"
    # Say nothing: the server gives up on the handshake and closes.
    assert await asyncio.wait_for(client.reader.read(), 10) == b""
    await client.close()
    again = await RawSmtp.connect(server.submission_port)
    assert (await again.cmd("EHLO app"))[:3] == "250"
    await again.close()


@sqlite_only
async def test_implicit_tls_port(start: Start, certs: Certs) -> None:
    server, http = await start(tls_cert=str(certs.cert), tls_key=str(certs.key), submissions_port=0)
    assert server.bootstrap_token is not None and server.submissions_port is not None
    box = await open_sandbox(http, server.bootstrap_token, server.submission_port)
    info = (await http.get("/api/user/sandbox", headers=box.auth())).json()
    assert info["smtps_port"] == server.submissions_port
    context = certs.client_context()

    def send() -> dict[str, Any]:
        assert server.submissions_port is not None
        with smtplib.SMTP_SSL("127.0.0.1", server.submissions_port, context=context, timeout=30) as client:
            assert not client.has_extn("starttls")
            client.login(box.username, box.token)
            refused: dict[str, Any] = client.sendmail("a@example.com", ["b@example.org"], b"Subject: s\r\n\r\nx\r\n")
        return refused

    assert await asyncio.to_thread(send) == {}
    assert [m["subject"] for m in await box.messages()] == ["s"]


# Plan limits ----------------------------------------------------------------------------------


async def authenticated(port: int, box: Sandbox) -> RawSmtp:
    client = await RawSmtp.connect(port)
    await client.cmd("EHLO app")
    assert (await client.cmd(f"AUTH PLAIN {plain(box.username, box.token)}"))[:3] == "235"
    return client


async def send_raw(client: RawSmtp, body: bytes) -> str:
    assert (await client.cmd("MAIL FROM:<a@example.com>"))[:3] == "250"
    rcpt = await client.cmd("RCPT TO:<x@example.org>")
    if rcpt[:3] != "250":
        return rcpt
    assert (await client.cmd("DATA"))[:3] == "354"
    return await client.cmd(body + b"\r\n.\r\n")


async def test_captured_messages_count_as_operations(start: Start) -> None:
    server, http = await start(pro_ops_limit=4)
    assert server.bootstrap_token is not None
    box = await open_sandbox(http, server.bootstrap_token, server.submission_port)  # one operation
    client = await authenticated(server.submission_port, box)
    for n in range(3):
        assert (await send_raw(client, f"Subject: {n}\r\n\r\nhi".encode()))[:3] == "250"
    assert (await send_raw(client, b"Subject: over\r\n\r\nhi")).startswith("451 4.7.1")
    await client.close()
    admin = await server.services.users.user_by_email("admin@localhost")
    assert await server.services.admission.usage(admin) == (4, 4)
    stored = await server.services.sandboxes.page(admin, 1)
    assert sorted(m.summary.subject for m in stored) == ["0", "1", "2"]


async def test_size_and_byte_quota_refuse_and_store_nothing(start: Start) -> None:
    server, http = await start(max_message_size=4000, pro_mailbox_quota=6000)
    assert server.bootstrap_token is not None
    box = await open_sandbox(http, server.bootstrap_token, server.submission_port)
    client = await authenticated(server.submission_port, box)
    assert (await send_raw(client, b"Subject: big\r\n\r\n" + b"x" * 5000)).startswith("552 5.3.4")
    assert (await send_raw(client, b"Subject: one\r\n\r\n" + b"y" * 3000))[:3] == "250"
    # A second one would pass the sandbox's byte quota.
    assert (await send_raw(client, b"Subject: two\r\n\r\n" + b"z" * 3000)).startswith("552 5.2.2")
    await client.close()
    assert [m["subject"] for m in await box.messages()] == ["one"]
    info = (await http.get("/api/user/sandbox", headers=box.auth())).json()
    assert 3000 < info["used"] < 4000


@sqlite_only
def test_plaintext_auth_rule_follows_the_listener_address(make_settings: Any) -> None:
    """AUTH without TLS: on a loopback listener, or anywhere when the operator allows it."""
    from inboxd.config import Settings

    assert Settings().submission_host == "127.0.0.1"
    assert Settings().submission_port == 2587

    def offered(**overrides: Any) -> bool:
        settings = make_settings(**overrides)
        hooks = Submission(sandboxes=None, ingest=None, admission=None, settings=settings)  # type: ignore[arg-type]
        return hooks.plaintext_auth

    assert (
        offered(submission_host="127.0.0.1") and offered(submission_host="::1") and offered(submission_host="localhost")
    )
    assert not offered(submission_host="0.0.0.0") and not offered(submission_host="192.0.2.10")
    assert offered(submission_host="0.0.0.0", submission_allow_plaintext_auth=True)


async def auth_from(port: int, source: str, username: str, secret: str) -> str:
    """One AUTH PLAIN from `source` (any 127.x address is this host): its reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    client = RawSmtp(reader, writer)
    try:
        assert (await client.reply()).startswith("220 ")
        await client.cmd("EHLO app")
        return await client.cmd(f"AUTH PLAIN {plain(username, secret)}")
    finally:
        await client.close()


@pytest.mark.parametrize("limiter_store", [{}, {"redis_url": REDIS_URL}], ids=["memory", "redis"])
async def test_a_strangers_failures_do_not_lock_the_owner_out(start: Start, limiter_store: dict[str, Any]) -> None:
    # Ten wrong AUTHs for a sandbox username from one address used to give its owner 421 anywhere.
    server, http = await start(**limiter_store)
    token = server.bootstrap_token
    assert token is not None
    sandbox = await open_sandbox(http, token, server.submission_port)
    for _ in range(10):
        assert (await auth_from(sandbox.port, "127.0.0.2", sandbox.username, "ibx_wrong"))[:3] == "535"
    assert (await auth_from(sandbox.port, "127.0.0.2", sandbox.username, token))[:3] == "421"
    assert (await auth_from(sandbox.port, "127.0.0.3", sandbox.username, token))[:3] == "235"


@sqlite_only
async def test_smtp_auth_failures_are_counted_apart_from_api_sign_ins(start: Start) -> None:
    # One budget per address used to cover both: ten AUTH failures made POST /api/token answer 429.
    server, http = await start(login_max_failures=10)
    for n in range(10):
        assert (await auth_from(server.submission_port, "127.0.0.1", f"sbx_nobody{n}", "ibx_wrong"))[:3] == "535"
    assert (await auth_from(server.submission_port, "127.0.0.1", "sbx_nobody", "ibx_wrong"))[:3] == "421"
    wrong = {"address": f"nobody@{server.settings.default_domain}", "password": "wrongpass"}
    assert (await http.post("/api/token", json=wrong)).status_code == 401
