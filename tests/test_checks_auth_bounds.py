"""The authentication check's bounds against the suite's DNS server (tests/dns_server.py): at most
MAX_DKIM_SIGNATURES signatures verified (those of the From domain's organization first), each key
asked once, one deadline for the part (then `auth_cut`), its threads apart from the default pool
ingest uses, one user's checks never holding another's; DMARC's organizational domain from the
Public Suffix List, and several DMARC records meaning none (RFC 7489 §6.6.3)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.services.checks.auth import DEADLINE_LOOKUPS, MAX_DKIM_SIGNATURES, AuthChecker, Reception
from inboxd.store import mailboxes as mailbox_store
from tests.conftest import Clock
from tests.dns_server import DnsServerPair, FakeDns
from tests.test_checks_auth import key as key
from tests.test_checks_auth import message, publish_key, signed
from tests.test_checks_service import send

TIMEOUT = 0.4


@pytest.fixture
def dns() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def checker(dns: DnsServerPair, *, timeout: float = TIMEOUT) -> AuthChecker:
    return AuthChecker(nameservers=[dns.address], timeout=timeout, authserv_id="inboxd.test")


def many_signatures(raw: bytes, key: tuple[bytes, str], count: int, *, zone: FakeDns | None = None) -> bytes:
    """`raw` signed `count` times by domains of no relation to its From; their keys silent when
    `zone` is given (a black-holed nameserver), unpublished otherwise."""
    for n in range(count):
        domain = f"d{n}.signers.example"
        if zone is not None:
            zone.silence(f"s1._domainkey.{domain}")
        raw = signed(raw, key, domain=domain)
    return raw


def key_queries(zone: FakeDns) -> list[str]:
    return [name for name, _type, _proto in zone.queries if "._domainkey." in name]


async def test_at_most_a_few_signatures_are_verified_the_from_domains_first(
    dns: DnsServerPair, key: tuple[bytes, str]
) -> None:
    zone = dns.zone
    publish_key(zone, key, "s1._domainkey.example.org")
    zone.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"])
    # The From domain's own signature is the oldest (lowest) of nine: header order alone would
    # leave it unverified.
    raw = many_signatures(signed(message(), key), key, 8)
    result = await checker(dns).check(raw, None)
    assert len(result.dkim) == MAX_DKIM_SIGNATURES == 5
    assert result.dkim[0].domain == "example.org" and result.dkim[0].result == "pass"
    assert {s.result for s in result.dkim[1:]} == {"permerror"}
    assert (result.dmarc.result, result.dmarc.dkim_aligned) == ("pass", True)
    (skipped,) = [f for f in result.findings if f[1] == "dkim_not_checked"]
    assert skipped[0] == "info" and skipped[2].startswith("4 more DKIM signature(s) not verified")
    queries = key_queries(zone)
    assert len(queries) == len(set(queries)) == MAX_DKIM_SIGNATURES  # each key asked once


@pytest.mark.alone
async def test_dkim_time_stops_growing_past_the_cap(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    """10 and 20 signatures whose keys sit on a silent nameserver take about the same time (before:
    two timeouts per signature, 20 signatures twice the time of 10)."""
    auth = checker(dns, timeout=0.3)
    ten = many_signatures(message(), key, 10, zone=dns.zone)
    twenty = many_signatures(message(), key, 20, zone=dns.zone)
    await auth.check(message(), None)  # the threads and the suffix list loaded before timing

    async def timed(raw: bytes) -> float:
        started = time.perf_counter()
        await auth.check(raw, None)
        return time.perf_counter() - started

    t10, t20 = await timed(ten), await timed(twenty)
    await auth.close()
    assert t20 / t10 < 1.4, f"10 signatures {t10:.2f} s, 20 signatures {t20:.2f} s"


@pytest.mark.alone
async def test_one_deadline_for_the_whole_part(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    """SPF, five DKIM keys and DMARC all on a silent nameserver: the part answers at its deadline
    with what it has, temperror for what was cut, and an `auth_cut` finding naming it."""
    zone = dns.zone
    for name in ("example.org", "_dmarc.example.org"):
        zone.silence(name)
    raw = many_signatures(message(), key, 5, zone=zone)
    reception = Reception(client_ip="192.0.2.10", helo="mta.example.org", mail_from="bounces@example.org")
    auth = checker(dns)
    started = time.perf_counter()
    result = await auth.check(raw, reception)
    took = time.perf_counter() - started
    await auth.close()
    deadline = DEADLINE_LOOKUPS * TIMEOUT
    # Unbounded, this is a timeout per lookup: SPF, five keys, DMARC = 7 timeouts at least.
    assert took / deadline < 1.6, f"{took:.2f} s against a {deadline:.2f} s deadline"
    assert result.spf is not None and result.spf.result == "temperror"
    assert result.dmarc.result == "temperror"
    assert all(s.result == "temperror" for s in result.dkim) and len(result.dkim) == 5
    (cut,) = [f for f in result.findings if f[1] == "auth_cut"]
    assert cut[0] == "warning" and "DMARC" in cut[2] and "DKIM d=" in cut[2]


@pytest.mark.alone
async def test_auth_checks_hold_no_thread_of_the_default_pool(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    """Eight checks of mail signed by black-holed domains: the default thread pool (the one ingest
    and password hashing use) answers at once meanwhile, while every check is still running."""
    raw = many_signatures(message(), key, 5, zone=dns.zone)
    auth = checker(dns, timeout=1.0)
    checks = [asyncio.create_task(auth.check(raw, None, user_key=f"user-{n}")) for n in range(8)]
    try:
        await asyncio.sleep(0.2)  # let them start
        await asyncio.to_thread(lambda: None)
        assert not any(c.done() for c in checks), "the default pool waited for the auth checks"
    finally:
        await asyncio.gather(*checks)
        await auth.close()


@pytest.mark.alone
async def test_one_users_slow_checks_never_hold_another_users(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    zone = dns.zone
    publish_key(zone, key, "s1._domainkey.example.org")
    zone.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"])
    slow = many_signatures(message(), key, 5, zone=zone)
    auth = checker(dns, timeout=1.0)
    a = [asyncio.create_task(auth.check(slow, None, user_key="A")) for _ in range(8)]
    try:
        await asyncio.sleep(0.2)
        b = await auth.check(signed(message(), key), None, user_key="B")
        assert b.dkim[0].result == "pass" and b.dmarc.result == "pass"
        assert sum(c.done() for c in a) == 0, "user B waited for user A's checks"
    finally:
        await asyncio.gather(*a)
        await auth.close()


async def test_dmarc_alignment_goes_through_the_public_suffix_list(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    """github.io is a public suffix: attacker.github.io's signature is not aligned with
    victim.github.io (the last two labels would make them one organization)."""
    zone = dns.zone
    publish_key(zone, key, "s1._domainkey.attacker.github.io")
    zone.set_txt("_dmarc.victim.github.io", ["v=DMARC1; p=reject"])
    raw = signed(message(sender="billing@victim.github.io"), key, domain="attacker.github.io")
    result = await checker(dns).check(raw, None)
    assert result.dkim[0].result == "pass"
    assert (result.dmarc.result, result.dmarc.dkim_aligned, result.dmarc.policy) == ("fail", False, "reject")


async def test_the_policy_of_the_organizational_domain(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    """No record at _dmarc.news.victim.github.io: the organization's (victim.github.io) applies,
    never github.io's; and relaxed alignment still joins a subdomain under a two-label suffix."""
    zone = dns.zone
    zone.set_txt("_dmarc.github.io", ["v=DMARC1; p=none"])
    zone.set_txt("_dmarc.victim.github.io", ["v=DMARC1; p=reject; sp=quarantine"])
    publish_key(zone, key, "s1._domainkey.victim.github.io")
    raw = signed(message(sender="news@news.victim.github.io"), key, domain="victim.github.io")
    result = await checker(dns).check(raw, None)
    assert (result.dmarc.result, result.dmarc.policy, result.dmarc.dkim_aligned) == ("pass", "quarantine", True)
    assert "_dmarc.github.io" not in {name for name, _t, _p in zone.queries}
    zone.set_txt("_dmarc.shop.co.uk", ["v=DMARC1; p=reject"])
    publish_key(zone, key, "s1._domainkey.mail.shop.co.uk")
    uk = await checker(dns).check(signed(message(sender="a@shop.co.uk"), key, domain="mail.shop.co.uk"), None)
    assert (uk.dmarc.result, uk.dmarc.dkim_aligned) == ("pass", True)


