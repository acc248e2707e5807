"""The authentication check against the suite's DNS server (tests/dns_server.py): DKIM signatures
made in the test with a key published there pass, a body changed after signing fails; SPF pass,
fail and softfail from published records; DMARC alignment; the Authentication-Results header."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import SMTP

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from inboxd.services.checks.auth import AuthChecker, Reception
from tests.dns_server import DnsServerPair, FakeDns


class Zone:
    def __init__(self, server: DnsServerPair) -> None:
        self.server = server
        self.dns: FakeDns = server.zone

    def checker(self) -> AuthChecker:
        return AuthChecker(nameservers=[self.server.address], timeout=2.0, authserv_id="inboxd.test")


@pytest.fixture
def zone() -> Iterator[Zone]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield Zone(server)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def key() -> tuple[bytes, str]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem, base64.b64encode(public).decode()


def publish_key(dns: FakeDns, key: tuple[bytes, str], name: str) -> None:
    record = f"v=DKIM1; k=rsa; p={key[1]}"
    dns.set_txt(name, [record[i : i + 200] for i in range(0, len(record), 200)])


def message(sender: str = "news@example.org", body: str = "Your order has shipped.\n") -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Shop <{sender}>"
    msg["To"] = "customer@example.net"
    msg["Subject"] = "Shipped"
    msg["Message-ID"] = "<1@example.org>"
    msg["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    msg.set_content(body)
    return msg.as_bytes(policy=SMTP)


def signed(raw: bytes, key: tuple[bytes, str], *, domain: str = "example.org", selector: str = "s1") -> bytes:
    signature: bytes = dkim.sign(
        raw, selector.encode(), domain.encode(), key[0], include_headers=[b"from", b"subject", b"to"]
    )
    return signature + raw


async def test_a_signature_with_a_published_key_passes(zone: Zone, key: tuple[bytes, str]) -> None:
    publish_key(zone.dns, key, "s1._domainkey.example.org")
    zone.dns.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"])
    result = await zone.checker().check(signed(message(), key), None)
    (sig,) = result.dkim
    assert (sig.domain, sig.selector, sig.algorithm, sig.result, sig.body_hash) == (
        "example.org",
        "s1",
        "rsa-sha256",
        "pass",
        "pass",
    )
    assert (result.dmarc.result, result.dmarc.policy, result.dmarc.dkim_aligned) == ("pass", "reject", True)
    assert result.arc.result == "none"
    assert result.spf is None and ("info", "spf_not_checked") in {(f[0], f[1]) for f in result.findings}
    assert "dkim=pass" in result.authentication_results and "header.d=example.org" in result.authentication_results
    assert result.authentication_results.startswith("Authentication-Results: inboxd.test;")
    assert not [f for f in result.findings if f[0] == "error"]


async def test_a_body_changed_after_signing_fails(zone: Zone, key: tuple[bytes, str]) -> None:
    publish_key(zone.dns, key, "s1._domainkey.example.org")
    zone.dns.set_txt("_dmarc.example.org", ["v=DMARC1; p=quarantine"])
    raw = signed(message(), key).replace(b"Your order has shipped.", b"Your order was cancelled.")
    result = await zone.checker().check(raw, None)
    (sig,) = result.dkim
    assert (sig.result, sig.body_hash) == ("fail", "fail")
    assert (result.dmarc.result, result.dmarc.policy) == ("fail", "quarantine")
    assert {"dkim_fail", "dmarc_fail"} <= {f[1] for f in result.findings if f[0] == "error"}


async def test_a_signature_without_a_published_key_is_a_permerror(zone: Zone, key: tuple[bytes, str]) -> None:
    result = await zone.checker().check(signed(message(), key, selector="gone"), None)
    (sig,) = result.dkim
    assert sig.result == "permerror" and "gone._domainkey.example.org" in (sig.error or "")
    assert result.dmarc.result == "none"


@pytest.mark.parametrize(
    ("ip", "expected"),
    [("192.0.2.10", "pass"), ("198.51.100.7", "softfail")],
)
async def test_spf_from_published_records(zone: Zone, ip: str, expected: str) -> None:
    zone.dns.set_txt("example.org", ["v=spf1 ip4:192.0.2.10 ~all"])
    reception = Reception(client_ip=ip, helo="mta.example.org", mail_from="bounces@example.org")
    result = await zone.checker().check(message(), reception)
    assert result.spf is not None
    assert (result.spf.result, result.spf.domain, result.spf.client_ip) == (expected, "example.org", ip)
    assert f"spf={expected}" in result.authentication_results


async def test_spf_fail(zone: Zone) -> None:
    zone.dns.set_txt("example.org", ["v=spf1 ip4:192.0.2.10 -all"])
    reception = Reception(client_ip="203.0.113.9", helo="mta.example.org", mail_from="bounces@example.org")
    result = await zone.checker().check(message(), reception)
    assert result.spf is not None and result.spf.result == "fail"
    assert ("error", "spf_fail") in {(f[0], f[1]) for f in result.findings}


async def test_dmarc_alignment_of_spf(zone: Zone) -> None:
    """SPF passes for the bounce domain mail.example.org: aligned with From example.org under relaxed
    alignment (same organizational domain), not under strict."""
    zone.dns.set_txt("mail.example.org", ["v=spf1 ip4:192.0.2.10 -all"])
    reception = Reception(client_ip="192.0.2.10", helo="mta.example.org", mail_from="bounces@mail.example.org")
    zone.dns.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject; aspf=r"])
    relaxed = await zone.checker().check(message(), reception)
    assert (relaxed.dmarc.result, relaxed.dmarc.spf_aligned) == ("pass", True)
    zone.dns.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject; aspf=s"])
    strict = await zone.checker().check(message(), reception)
    assert (strict.dmarc.result, strict.dmarc.spf_aligned) == ("fail", False)


async def test_dkim_of_another_domain_is_not_aligned(zone: Zone, key: tuple[bytes, str]) -> None:
    publish_key(zone.dns, key, "s1._domainkey.esp.example.com")
    zone.dns.set_txt("_dmarc.example.org", ["v=DMARC1; p=none"])
    result = await zone.checker().check(signed(message(), key, domain="esp.example.com"), None)
    assert result.dkim[0].result == "pass"
    assert (result.dmarc.result, result.dmarc.dkim_aligned, result.dmarc.policy) == ("fail", False, "none")


async def test_an_arc_chain_is_verified(zone: Zone, key: tuple[bytes, str]) -> None:
    publish_key(zone.dns, key, "arc._domainkey.forwarder.example")
    raw = message()
    sealed = dkim.arc_sign(
        b"Authentication-Results: forwarder.example; spf=pass smtp.mailfrom=example.org\r\n" + raw,
        b"arc",
        b"forwarder.example",
        key[0],
        b"forwarder.example",
    )
    result = await zone.checker().check(b"".join(sealed) + raw, None)
    assert (result.arc.result, result.arc.instances) == ("pass", 1)


async def test_an_arc_chain_over_a_changed_body_fails(zone: Zone, key: tuple[bytes, str]) -> None:
    publish_key(zone.dns, key, "arc._domainkey.forwarder.example")
    raw = message()
    sealed = dkim.arc_sign(
        b"Authentication-Results: forwarder.example; spf=pass smtp.mailfrom=example.org\r\n" + raw,
        b"arc",
        b"forwarder.example",
        key[0],
        b"forwarder.example",
    )
    changed = raw.replace(b"Your order has shipped.", b"Your order was lost.")
    result = await zone.checker().check(b"".join(sealed) + changed, None)
    assert result.arc.result == "fail"
    assert ("warning", "arc_fail") in {(f[0], f[1]) for f in result.findings}
