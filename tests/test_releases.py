"""Release (issue 27): a stored message sent on through a relay that is a real SMTP server, a second
inboxd started here (its receiving listener refuses unknown recipients with 550 5.1.1)."""

from __future__ import annotations

import asyncio
import shutil
import smtplib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import compat32
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from inboxd.app import Inboxd
from inboxd.client import ApiError, AsyncClient, Client, Json
from inboxd.config import Settings, SettingsError, load_settings
from inboxd.model import NO_FILTER
from tests.conftest import REDIS_URL, Clock, Harness, free_port, simple_message

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
RELAY_DOMAIN = "relay.test"
RELAY_SENDER = "releases@ops.example"


@dataclass
class Relay:
    """The second inboxd: its SMTP port, and the messages its mailboxes hold."""

    server: Inboxd
    http: httpx.AsyncClient
    token: str

    @property
    def port(self) -> int:
        return self.server.smtp_port

    async def mailbox(self, local: str) -> str:
        address = f"{local}@{RELAY_DOMAIN}"
        response = await self.http.post(
            "/api/accounts", json={"address": address, "password": "secret123"}, headers=self._auth
        )
        assert response.status_code == 201, response.text
        return address

    async def sources(self, address: str) -> list[bytes]:
        listed = (await self.http.get(f"/api/accounts/{address}/messages", headers=self._auth)).json()
        return [
            (await self.http.get(f"/api/accounts/{address}/messages/{m['id']}/source", headers=self._auth)).content
            for m in listed["messages"]
        ]

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _relay_settings(tmp_path: Path, sqlite_template: Path, **overrides: Any) -> Settings:
    data = tmp_path / "relay-data"
    data.mkdir()
    shutil.copy(sqlite_template, data / "inboxd.sqlite3")
    return Settings(
        data_dir=data,
        http_port=0,
        smtp_port=0,
        submission_port=0,
        public_domains=[RELAY_DOMAIN],
        sweep_interval=3600.0,
        free_rps=1000.0,
        pro_rps=1000.0,
        free_create_interval=0.0,
        pro_create_interval=0.0,
        **overrides,
    )


@pytest.fixture
async def relay(tmp_path: Path, sqlite_template: Path, clock: Clock) -> AsyncIterator[Relay]:
    server = Inboxd(_relay_settings(tmp_path, sqlite_template), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            yield Relay(server=server, http=http, token=server.bootstrap_token)
    finally:
        await server.stop()


Start = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start(make_settings: Any, clock: Clock) -> AsyncIterator[Start]:
    """Start the inboxd under test with settings of the test's own (the relay's among them)."""
    started: list[tuple[Inboxd, httpx.AsyncClient]] = []

    async def run(**overrides: Any) -> Harness:
        server = Inboxd(make_settings(**overrides), clock=clock)
        await server.start()
        assert server.bootstrap_token is not None
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        started.append((server, http))
        return Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)

    yield run
    for server, http in started:
        await http.aclose()
        await server.stop()


def relayed(relay: Relay, **overrides: Any) -> dict[str, Any]:
    return {
        "relay_host": "127.0.0.1",
        "relay_port": relay.port,
        "relay_tls": "none",
        "relay_allow": [RELAY_DOMAIN],
        "relay_sender": RELAY_SENDER,
        **overrides,
    }


async def caught(h: Harness, subject: str = "Your code") -> tuple[str, str]:
    """A mailbox on the server under test holding one message: (address, message id)."""
    box = await h.new_mailbox()
    await h.send(box["address"], simple_message(subject=subject))
    listed = (await h.http.get(f"/api/accounts/{box['address']}/messages", headers=h.auth())).json()
    return box["address"], listed["messages"][0]["id"]


async def release(h: Harness, address: str, message_id: str, to: list[str], token: str | None = None) -> httpx.Response:
    return await h.http.post(
        f"/api/accounts/{address}/messages/{message_id}/release", json={"to": to}, headers=h.auth(token)
    )


async def test_release_is_refused_without_relay_allow(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay, relay_allow=[]))
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [inbox])

    assert response.status_code == 403
    assert response.json()["error"] == "release_disabled"
    assert "INBOXD_RELAY_ALLOW" in response.json()["message"]
    assert await relay.sources(inbox) == []


