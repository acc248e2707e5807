"""SMTP reception over real sockets: replies, limits, smuggling, malformed input, durability."""

from __future__ import annotations

import asyncio
import contextlib
import smtplib
import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.conftest import Harness, simple_message

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)


class RawSmtp:
    """A bare SMTP client over a socket, for what smtplib will not send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, *, source: str | None = None) -> RawSmtp:
        local = None if source is None else (source, 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20, local_addr=local)
        client = cls(reader, writer)
        assert (await client.reply()).startswith("220 ")
        return client

    async def reply(self) -> str:
        lines = []
        while True:
            line = (await asyncio.wait_for(self.reader.readline(), 30)).decode()
            lines.append(line.rstrip("\r\n"))
            if len(line) < 4 or line[3] != "-":
                return "\n".join(lines)

    async def cmd(self, text: str | bytes) -> str:
        self.writer.write(text if isinstance(text, bytes) else text.encode() + b"\r\n")
        await self.writer.drain()
        return await self.reply()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def messages_of(harness: Harness, box: dict[str, Any]) -> list[dict[str, Any]]:
    response = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    result: list[dict[str, Any]] = response.json()["messages"]
    return result


async def test_ehlo_offers(harness: Harness) -> None:
    client = await RawSmtp.connect(harness.server.smtp_port)
    reply = await client.cmd("EHLO client.test")
    for ext in ("SIZE 26214400", "8BITMIME", "SMTPUTF8", "PIPELINING", "ENHANCEDSTATUSCODES"):
        assert ext in reply
    assert "STARTTLS" not in reply
    assert (await client.cmd("QUIT")).startswith("221")
    await client.close()


async def test_committed_before_250(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    # No waiting: the 250 means the message is already durable and listed.
    assert len(await messages_of(harness, box)) == 1


async def test_stored_messages_take_time_ordered_ids(harness: Harness) -> None:
    """Message ids are version 7 UUIDs of their arrival's millisecond (the store's keys then grow
    at one end), and still UUIDs as the contract says."""
    box = await harness.new_mailbox()
    for _ in range(3):
        await harness.send(box["address"])
    listed = await messages_of(harness, box)
    assert len(listed) == 3
    for message in listed:
        parsed = uuid.UUID(message["id"])
        assert parsed.version == 7
        arrived = datetime.fromisoformat(message["created_at"].replace("Z", "+00:00"))
        # (within a millisecond: `created_at` is written out to the millisecond)
        assert abs((parsed.int >> 80) - arrived.timestamp() * 1000) <= 1


async def test_unknown_recipient_and_relay(harness: Harness) -> None:
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    assert (await client.cmd("MAIL FROM:<a@example.org>")).startswith("250")
    assert (await client.cmd("RCPT TO:<nobody@inboxd.localhost>")).startswith("550 5.1.1")
    assert (await client.cmd("RCPT TO:<someone@gmail.com>")).startswith("550 5.7.1")
    assert (await client.cmd("DATA")).startswith("503")
    await client.close()


async def test_plus_addressing_and_multiple_recipients(harness: Harness) -> None:
    a = await harness.new_mailbox(local="alpha")
    b = await harness.new_mailbox(local="beta")
    refused = await harness.send([f"alpha+signup@{harness.domain}", b["address"], a["address"]])
    assert refused == {}
    assert len(await messages_of(harness, a)) == 1  # one copy although named twice
    assert len(await messages_of(harness, b)) == 1
    plus = await harness.new_mailbox(local="gamma+x")
    await harness.send(f"gamma+x@{harness.domain}")
    assert len(await messages_of(harness, plus)) == 1


async def test_null_sender(harness: Harness) -> None:
    box = await harness.new_mailbox()
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    assert (await client.cmd("MAIL FROM:<>")).startswith("250")
    assert (await client.cmd(f"RCPT TO:<{box['address']}>")).startswith("250")
    assert (await client.cmd("DATA")).startswith("354")
    assert (await client.cmd(b"Subject: bounce\r\n\r\nbody\r\n.\r\n")).startswith("250")
    await client.close()
    [item] = await messages_of(harness, box)
    assert item["sender"] == ""


@pytest.mark.parametrize("ending", [b"\n.\n", b"\n.\r\n", b"\r.\r\n", b"\r\n.\n"])
async def test_smuggling_endings_never_end_data(harness: Harness, ending: bytes) -> None:
    box = await harness.new_mailbox()
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    await client.cmd("MAIL FROM:<a@example.org>")
    await client.cmd(f"RCPT TO:<{box['address']}>")
    assert (await client.cmd("DATA")).startswith("354")
    smuggled = b"MAIL FROM:<evil@example.org>\r\nRCPT TO:<" + box["address"].encode() + b">\r\nDATA\r\n"
    client.writer.write(b"Subject: first\r\n\r\nhello" + ending + smuggled + b"Subject: smuggled\r\n\r\nx\r\n.\r\n")
    await client.writer.drain()
    assert (await client.reply()).startswith("250")
    assert (await client.cmd("QUIT")).startswith("221")
    await client.close()
    items = await messages_of(harness, box)
    assert len(items) == 1 and items[0]["subject"] == "first"


async def test_dot_stuffing(harness: Harness) -> None:
    box = await harness.new_mailbox()
    msg = simple_message(body=".leading dot\n..two dots\n.\nend")
    await harness.send(box["address"], msg)
    [item] = await messages_of(harness, box)
    source = await harness.http.get(f"/api/accounts/{box['id']}/messages/{item['id']}/source", headers=harness.auth())
    assert b"\r\n.leading dot\r\n..two dots\r\n.\r\nend" in source.content


async def test_size_limit(make_settings: Any, clock: Any) -> None:
    from inboxd.app import Inboxd

    async with Inboxd(make_settings(max_message_size=100_000), clock=clock) as server:
        client = await RawSmtp.connect(server.smtp_port)
        reply = await client.cmd("EHLO c")
        assert "SIZE 100000" in reply
        assert (await client.cmd("MAIL FROM:<a@example.org> SIZE=200000")).startswith("552 5.3.4")
        await client.close()
        token = server.bootstrap_token
        assert token is not None
        import httpx

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            box = (
                await http.post(
                    "/api/accounts",
                    json={"address": "big@inboxd.localhost", "password": "secret123"},
                    headers={"Authorization": f"Bearer {token}"},
                )
            ).json()
        client = await RawSmtp.connect(server.smtp_port)
        await client.cmd("EHLO c")
        await client.cmd("MAIL FROM:<a@example.org>")
        await client.cmd(f"RCPT TO:<{box['address']}>")
        await client.cmd("DATA")
        line = b"x" * 998 + b"\r\n"
        for _ in range(1000):  # ~1 MB, ten times the limit
            client.writer.write(line)
        client.writer.write(b".\r\n")
        await client.writer.drain()
        assert (await client.reply()).startswith("552 5.3.4")
        # The session goes on.
        assert (await client.cmd("NOOP")).startswith("250")
        await client.close()


async def test_huge_line_without_crlf(harness: Harness) -> None:
    client = await RawSmtp.connect(harness.server.smtp_port)
    chunk = b"A" * (1 << 20)
    for _ in range(100):  # 100 MB, never a line end
        client.writer.write(chunk)
        await client.writer.drain()
    client.writer.write(b"\r\n")
    await client.writer.drain()
    assert (await client.reply()).startswith("500 5.5.2")
    assert (await client.cmd("EHLO c")).startswith("250")
    await client.close()
    assert (await harness.http.get("/healthz")).status_code == 200


@pytest.mark.parametrize(
    "command", [b"MAIL FROM:<a\x00b@example.org>\r\n", b"MAIL FROM:<a\rb@example.org>\r\n", b"RCPT TO:<x\x00@y>\r\n"]
)
async def test_nul_and_cr_in_commands(harness: Harness, command: bytes) -> None:
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    if command.startswith(b"RCPT"):
        await client.cmd("MAIL FROM:<a@example.org>")
    assert (await client.cmd(command)).startswith("501")
    assert (await client.cmd("NOOP")).startswith("250")
    await client.close()


@pytest.mark.parametrize(
    "recipient", [b"m1\xff@inboxd.localhost", b"\xed\xa0\x80@inboxd.localhost", b"a@\xff", b"\xc3@inboxd.localhost"]
)
async def test_recipient_that_is_not_utf8_is_refused_for_good(harness: Harness, recipient: bytes) -> None:
    # A permanent 501, not a 451 the sender would retry for days.
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    await client.cmd("MAIL FROM:<a@example.org>")
    assert (await client.cmd(b"RCPT TO:<" + recipient + b">\r\n")).startswith("501 5.1.3")
    assert (await client.cmd("NOOP")).startswith("250")
    await client.close()


async def test_command_sequence_errors(harness: Harness) -> None:
    client = await RawSmtp.connect(harness.server.smtp_port)
    assert (await client.cmd("MAIL FROM:<a@example.org>")).startswith("503")
    await client.cmd("EHLO c")
    assert (await client.cmd("RCPT TO:<a@inboxd.localhost>")).startswith("503")
    assert (await client.cmd("DATA")).startswith("503")
    assert (await client.cmd("MAIL FROM:a@example.org")).startswith("501")
    assert (await client.cmd("FOO")).startswith("500")
    assert (await client.cmd("AUTH PLAIN x")).startswith("502")
    assert (await client.cmd("VRFY x")).startswith("252")
    assert (await client.cmd("MAIL FROM:<a@example.org> XYZ=1")).startswith("555")
    await client.close()


async def test_pipelining(harness: Harness) -> None:
    box = await harness.new_mailbox()
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    client.writer.write(
        f"MAIL FROM:<a@example.org>\r\nRCPT TO:<{box['address']}>\r\nRCPT TO:<no@inboxd.localhost>\r\nDATA\r\n".encode()
    )
    await client.writer.drain()
    replies = [await client.reply() for _ in range(4)]
    assert [r[:3] for r in replies] == ["250", "250", "550", "354"]
    assert (await client.cmd(b"Subject: p\r\n\r\nx\r\n.\r\n")).startswith("250")
    await client.close()
    assert len(await messages_of(harness, box)) == 1


async def test_mailbox_full(make_settings: Any, clock: Any) -> None:
    from inboxd.app import Inboxd

    async with Inboxd(make_settings(pro_mailbox_quota=3000), clock=clock) as server:
        import httpx

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            box = (
                await http.post(
                    "/api/accounts",
                    json={"address": "small@inboxd.localhost", "password": "secret123"},
                    headers={"Authorization": f"Bearer {server.bootstrap_token}"},
                )
            ).json()
        from tests.conftest import send_mail

        big = simple_message(body="y" * 2000)
        await asyncio.to_thread(send_mail, server.smtp_port, box["address"], big)
        # smtplib declares SIZE, so the refusal comes at RCPT for that recipient.
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await asyncio.to_thread(send_mail, server.smtp_port, box["address"], big)
        code, text = refused.value.recipients[box["address"]]
        assert code == 552 and b"5.2.2" in text
        # Without SIZE, the DATA reply refuses it.
        client = await RawSmtp.connect(server.smtp_port)
        await client.cmd("EHLO c")
        await client.cmd("MAIL FROM:<a@example.org>")
        assert (await client.cmd(f"RCPT TO:<{box['address']}>")).startswith("250")
        await client.cmd("DATA")
        assert (await client.cmd(big.as_bytes().replace(b"\n", b"\r\n") + b"\r\n.\r\n")).startswith("552 5.2.2")
        await client.close()


async def test_concurrent_sessions_all_stored(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await asyncio.gather(*(harness.send(box["address"], simple_message(subject=f"c{i}")) for i in range(40)))
    total = 0
    page = 1
    while True:
        response = await harness.http.get(
            f"/api/accounts/{box['id']}/messages", params={"page": page}, headers=harness.auth()
        )
        total += len(response.json()["messages"])
        if len(response.json()["messages"]) < 30:
            break
        page += 1
    assert total == 40


async def test_too_many_recipients(harness: Harness) -> None:
    box = await harness.new_mailbox()
    client = await RawSmtp.connect(harness.server.smtp_port)
    await client.cmd("EHLO c")
    await client.cmd("MAIL FROM:<a@example.org>")
    boxes = [box] + [await harness.new_mailbox() for _ in range(100)]
    codes = [(await client.cmd(f"RCPT TO:<{b['address']}>"))[:3] for b in boxes]
    assert codes[:100] == ["250"] * 100 and codes[100] == "452"
    await client.close()


async def test_starttls(make_settings: Any, clock: Any, tmp_path: Any) -> None:
    import ssl

    import trustme

    from inboxd.app import Inboxd
    from tests.conftest import send_mail

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    settings = make_settings(smtp_tls_cert=str(cert_file), smtp_tls_key=str(key_file))
    async with Inboxd(settings, clock=clock) as server:
        import httpx

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            box = (
                await http.post(
                    "/api/accounts",
                    json={"address": "tls@inboxd.localhost", "password": "secret123"},
                    headers={"Authorization": f"Bearer {server.bootstrap_token}"},
                )
            ).json()
        context = ssl.create_default_context()
        ca.configure_trust(context)

        def send_tls() -> str:
            with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as client:
                client.ehlo()
                assert client.has_extn("starttls")
                client.starttls(context=context)
                client.ehlo()
                assert not client.has_extn("starttls")
                client.sendmail("a@example.org", [box["address"]], simple_message().as_bytes())
            return "sent"

        assert await asyncio.to_thread(send_tls) == "sent"
        assert await asyncio.to_thread(send_mail, server.smtp_port, box["address"]) == {}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            listing = await http.get(
                f"/api/accounts/{box['id']}/messages", headers={"Authorization": f"Bearer {server.bootstrap_token}"}
            )
            messages = listing.json()["messages"]
            assert len(messages) == 2
            source = await http.get(
                f"/api/accounts/{box['id']}/messages/{messages[1]['id']}/source",
                headers={"Authorization": f"Bearer {server.bootstrap_token}"},
            )
            assert b"with ESMTPS" in source.content.split(b"\r\n\r\n")[0]


class RecordingTransport:
    """The client's side of the socket, recording each write the session makes (one send each)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.written: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.written.put_nowait(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