async def test_several_dmarc_records_mean_none(dns: DnsServerPair, key: tuple[bytes, str]) -> None:
    zone = dns.zone
    publish_key(zone, key, "s1._domainkey.example.org")
    zone.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"], ["v=DMARC1; p=none"])
    result = await checker(dns).check(signed(message(), key), None)
    assert (result.dmarc.result, result.dmarc.policy) == ("none", None)
    codes = {f[1]: f for f in result.findings}
    assert "dmarc_missing" not in codes
    assert codes["dmarc_multiple_records"][0] == "warning" and "2 DMARC records" in codes["dmarc_multiple_records"][2]
    # A record that is not DMARC beside the policy is not a second policy.
    zone.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"], ["google-site-verification=abc"])
    one = await checker(dns).check(signed(message(), key), None)
    assert (one.dmarc.result, one.dmarc.policy) == ("pass", "reject")


@pytest.fixture
async def server(make_settings: Any, clock: Clock, dns: DnsServerPair) -> AsyncIterator[Inboxd]:
    inboxd = Inboxd(make_settings(dns_nameservers=[dns.address], dns_timeout=0.5), clock=clock)
    await inboxd.start()
    try:
        yield inboxd
    finally:
        await inboxd.stop()


@pytest.mark.alone
async def test_auth_checks_never_hold_a_large_delivery(
    server: Inboxd, dns: DnsServerPair, key: tuple[bytes, str]
) -> None:
    """The reported case: reports of mail signed by black-holed domains are computing while a
    300 KB message arrives over SMTP (its ingest uses the default thread pool): its 250 comes while
    every report is still waiting for DNS."""
    address = f"auth-load@{server.settings.default_domain}"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
        created = await http.post(
            "/api/accounts",
            json={"address": address, "auth_key": "ab" * 32},
            headers={"Authorization": f"Bearer {server.bootstrap_token}"},
        )
        assert created.status_code == 201, created.text
    assert server._db is not None
    mailbox = await server._db.read(partial(mailbox_store.get_by_address, address=address))
    assert mailbox is not None
    # The test's SMTP client gets threads of its own: the default pool is what is measured.
    client = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    slow = many_signatures(message(), key, 5, zone=dns.zone)
    for _ in range(8):
        await loop.run_in_executor(client, send, server.smtp_port, address, slow)
    ids = [m.id for m in await server.services.messages.page(mailbox, 1)]
    assert len(ids) == 8
    reports = [asyncio.create_task(server.services.checks.report(mailbox, i)) for i in ids]
    try:
        await asyncio.sleep(0.3)  # every report is in its DNS lookups by now
        large = message(body="A large attachment-like body.\n" + "x" * 76 * 4000 + "\n")
        assert len(large) > 300_000
        await loop.run_in_executor(client, send, server.smtp_port, address, large)
        assert not any(r.done() for r in reports), "the 300 KB delivery waited for the auth checks"
    finally:
        await asyncio.gather(*reports)
        client.shutdown()