@sqlite_only
async def test_release_is_refused_without_a_relay_host(start: Start) -> None:
    h = await start(relay_allow=[RELAY_DOMAIN])
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [f"me@{RELAY_DOMAIN}"])

    assert response.status_code == 403
    assert response.json()["error"] == "release_disabled" and "INBOXD_RELAY_HOST" in response.json()["message"]


async def test_release_to_an_allowed_address_arrives_unchanged_and_is_recorded(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    address, message_id = await caught(h, subject="Welcome aboard")
    stored = (await h.http.get(f"/api/accounts/{address}/messages/{message_id}/source", headers=h.auth())).content

    response = await release(h, address, message_id, [inbox])

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message_id"] == message_id
    [answer] = body["recipients"]
    assert answer["address"] == inbox and answer["accepted"] is True and answer["code"] == 250
    [arrived] = await relay.sources(inbox)
    # The relay put its own Received: in front; under it, ours, then the stored bytes unchanged.
    theirs, mark, ours_and_rest = arrived.partition(b"\r\nReceived: by ")
    assert mark and theirs.startswith(b"Received: from ") and b"\r\n" not in theirs.replace(b"\r\n\t", b"")
    ours, rest = (b"Received: by " + ours_and_rest).split(b"\r\n", 1)
    assert f"id {body['id']};".encode() in ours
    # Then the release's resent block (RFC 5322 §3.6.6), then the stored bytes unchanged.
    resent, rest = rest.split(b"\r\n", 4)[:4], rest.split(b"\r\n", 4)[4]
    assert [line.split(b":", 1)[0] for line in resent] == [
        b"Resent-Date",
        b"Resent-From",
        b"Resent-To",
        b"Resent-Message-ID",
    ]
    assert rest == stored
    assert BytesParser(policy=compat32).parsebytes(arrived)["Subject"] == "Welcome aboard"

    history = (await h.http.get(f"/api/accounts/{address}/messages/{message_id}/releases", headers=h.auth())).json()
    assert history["releases"] == [body]
    me = (await h.http.get("/api/user/me", headers=h.auth())).json()
    assert body["user_id"] == me["id"]


async def test_the_relays_refusal_is_reported_per_recipient(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [inbox, f"nobody@{RELAY_DOMAIN}"])

    assert response.status_code == 200, response.text
    ok, refused = response.json()["recipients"]
    assert ok["accepted"] is True
    assert refused["address"] == f"nobody@{RELAY_DOMAIN}" and refused["accepted"] is False
    assert refused["code"] == 550 and refused["message"].startswith("5.1.1")
    assert len(await relay.sources(inbox)) == 1

    # Every recipient refused: still an answer per recipient (the relay took nothing), recorded.
    response = await release(h, address, message_id, [f"nobody@{RELAY_DOMAIN}"])
    assert response.status_code == 200
    assert [(r["accepted"], r["code"]) for r in response.json()["recipients"]] == [(False, 550)]
    history = (await h.http.get(f"/api/accounts/{address}/messages/{message_id}/releases", headers=h.auth())).json()
    assert len(history["releases"]) == 2


@sqlite_only
async def test_recipients_outside_the_allow_list_or_malformed_are_refused(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay, relay_allow=[inbox, "example.com"]))
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [inbox, f"other@{RELAY_DOMAIN}", "x@sub.example.com"])
    assert response.status_code == 403
    assert response.json()["error"] == "recipient_not_allowed"
    assert f"other@{RELAY_DOMAIN}" in response.json()["message"] and "x@sub.example.com" in response.json()["message"]

    # The envelope is built from `to`: CR/LF, display names and spaces never reach it.
    for hostile in (
        f"{inbox}\r\nRCPT TO:<evil@example.org>",
        f"{inbox}>\r\nDATA",
        f"Me <{inbox}>",
        f"me @{RELAY_DOMAIN}",
        "",
    ):
        response = await release(h, address, message_id, [hostile])
        assert response.status_code == 400, hostile
        assert response.json()["error"] == "invalid_request"
    bodies: list[dict[str, Any]] = [{"to": []}, {"to": [inbox] * 21}, {"to": inbox}, {}]
    for body in bodies:
        response = await h.http.post(
            f"/api/accounts/{address}/messages/{message_id}/release", json=body, headers=h.auth()
        )
        assert response.status_code == 400, body
    assert await relay.sources(inbox) == []
    # An allowed address in any case passes; a domain entry allows that domain exactly.
    assert (await release(h, address, message_id, [inbox.upper()])).status_code == 200