async def test_pipelined_commands_get_their_replies_in_one_write(harness: Harness) -> None:
    from inboxd.smtp.session import Session

    box = await harness.new_mailbox()
    await harness.send(box["address"])  # the mailbox is known: RCPT answers without waiting
    smtp = harness.server._smtp
    assert smtp is not None
    session = Session(smtp)
    transport = RecordingTransport()
    session.connection_made(transport)  # type: ignore[arg-type]
    session.data_received(b"EHLO client\r\n")
    transport.writes.clear()
    session.data_received(f"MAIL FROM:<a@example.org>\r\nRCPT TO:<{box['address']}>\r\nDATA\r\n".encode())
    assert len(transport.writes) == 1
    assert [line[:3] for line in transport.writes[0].split(b"\r\n")[:-1]] == [b"250", b"250", b"354"]
    # The 250 after DATA goes out with the replies to what was pipelined behind the message.
    transport.written = asyncio.Queue()
    session.data_received(b"Subject: s\r\n\r\nbody\r\n.\r\nRSET\r\nNOOP\r\n")
    await asyncio.wait_for(transport.written.get(), 10)  # once the commit is done
    assert len(transport.writes) == 2
    assert [line[:3] for line in transport.writes[1].split(b"\r\n")[:-1]] == [b"250", b"250", b"250"]
    session.connection_lost(None)


