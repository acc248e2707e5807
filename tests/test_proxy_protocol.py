"""The PROXY protocol header: the parser's properties (hypothesis), and the SMTP listeners that read
it from trusted proxies only, over real sockets."""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inboxd.app import Inboxd
from inboxd.smtp.proxy_protocol import V1_MAX, V2_SIGNATURE, ProxyHeader, ProxyHeaderError, parse
from tests.conftest import Clock
from tests.test_smtp import RawSmtp

ipv4 = st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1))
ipv6 = st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))
ports = st.integers(0, 65535)
pairs = st.one_of(st.tuples(ipv4, ipv4), st.tuples(ipv6, ipv6))


def v1(source: ipaddress.IPv4Address | ipaddress.IPv6Address, dest: Any, sport: int, dport: int) -> bytes:
    family = "TCP4" if source.version == 4 else "TCP6"
    return f"PROXY {family} {source} {dest} {sport} {dport}\r\n".encode()


def v2(source: Any, dest: Any, sport: int, dport: int, *, tlvs: bytes = b"", command: int = 1) -> bytes:
    family = 0x11 if source.version == 4 else 0x21
    block: bytes = source.packed + dest.packed + struct.pack("!HH", sport, dport) + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(block)) + block


# --- The parser -------------------------------------------------------------------------------


@given(pairs, ports, ports, st.binary(max_size=40))
def test_v1_names_its_source_and_its_length(pair: Any, sport: int, dport: int, after: bytes) -> None:
    header = v1(pair[0], pair[1], sport, dport)
    assert parse(header + after) == ProxyHeader(length=len(header), client=str(pair[0]))


@given(
    pairs,
    ports,
    ports,
    st.binary(max_size=64),
    st.binary(max_size=40),
)
def test_v2_names_its_source_and_skips_tlvs(pair: Any, sport: int, dport: int, tlvs: bytes, after: bytes) -> None:
    header = v2(pair[0], pair[1], sport, dport, tlvs=tlvs)
    assert parse(header + after) == ProxyHeader(length=len(header), client=str(pair[0]))


@given(pairs, ports, ports, st.booleans(), st.data())
def test_every_prefix_asks_for_more(pair: Any, sport: int, dport: int, second: bool, data: st.DataObject) -> None:
    header = (v2 if second else v1)(pair[0], pair[1], sport, dport)
    cut = data.draw(st.integers(0, len(header) - 1))
    assert parse(header[:cut]) is None