@sqlite_only
@pytest.mark.parametrize("limiter", ["memory", "redis"])
async def test_releases_are_limited_per_user(start: Start, relay: Relay, limiter: str) -> None:
    inbox = await relay.mailbox("me")
    shared = {"redis_url": REDIS_URL} if limiter == "redis" else {}
    h = await start(**relayed(relay, release_per_hour=2), **shared)
    address, message_id = await caught(h)
    assert (await release(h, address, message_id, [inbox])).status_code == 200
    assert (await release(h, address, message_id, [inbox])).status_code == 200

    refused = await release(h, address, message_id, [inbox])

    assert refused.status_code == 429
    assert refused.json()["error"] == "release_limit_reached"
    assert int(refused.headers["Retry-After"]) > 0
    # Another user has a budget of its own.
    other = await h.new_user("pro")
    box = await h.new_mailbox(other)
    await h.send(box["address"])
    listed = (await h.http.get(f"/api/accounts/{box['address']}/messages", headers=h.auth(other))).json()
    assert (await release(h, box["address"], listed["messages"][0]["id"], [inbox], other)).status_code == 200
    assert len(await relay.sources(inbox)) == 3


@sqlite_only
async def test_someone_elses_message_is_not_found(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    address, message_id = await caught(h)
    other = await h.new_user("pro")

    response = await release(h, address, message_id, [inbox], other)

    assert response.status_code == 404
    # A mailbox token (handed to an application) reads its mail but cannot send it anywhere.
    signed = await h.http.post("/api/token", json={"address": address, "password": "secret123"})
    response = await release(h, address, message_id, [inbox], signed.json()["token"])
    assert response.status_code == 403 and response.json()["error"] == "access_denied"
    assert await relay.sources(inbox) == []


@sqlite_only
async def test_an_unreachable_relay_is_a_502_and_recorded(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay, relay_port=free_port(), relay_timeout=5.0))
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [inbox])

    assert response.status_code == 502
    assert response.json()["error"] == "relay_error"
    history = (await h.http.get(f"/api/accounts/{address}/messages/{message_id}/releases", headers=h.auth())).json()
    [record] = history["releases"]
    assert record["recipients"][0]["accepted"] is False and record["recipients"][0]["code"] == 0


@dataclass
class Certs:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    paths = Certs(ca=tmp_path / "ca.pem", cert=tmp_path / "cert.pem", key=tmp_path / "key.pem")
    ca.cert_pem.write_to_path(str(paths.ca))
    issued.private_key_and_cert_chain_pem.write_to_path(str(paths.cert))
    issued.private_key_pem.write_to_path(str(paths.key))
    return paths