async def test_received_header_follows_helo_and_ehlo_within_one_session(harness: Harness) -> None:
    """The `Received:` header's start is written once per session, and again when HELO or EHLO
    changes what it says."""
    box = await harness.new_mailbox()

    def send_three() -> None:
        with smtplib.SMTP("127.0.0.1", harness.server.smtp_port, timeout=30) as client:
            for greet, name in ((client.helo, "first.example"), (client.ehlo, "second.example")) * 2:
                greet(name)
                client.sendmail("a@example.org", [box["address"]], simple_message(subject=name).as_bytes())

    await asyncio.to_thread(send_three)
    listing = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    heads = []
    for item in listing.json()["messages"]:
        source = await harness.http.get(
            f"/api/accounts/{box['id']}/messages/{item['id']}/source", headers=harness.auth()
        )
        head = source.content.split(b"\r\n\tby ", 1)[0] + b" " + source.content.split(b"(inboxd) with ", 1)[1][:6]
        heads.append((item["subject"], head))
    assert sorted(heads) == [
        ("first.example", b"Received: from first.example ([127.0.0.1]) SMTP i"),
        ("first.example", b"Received: from first.example ([127.0.0.1]) SMTP i"),
        ("second.example", b"Received: from second.example ([127.0.0.1]) ESMTP "),
        ("second.example", b"Received: from second.example ([127.0.0.1]) ESMTP "),
    ]