@given(
    st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=300).map(lambda tail: b"PROXY " + tail),
        st.binary(max_size=300).map(lambda tail: V2_SIGNATURE + tail),
        st.binary(max_size=300).map(lambda tail: V2_SIGNATURE + b"\x21" + tail),
    )
)
def test_any_bytes_give_a_header_more_or_a_refusal(data: bytes) -> None:
    try:
        found = parse(data)
    except ProxyHeaderError:
        return
    assert found is None or 0 < found.length <= len(data)
    if found is None:
        assert len(data) < V1_MAX or data.startswith(V2_SIGNATURE)


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY TCP4 192.0.2.1 192.0.2.2 +25 25\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 2_5 25\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 025 25\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 65536 25\r\n",
        b"PROXY TCP4 192.0.2.01 192.0.2.2 1 25\r\n",
        b"PROXY TCP4 2001:db8::1 192.0.2.2 1 25\r\n",
        b"PROXY TCP6 192.0.2.1 2001:db8::1 1 25\r\n",
        b"PROXY TCP4  192.0.2.1 192.0.2.2 1 25\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 1 25\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 1\r\n",
        b"PROXY UDP4 192.0.2.1 192.0.2.2 1 25\r\n",
        b"PROXY TCP4 192.0.2.1 192.0.2.2 1 25 " + b"x" * 120 + b"\r\n",
        b"EHLO client.test\r\n",
        b"\r\n\r\n\x00\r\nQUIX\n!\x11\x00\x0c",
    ],
)
def test_malformed_headers_are_refused(line: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse(line)


def test_v2_local_unknown_and_other_transports() -> None:
    a, b = ipaddress.IPv4Address("192.0.2.1"), ipaddress.IPv4Address("192.0.2.2")
    local = v2(a, b, 1, 25, command=0)
    assert parse(local) == ProxyHeader(length=len(local), client=None)
    unspecified = V2_SIGNATURE + b"\x21\x00\x00\x00"
    assert parse(unspecified) == ProxyHeader(length=16, client=None)
    assert parse(b"PROXY UNKNOWN\r\n") == ProxyHeader(length=15, client=None)
    udp = bytearray(v2(a, b, 1, 25))
    udp[13] = 0x12
    with pytest.raises(ProxyHeaderError):
        parse(udp)
    short = V2_SIGNATURE + b"\x21\x11\x00\x04" + b"\x00" * 4
    with pytest.raises(ProxyHeaderError):
        parse(short)
    with pytest.raises(ProxyHeaderError):
        parse(V2_SIGNATURE + b"\x31\x11\x00\x0c" + b"\x00" * 12)  # version 3


# --- The SMTP listeners ------------------------------------------------------------------------


async def proxied(port: int, header: bytes, *, source: str = "127.0.0.1") -> RawSmtp:
    """A connection that sends `header` first, as a proxy does, then waits for the greeting."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(header)
    return RawSmtp(reader, writer)


def header_for(client: str) -> bytes:
    address = ipaddress.ip_address(client)
    family = "TCP4" if address.version == 4 else "TCP6"
    server = "127.0.0.1" if address.version == 4 else "::1"
    return f"PROXY {family} {client} {server} 40000 25\r\n".encode()


@pytest.fixture
async def behind_proxy(make_settings: Any, clock: Clock) -> Any:
    server = Inboxd(make_settings(trusted_proxies=["127.0.0.1/32"], smtp_max_sessions_per_ip=1), clock=clock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_trusted_proxy_names_each_client_and_its_caps_follow(behind_proxy: Inboxd) -> None:
    port = behind_proxy.smtp_port
    a = await proxied(port, header_for("203.0.113.1"))
    b = await proxied(port, v2(ipaddress.ip_address("203.0.113.2"), ipaddress.ip_address("127.0.0.1"), 4, 25))
    assert (await a.reply()).startswith("220 ") and (await b.reply()).startswith("220 ")
    # One session per client here: the same client through the proxy again is refused.
    again = await proxied(port, header_for("203.0.113.1"))
    assert (await again.reply()).startswith("421 4.7.0 Too many connections")
    # IPv6 clients count per /64.
    c = await proxied(port, header_for("2001:db8:5:6::1"))
    assert (await c.reply()).startswith("220 ")
    same_64 = await proxied(port, header_for("2001:db8:5:6:ffff::2"))
    assert (await same_64.reply()).startswith("421 4.7.0 Too many connections")
    for client in (a, b, again, c, same_64):
        await client.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_trusted_peer_without_a_header_is_refused(behind_proxy: Inboxd) -> None:
    client = await proxied(behind_proxy.smtp_port, b"EHLO client.test\r\n")
    assert (await client.reply()).startswith("421 4.7.0 A PROXY protocol header is required")
    assert await client.reader.read() == b""
    await client.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_an_untrusted_peer_cannot_name_a_client(behind_proxy: Inboxd) -> None:
    port = behind_proxy.smtp_port
    first = await proxied(port, b"", source="127.0.0.2")
    assert (await first.reply()).startswith("220 ")
    # Its PROXY line is a command like any other, and names no one: it is still 127.0.0.2.
    assert (await first.cmd(header_for("203.0.113.9").decode().rstrip())).startswith("500 ")
    second = await proxied(port, header_for("203.0.113.9"), source="127.0.0.2")
    assert (await second.reply()).startswith("421 4.7.0 Too many connections")
    await first.close()
    await second.close()


async def test_received_names_the_proxied_client(make_settings: Any, clock: Clock) -> None:
    server = Inboxd(make_settings(trusted_proxies=["127.0.0.1"]), clock=clock)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            address = f"proxied@{server.settings.default_domain}"
            made = await http.post(
                "/api/accounts",
                json={"address": address, "password": "secret123"},
                headers={"Authorization": f"Bearer {server.bootstrap_token}"},
            )
            assert made.status_code == 201, made.text
            box = made.json()
            client = await proxied(server.smtp_port, header_for("198.51.100.23"))
            assert (await client.reply()).startswith("220 ")
            await client.cmd("EHLO client.test")
            await client.cmd("MAIL FROM:<a@example.org>")
            assert (await client.cmd(f"RCPT TO:<{address}>"))[:3] == "250"
            assert (await client.cmd("DATA"))[:3] == "354"
            assert (await client.cmd(b"Subject: hi\r\n\r\nhello\r\n.\r\n"))[:3] == "250"
            await client.close()
            auth = {"Authorization": f"Bearer {box['token']}"}
            listed = (await http.get(f"/api/accounts/{box['id']}/messages", headers=auth)).json()["messages"]
            source = await http.get(f"/api/accounts/{box['id']}/messages/{listed[0]['id']}/source", headers=auth)
            assert "([198.51.100.23])" in source.text.split("\r\n\r\n")[0]
    finally:
        await server.stop()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_proxied_client_is_not_local_to_a_loopback_submission_listener(behind_proxy: Inboxd) -> None:
    port = behind_proxy.submission_port
    local = await proxied(port, b"", source="127.0.0.2")
    assert (await local.reply()).startswith("220 ")
    assert "AUTH PLAIN LOGIN" in await local.cmd("EHLO app")
    remote = await proxied(port, header_for("203.0.113.5"))
    assert (await remote.reply()).startswith("220 ")
    assert "AUTH" not in await remote.cmd("EHLO app")
    assert (await remote.cmd("AUTH PLAIN AHUAcA=="))[:3] == "538"
    for client in (local, remote):
        await client.close()