@pytest.fixture
async def tls_relay(tmp_path: Path, sqlite_template: Path, clock: Clock, certs: Certs) -> AsyncIterator[Relay]:
    settings = _relay_settings(tmp_path, sqlite_template, tls_cert=str(certs.cert), tls_key=str(certs.key))
    server = Inboxd(settings, clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            yield Relay(server=server, http=http, token=server.bootstrap_token)
    finally:
        await server.stop()


@sqlite_only
async def test_starttls_to_a_relay_with_a_trusted_certificate(start: Start, tls_relay: Relay, certs: Certs) -> None:
    inbox = await tls_relay.mailbox("me")
    trusting = await start(**relayed(tls_relay, relay_tls="starttls", relay_ca_file=str(certs.ca)))
    address, message_id = await caught(trusting)
    response = await release(trusting, address, message_id, [inbox])
    assert response.status_code == 200, response.text
    assert response.json()["recipients"][0]["accepted"] is True
    assert len(await tls_relay.sources(inbox)) == 1


@sqlite_only
async def test_an_unverified_relay_certificate_fails_the_release(start: Start, tls_relay: Relay) -> None:
    """The system's store does not know the test CA: the release fails rather than go out unverified."""
    inbox = await tls_relay.mailbox("me")
    default = await start(**relayed(tls_relay, relay_tls="starttls"))
    address, message_id = await caught(default)
    response = await release(default, address, message_id, [inbox])
    assert response.status_code == 502
    assert "certificate" in response.json()["message"].lower()
    assert await tls_relay.sources(inbox) == []


async def test_a_captured_message_is_released_from_the_sandbox(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    token = await h.new_user("pro")
    info = (await h.http.get("/api/user/sandbox", headers=h.auth(token))).json()

    def send() -> None:
        with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
            smtp.login(info["username"], token)
            smtp.send_message(simple_message(subject="Outgoing"), to_addrs=["customer@example.org"])

    await asyncio.to_thread(send)
    listed = (await h.http.get("/api/user/sandbox/messages", headers=h.auth(token))).json()
    message_id = listed["messages"][0]["id"]

    response = await h.http.post(
        f"/api/user/sandbox/messages/{message_id}/release", json={"to": [inbox]}, headers=h.auth(token)
    )

    assert response.status_code == 200, response.text
    assert response.json()["recipients"][0]["accepted"] is True
    [arrived] = await relay.sources(inbox)
    assert BytesParser(policy=compat32).parsebytes(arrived)["Subject"] == "Outgoing"
    history = (await h.http.get(f"/api/user/sandbox/messages/{message_id}/releases", headers=h.auth(token))).json()
    assert [r["id"] for r in history["releases"]] == [response.json()["id"]]
    # Another user's release of this message finds nothing.
    other = await h.new_user("pro")
    response = await h.http.post(
        f"/api/user/sandbox/messages/{message_id}/release", json={"to": [inbox]}, headers=h.auth(other)
    )
    assert response.status_code == 404


@sqlite_only
async def test_the_clients_release_and_list_releases(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    address, message_id = await caught(h)
    base = str(h.http.base_url)

    async with AsyncClient(base, h.admin_token) as client:
        done = await client.release(address, message_id, [inbox, f"nobody@{RELAY_DOMAIN}"])
        assert [(r["address"], r["accepted"]) for r in done["recipients"]] == [
            (inbox, True),
            (f"nobody@{RELAY_DOMAIN}", False),
        ]
        assert (await client.releases(address, message_id))["releases"] == [done]
        with pytest.raises(ApiError) as refused:
            await client.release(address, message_id, ["someone@example.org"])
        assert (refused.value.status, refused.value.code) == (403, "recipient_not_allowed")

    def sync() -> Json:
        with Client(base, h.admin_token) as client:
            client.release(address, message_id, [inbox])
            return client.releases(address, message_id)

    assert len((await asyncio.to_thread(sync))["releases"]) == 2
    assert len(await relay.sources(inbox)) == 2


@sqlite_only
async def test_the_clients_release_a_captured_message(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    token = await h.new_user("pro")
    info = (await h.http.get("/api/user/sandbox", headers=h.auth(token))).json()

    def send_and_release() -> tuple[Json, Json]:
        with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
            smtp.login(info["username"], token)
            smtp.send_message(simple_message(subject="Outgoing"), to_addrs=["customer@example.org"])
        with Client(str(h.http.base_url), token) as client:
            captured = client.sandbox_messages()[0]
            return client.release_sandbox_message(captured.id, [inbox]), client.sandbox_releases(captured.id)

    done, history = await asyncio.to_thread(send_and_release)
    assert done["recipients"][0]["accepted"] is True
    assert history["releases"] == [done]

    async with AsyncClient(str(h.http.base_url), token) as client:
        captured = (await client.sandbox_messages())[0]
        again = await client.release_sandbox_message(captured.id, [inbox])
        assert [r["id"] for r in (await client.sandbox_releases(captured.id))["releases"]] == [again["id"], done["id"]]


@sqlite_only
async def test_a_hostile_stored_message_cannot_smuggle_a_second_one(start: Start, relay: Relay) -> None:
    """A stored line holding a lone dot, then SMTP commands: sent on as part of the one message."""
    inbox, other = await relay.mailbox("me"), await relay.mailbox("other")
    h = await start(**relayed(relay))
    box = await h.new_mailbox()
    smuggled = (
        f"From: a@example.org\r\nTo: {box['address']}\r\nSubject: Outer\r\n\r\nbefore\r\n.\r\n"
        f"MAIL FROM:<evil@example.org>\r\nRCPT TO:<{other}>\r\nDATA\r\nSubject: Smuggled\r\n\r\nx\r\n.\r\nafter\r\n"
    ).encode()
    await h.send(box["address"], smuggled)  # smtplib stuffs the dot; inboxd stores the lone "." line
    listed = (await h.http.get(f"/api/accounts/{box['address']}/messages", headers=h.auth())).json()
    message_id = listed["messages"][0]["id"]
    source = f"/api/accounts/{box['address']}/messages/{message_id}/source"
    stored = (await h.http.get(source, headers=h.auth())).content
    assert b"\r\n.\r\nMAIL FROM:<evil@example.org>" in stored

    response = await release(h, box["address"], message_id, [inbox])

    assert response.status_code == 200, response.text
    assert await relay.sources(other) == []
    [arrived] = await relay.sources(inbox)
    assert arrived.endswith(stored)


@sqlite_only
async def test_release_authenticates_at_the_relay(
    start: Start, tmp_path: Path, sqlite_template: Path, clock: Clock
) -> None:
    """The relay is the second inboxd's submission listener (SMTP AUTH, a sandbox's credentials)."""
    settings = _relay_settings(tmp_path, sqlite_template, submission_allow_plaintext_auth=True)
    relay = Inboxd(settings, clock=clock)
    await relay.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{relay.http_port}", timeout=30) as http:
            user = await relay.services.users.create_user("ops@example.test", plan="pro")
            token = (await relay.services.users.create_token(user, "relay")).value
            auth = {"Authorization": f"Bearer {token}"}
            info = (await http.get("/api/user/sandbox", headers=auth)).json()
            h = await start(
                relay_host="127.0.0.1",
                relay_port=info["smtp_port"],
                relay_tls="none",
                relay_allow=["example.com"],
                relay_sender=RELAY_SENDER,
                relay_username=info["username"],
                relay_password=token,
            )
            address, message_id = await caught(h, subject="Through AUTH")

            response = await release(h, address, message_id, ["me@example.com"])

            assert response.status_code == 200, response.text
            assert response.json()["recipients"][0]["accepted"] is True
            captured = (await http.get("/api/user/sandbox/messages", headers=auth)).json()["messages"]
            assert [(m["subject"], m["recipients"]) for m in captured] == [("Through AUTH", ["me@example.com"])]
    finally:
        await relay.stop()


@sqlite_only
async def test_a_wrong_relay_password_is_a_502(
    start: Start, tmp_path: Path, sqlite_template: Path, clock: Clock
) -> None:
    settings = _relay_settings(tmp_path, sqlite_template, submission_allow_plaintext_auth=True)
    relay = Inboxd(settings, clock=clock)
    await relay.start()
    try:
        user = await relay.services.users.create_user("ops@example.test", plan="pro")
        info = await relay.services.sandboxes.info(user)
        h = await start(
            relay_host="127.0.0.1",
            relay_port=relay.submission_port,
            relay_tls="none",
            relay_allow=["example.com"],
            relay_sender=RELAY_SENDER,
            relay_username=info.sandbox.username,
            relay_password="ibx_wrong",
        )
        address, message_id = await caught(h)

        response = await release(h, address, message_id, ["me@example.com"])

        assert response.status_code == 502
        assert response.json()["error"] == "relay_error" and "535" in response.json()["message"]
    finally:
        await relay.stop()


def test_relay_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "relay-password"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("INBOXD_RELAY_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("INBOXD_RELAY_ALLOW", "Example.COM, QA@example.org ")
    monkeypatch.setenv("INBOXD_RELAY_TLS", "tls")
    monkeypatch.setenv("INBOXD_RELAY_CA_FILE", "/etc/ssl/ca.pem")
    monkeypatch.setenv("INBOXD_RELAY_SENDER", RELAY_SENDER)

    settings = load_settings()

    assert settings.relay_password == "s3cret"
    assert settings.relay_allow == ["example.com", "qa@example.org"]
    assert settings.relay_tls == "tls" and settings.relay_ca_file == "/etc/ssl/ca.pem"
    monkeypatch.setenv("INBOXD_RELAY_TLS", "ssl")
    with pytest.raises(SettingsError, match="INBOXD_RELAY_TLS"):
        load_settings()
    # Releases on (a host and an allow list) without the address they are sent from: no start.
    monkeypatch.setenv("INBOXD_RELAY_TLS", "tls")
    monkeypatch.setenv("INBOXD_RELAY_HOST", "smtp.example.com")
    monkeypatch.delenv("INBOXD_RELAY_SENDER")
    with pytest.raises(SettingsError, match="INBOXD_RELAY_SENDER"):
        load_settings()
    monkeypatch.setenv("INBOXD_RELAY_SENDER", "Ops <ops@example.com>")
    with pytest.raises(SettingsError, match="INBOXD_RELAY_SENDER"):
        load_settings()


@sqlite_only
async def test_implicit_tls_to_a_relay(
    start: Start, tmp_path: Path, sqlite_template: Path, clock: Clock, certs: Certs
) -> None:
    """`INBOXD_RELAY_TLS=tls`: the second inboxd's implicit-TLS submission port, verified, with AUTH."""
    settings = _relay_settings(
        tmp_path, sqlite_template, tls_cert=str(certs.cert), tls_key=str(certs.key), submissions_port=0
    )
    relay = Inboxd(settings, clock=clock)
    await relay.start()
    try:
        user = await relay.services.users.create_user("ops@example.test", plan="pro")
        token = (await relay.services.users.create_token(user, "relay")).value
        info = await relay.services.sandboxes.info(user)
        assert relay.submissions_port
        h = await start(
            relay_host="127.0.0.1",
            relay_port=relay.submissions_port,
            relay_tls="tls",
            relay_ca_file=str(certs.ca),
            relay_allow=["example.com"],
            relay_sender=RELAY_SENDER,
            relay_username=info.sandbox.username,
            relay_password=token,
        )
        address, message_id = await caught(h, subject="Over TLS")

        response = await release(h, address, message_id, ["me@example.com"])

        assert response.status_code == 200, response.text
        assert response.json()["recipients"][0]["accepted"] is True
        captured = await relay.services.sandboxes.page(user, 1, NO_FILTER)
        assert [m.summary.subject for m in captured] == ["Over TLS"]
    finally:
        await relay.stop()


# Release under the operator's name (issue 34) -----------------------------------------------------
# Only Pro users and admins release; the envelope sender is INBOXD_RELAY_SENDER whatever the From
# says (the relay inboxd stores the MAIL FROM it was given as `sender`); the copy carries Resent-*
# (RFC 5322 §3.6.6); `%` and `!` are refused in local parts; a failure names the setting to change.


@sqlite_only
async def test_a_forged_from_never_becomes_the_envelope_sender(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    box = await h.new_mailbox()
    forged = simple_message(subject="Pay now", sender="ceo@bank.example")
    await h.send(box["address"], forged)
    listed = (await h.http.get(f"/api/accounts/{box['address']}/messages", headers=h.auth())).json()
    message_id = listed["messages"][0]["id"]

    response = await release(h, box["address"], message_id, [inbox])

    assert response.status_code == 200, response.text
    release_id = response.json()["id"]
    auth = {"Authorization": f"Bearer {relay.token}"}
    [arrived] = (await relay.http.get(f"/api/accounts/{inbox}/messages", headers=auth)).json()["messages"]
    assert arrived["sender"] == RELAY_SENDER  # MAIL FROM as the relay received it
    [raw] = await relay.sources(inbox)
    headers = BytesParser(policy=compat32).parsebytes(raw, headersonly=True)
    assert headers["From"] == "Alice <ceo@bank.example>"  # left as written, shown as resent
    assert headers["Resent-From"] == f"<{RELAY_SENDER}>"
    assert headers["Resent-To"] == inbox
    assert headers["Resent-Message-ID"] == f"<{release_id}@{h.server.settings.resolved_smtp_hostname}>"
    assert parsedate_to_datetime(headers["Resent-Date"]).timestamp() == pytest.approx(h.clock(), abs=5)
    # The resent block sits above the original fields, under the release's Received: line.
    names = [name.lower() for name in headers]
    assert names.index("resent-from") < names.index("from") and names.index("received") < names.index("resent-date")


@sqlite_only
async def test_several_recipients_are_one_resent_to(start: Start, relay: Relay) -> None:
    one, two = await relay.mailbox("one"), await relay.mailbox("two")
    h = await start(**relayed(relay))
    address, message_id = await caught(h)
    assert (await release(h, address, message_id, [one, two])).status_code == 200
    [raw] = await relay.sources(two)
    value = BytesParser(policy=compat32).parsebytes(raw, headersonly=True)["Resent-To"]
    assert [a.strip() for a in value.replace("\r\n", "").split(",")] == [one, two]


@sqlite_only
async def test_only_pro_users_and_admins_release(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    free = await h.new_user("free")
    box = await h.new_mailbox(free)
    await h.send(box["address"])
    listed = (await h.http.get(f"/api/accounts/{box['address']}/messages", headers=h.auth(free))).json()

    refused = await release(h, box["address"], listed["messages"][0]["id"], [inbox], free)

    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == "pro_required" and "Pro" in refused.json()["message"]
    # A free admin may (the operator's own); so may a Pro user.
    admin = await h.server.services.users.create_user("ops@example.test", plan="free", role="admin")
    admin_token = (await h.server.services.users.create_token(admin, "ops")).value
    for token in (admin_token, await h.new_user("pro")):
        mine = await h.new_mailbox(token)
        await h.send(mine["address"])
        got = (await h.http.get(f"/api/accounts/{mine['address']}/messages", headers=h.auth(token))).json()
        assert (await release(h, mine["address"], got["messages"][0]["id"], [inbox], token)).status_code == 200
    assert len(await relay.sources(inbox)) == 2


@sqlite_only
async def test_percent_and_bang_are_refused_in_local_parts(start: Start, relay: Relay) -> None:
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay))
    address, message_id = await caught(h)
    for routed in (f"victim%evil.example@{RELAY_DOMAIN}", f"evil.example!victim@{RELAY_DOMAIN}"):
        response = await release(h, address, message_id, [inbox, routed])
        assert response.status_code == 400, routed
        body = response.json()
        assert body["error"] == "invalid_request" and routed in body["message"]
        assert "`%` and `!`" in body["message"]
    assert await relay.sources(inbox) == []


@sqlite_only
@pytest.mark.parametrize("mode", ["starttls", "tls"])
async def test_a_tls_failure_against_a_local_relay_names_the_setting(start: Start, relay: Relay, mode: str) -> None:
    """The relay on 127.0.0.1 speaks plain SMTP: STARTTLS (not offered) and implicit TLS both fail,
    and the error says to set INBOXD_RELAY_TLS=none."""
    inbox = await relay.mailbox("me")
    h = await start(**relayed(relay, relay_tls=mode, relay_timeout=5.0))
    address, message_id = await caught(h)

    response = await release(h, address, message_id, [inbox])

    assert response.status_code == 502, response.text
    body = response.json()
    assert body["error"] == "relay_error" and "INBOXD_RELAY_TLS=none" in body["message"], body
    assert await relay.sources(inbox) == []


@sqlite_only
async def test_a_refused_connection_names_host_and_port(start: Start, relay: Relay) -> None:
    h = await start(**relayed(relay, relay_port=free_port()))
    address, message_id = await caught(h)
    response = await release(h, address, message_id, [f"me@{RELAY_DOMAIN}"])
    assert response.status_code == 502
    assert "INBOXD_RELAY_HOST and INBOXD_RELAY_PORT" in response.json()["message"]
