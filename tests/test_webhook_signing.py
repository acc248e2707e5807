"""Webhook signatures, the receiver's `verify` helper, URL checks and the address classifier."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import shlex
import subprocess
from pathlib import Path

import pytest

from inboxd.errors import InvalidRequest
from inboxd.netguard import AddressRefused, ResolutionFailed, ip_literal, is_blocked, resolve_checked
from inboxd.services.webhooks import check_events, check_url, new_secret
from inboxd.webhooks import VerificationError, sign, verify

KNOWN_SECRET = "It's a Secret to Everybody"
KNOWN_HEX = "76c83fd0acdf22faed320674fe8e04d528cfe8a17905e720a9611e40677c03b7"


def test_known_answer() -> None:
    assert sign(KNOWN_SECRET, 1700000000, b"Hello, World!") == f"sha256={KNOWN_HEX}"
    assert sign(KNOWN_SECRET, "1700000000", b"Hello, World!") == f"sha256={KNOWN_HEX}"
    # The definition, spelled out: key = the secret as UTF-8, message = timestamp "." body.
    digest = hmac.new(KNOWN_SECRET.encode(), b"1700000000.Hello, World!", hashlib.sha256).hexdigest()
    assert digest == KNOWN_HEX


def _headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "X-Webhook-ID": "evt_1",
        "X-Webhook-Timestamp": str(timestamp),
        "X-Webhook-Signature": sign(secret, timestamp, body),
    }


def test_verify_accepts_a_genuine_call_and_returns_the_event_id() -> None:
    body = b'{"id":"evt_1"}'
    headers = _headers("whsec_abc", 1700000000, body)
    assert verify("whsec_abc", headers, body, now=1700000100) == "evt_1"
    # Header names match case-insensitively, as they do on the wire.
    lowered = {k.lower(): v for k, v in headers.items()}
    assert verify("whsec_abc", lowered, body, now=1700000000) == "evt_1"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"secret": "whsec_other"}, "signature mismatch"),
        ({"body": b'{"id":"evt_2"}'}, "signature mismatch"),
        ({"now": 1700000301}, "tolerance"),
        ({"now": 1699999699}, "tolerance"),
        ({"drop": "X-Webhook-Signature"}, "missing header"),
        ({"drop": "X-Webhook-Timestamp"}, "missing header"),
        ({"timestamp": "17e8"}, "malformed"),
    ],
)
def test_verify_rejects(change: dict[str, object], reason: str) -> None:
    body = b'{"id":"evt_1"}'
    headers = _headers("whsec_abc", 1700000000, body)
    if "drop" in change:
        del headers[str(change["drop"])]
    if "timestamp" in change:
        headers["X-Webhook-Timestamp"] = str(change["timestamp"])
    secret = str(change.get("secret", "whsec_abc"))
    sent = change.get("body", body)
    assert isinstance(sent, bytes)
    now = change.get("now", 1700000000)
    assert isinstance(now, int)
    with pytest.raises(VerificationError, match=reason):
        verify(secret, headers, sent, now=now)


def test_verify_tolerance_is_configurable() -> None:
    body = b"{}"
    headers = _headers("whsec_abc", 1700000000, body)
    assert verify("whsec_abc", headers, body, tolerance=3600, now=1700003000) == "evt_1"
    assert verify("whsec_abc", headers, body, tolerance=0, now=1900000000) == "evt_1"


def test_new_secret_shape() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert new_secret() != secret


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",
        "ftp://example.com/hook",
        "/relative/hook",
        "example.com/hook",
        "https://",
        "https:///path",
        "https://user:pw@example.com/",
        "https://exa mple.com/",
        "https://example.com:99999/",
        "https://example.com/" + "a" * 2030,
        "",
    ],
)
def test_invalid_urls(url: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_url(url)
    assert caught.value.code == "invalid_url"


def test_valid_urls() -> None:
    longest = "https://example.com/" + "a" * (2048 - len("https://example.com/"))
    for url in ("https://example.com/hooks/mail?x=1", "HTTPS://Example.com", "https://[2001:db8::1]:8443/", longest):
        assert check_url(url) == url


def test_events() -> None:
    assert check_events(["email.received", "email.received"]) == ("email.received",)
    for bad in ([], ["email.sent"], ["email.received", "nope"]):
        with pytest.raises(InvalidRequest) as caught:
            check_events(bad)
        assert caught.value.code == "invalid_request"


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("::ffff:7f00:1", "::ffff:7f00:1"),
        ("[::1]", "::1"),
        ("0", "0.0.0.0"),
        ("10.1", "10.0.0.1"),
    ],
)
def test_ip_literal_notations(host: str, address: str) -> None:
    assert ip_literal(host) == ipaddress.ip_address(address)
    assert is_blocked(ipaddress.ip_address(address))


@pytest.mark.parametrize("host", ["example.com", "cafe.be", "deadbeef", "1.2.3.4.5", "0x", "a.b", "[::g]", ""])
def test_not_ip_literals(host: str) -> None:
    assert ip_literal(host) is None


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.255.254",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # shared address space
        "100.127.255.254",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.2.1",
        "198.18.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "fec0::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:c0a8:101::",  # 6to4 of 192.168.1.1
        "2002:6440:1::",  # 6to4 of 100.64.0.1
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::a00:1",  # local-use NAT64
        "2001:db8::1",
        "::127.0.0.1",  # IPv4-compatible (deprecated)
    ],
)
def test_blocked_addresses(address: str) -> None:
    assert is_blocked(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses(address: str) -> None:
    assert not is_blocked(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "localhost", "::1"]
)
async def test_resolve_checked_refuses_loopback_in_every_notation(host: str) -> None:
    with pytest.raises(AddressRefused):
        await resolve_checked(host, 443, allow_private=False)


async def test_resolve_checked_allows_private_when_configured() -> None:
    target = await resolve_checked("2130706433", 8443, allow_private=True)
    assert target.addresses == ((2, "127.0.0.1"),)
    target = await resolve_checked("localhost", 8443, allow_private=True)
    assert ("127.0.0.1" in {a for _f, a in target.addresses}) and target.port == 8443


async def test_resolve_checked_reports_dns_failure() -> None:
    with pytest.raises(ResolutionFailed):
        await asyncio.wait_for(resolve_checked("no-such-host.invalid", 443, allow_private=False), 30)


def test_openssl_recipe_of_the_docs_gives_the_known_answer(tmp_path: Path) -> None:
    """The receiver recipe in the README (Webhooks), run as written."""
    (tmp_path / "body.json").write_bytes(b"Hello, World!")
    script = (
        f"secret={shlex.quote(KNOWN_SECRET)}; timestamp=1700000000\n"
        """printf '%s.' "$timestamp" | cat - body.json | openssl dgst -sha256 -hmac "$secret" """
        """| sed 's/^.*= /sha256=/'"""
    )
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"sha256={KNOWN_HEX}"
