"""Custom domains through `/api/user/domains`, verified against a real DNS server (dnslib), and
mail to a custom-domain mailbox over real SMTP before and after the domain is deleted."""

from __future__ import annotations

import asyncio
import smtplib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import Clock, Harness
from tests.dns_server import DnsServerPair, FakeDns

MX_HOST = "mx.inboxd.localhost"


@pytest.fixture
def dns() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def pro(make_settings: Any, clock: Clock, dns: DnsServerPair) -> AsyncIterator[Harness]:
    """A running inboxd whose resolver asks the test DNS server, with a short DNS timeout."""
    server = Inboxd(make_settings(dns_nameservers=[dns.address], dns_timeout=0.5), clock=clock)
    await server.start()
    assert server.bootstrap_token is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        try:
            yield Harness(server=server, http=http, clock=clock, admin_token=server.bootstrap_token)
        finally:
            await server.stop()


async def add(h: Harness, token: str, domain: str) -> httpx.Response:
    return await h.http.post("/api/user/domains", json={"domain": domain}, headers=h.auth(token))


async def verify(h: Harness, token: str, domain_id: str) -> httpx.Response:
    return await h.http.post(f"/api/user/domains/{domain_id}/verify", headers=h.auth(token))


def publish(dns: DnsServerPair, domain: str, verify_token: str) -> None:
    dns.zone.set_txt(f"_inboxd.{domain}", [f"inboxd-verify={verify_token}"])
    dns.zone.set_mx(domain, (10, f"{MX_HOST}."))


async def test_add_domain_answers_the_records_to_publish(pro: Harness) -> None:
    token = await pro.new_user("pro")
    response = await add(pro, token, "Example.ORG.")
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"id", "domain", "verify_token", "dns_records"}
    assert body["domain"] == "example.org"
    token_value = body["verify_token"]
    assert len(token_value) == 32 and all(c in "0123456789abcdef" for c in token_value)
    assert body["dns_records"] == [
        {"type": "TXT", "host": "_inboxd.example.org", "value": f"inboxd-verify={token_value}"},
        {"type": "MX", "host": "example.org", "value": MX_HOST, "priority": 10},
    ]
    listed = await pro.http.get("/api/user/domains", headers=pro.auth(token))
    assert listed.status_code == 200
    [item] = listed.json()["domains"]
    assert item == {
        "id": body["id"],
        "domain": "example.org",
        "verify_status": "pending",
        "verify_token": token_value,
        "verified_at": None,
        "mx_configured": False,
        "created_at": item["created_at"],
    }
    assert item["created_at"].endswith("Z")
    me = await pro.http.get("/api/user/me", headers=pro.auth(token))
    assert me.json()["domain_count"] == 1


async def test_verify_then_receive_mail_then_delete(pro: Harness, dns: DnsServerPair) -> None:
    token = await pro.new_user("pro")
    other = await pro.new_user("pro")
    added = (await add(pro, token, "example.org")).json()
    box = {"address": "support@example.org", "password": "secret123"}

    # Nothing published: pending, both records missing, no mailbox yet.
    first = await verify(pro, token, added["id"])
    txt_value = f"inboxd-verify={added['verify_token']}"
    assert first.status_code == 200
    assert first.json() == {
        "verify_status": "pending",
        "txt_record": False,
        "mx_record": False,
        "dns_records": [
            {"type": "TXT", "host": "_inboxd.example.org", "value": txt_value, "ok": False},
            {"type": "MX", "host": "example.org", "value": MX_HOST, "priority": 10, "ok": False},
        ],
    }
    early = await pro.http.post("/api/accounts", json=box, headers=pro.auth(token))
    assert early.status_code == 400 and early.json()["error"] == "invalid_domain"

    # TXT only: still pending, the MX record listed as missing.
    dns.zone.set_txt("_inboxd.example.org", ["v=spf1 -all"], [f"inboxd-verify={added['verify_token']}"])
    second = (await verify(pro, token, added["id"])).json()
    assert second["verify_status"] == "pending" and second["txt_record"] is True and second["mx_record"] is False
    assert [r["type"] for r in second["dns_records"]] == ["MX"]

    dns.zone.set_mx("example.org", (20, "backup.example.net."), (10, f"{MX_HOST}."))
    third = await verify(pro, token, added["id"])
    assert third.status_code == 200
    assert third.json() == {"verify_status": "verified", "txt_record": True, "mx_record": True}
    [item] = (await pro.http.get("/api/user/domains", headers=pro.auth(token))).json()["domains"]
    assert item["verify_status"] == "verified" and item["mx_configured"] is True and item["verified_at"]
    # Verifying again keeps it verified.
    assert (await verify(pro, token, added["id"])).json()["verify_status"] == "verified"

    # Mailboxes on it: for this user only.
    theirs = await pro.http.post(
        "/api/accounts", json={"address": "x@example.org", "password": "secret123"}, headers=pro.auth(other)
    )
    assert theirs.status_code == 400 and theirs.json()["error"] == "invalid_domain"
    created = await pro.http.post("/api/accounts", json=box, headers=pro.auth(token))
    assert created.status_code == 201, created.text
    mailbox_id = created.json()["id"]

    assert await pro.send("support@example.org") == {}
    messages = await pro.http.get(f"/api/user/accounts/{mailbox_id}/messages", headers=pro.auth(token))
    assert [m["subject"] for m in messages.json()["messages"]] == ["Hello"]

    # Deleted: mail to its mailboxes is refused at RCPT; the mailbox stays readable.
    deleted = await pro.http.delete(f"/api/user/domains/{added['id']}", headers=pro.auth(token))
    assert deleted.status_code == 204
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        await pro.send("support@example.org")
    code, reply = refused.value.recipients["support@example.org"]
    assert code == 550 and reply.startswith(b"5.1.1")
    still = await pro.http.get(f"/api/accounts/{mailbox_id}/messages", headers=pro.auth(token))
    assert still.status_code == 200 and len(still.json()["messages"]) == 1
    assert (await pro.http.get("/api/user/domains", headers=pro.auth(token))).json() == {"domains": []}
    # No new mailbox on it now.
    again = await pro.http.post(
        "/api/accounts", json={"address": "sales@example.org", "password": "secret123"}, headers=pro.auth(token)
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_domain"


async def test_txt_split_over_strings_and_mx_mixed_case(pro: Harness, dns: DnsServerPair) -> None:
    token = await pro.new_user("pro")
    added = (await add(pro, token, "split.example")).json()
    verify_value = f"inboxd-verify={added['verify_token']}"
    dns.zone.set_txt("_inboxd.split.example", [verify_value[:10], verify_value[10:20], verify_value[20:]])
    dns.zone.set_mx("split.example", (10, "MX.InboxD.LocalHost."))
    result = await verify(pro, token, added["id"])
    assert result.json() == {"verify_status": "verified", "txt_record": True, "mx_record": True}


async def test_large_answer_is_read_over_tcp(pro: Harness, dns: DnsServerPair) -> None:
    """An answer too large for a UDP datagram comes truncated; the resolver asks again over TCP."""
    token = await pro.new_user("pro")
    added = (await add(pro, token, "big.example")).json()
    filler = [[f"site-verification-{i}-" + "x" * 80] for i in range(12)]
    dns.zone.set_txt("_inboxd.big.example", *filler, [f"inboxd-verify={added['verify_token']}"])
    dns.zone.set_mx("big.example", (10, MX_HOST))
    result = await verify(pro, token, added["id"])
    assert result.json()["verify_status"] == "verified"
    assert ("_inboxd.big.example", "TXT", "tcp") in dns.zone.queries


async def test_downgraded_user_keeps_custom_domain_mailboxes(pro: Harness, dns: DnsServerPair) -> None:
    token = await pro.new_user("pro", email="was-pro@example.test")
    added = (await add(pro, token, "legacy.example")).json()
    publish(dns, "legacy.example", added["verify_token"])
    assert (await verify(pro, token, added["id"])).json()["verify_status"] == "verified"
    box = {"address": "old@legacy.example", "password": "secret123"}
    assert (await pro.http.post("/api/accounts", json=box, headers=pro.auth(token))).status_code == 201
    await pro.server.services.users.set_user("was-pro@example.test", plan="free")
    # No new mailbox on a custom domain on the free plan; the existing one still receives and reads.
    new = {"address": "new@legacy.example", "password": "secret123"}
    refused = await pro.http.post("/api/accounts", json=new, headers=pro.auth(token))
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_domain"
    assert await pro.send("old@legacy.example") == {}
    read = await pro.http.get("/api/accounts/old@legacy.example/messages", headers=pro.auth(token))
    assert read.status_code == 200 and len(read.json()["messages"]) == 1
    await pro.server.services.users.set_user("was-pro@example.test", plan="pro")
    assert (await pro.http.post("/api/accounts", json=new, headers=pro.auth(token))).status_code == 201


async def test_wrong_values_stay_pending(pro: Harness, dns: DnsServerPair) -> None:
    token = await pro.new_user("pro")
    added = (await add(pro, token, "wrong.example")).json()
    dns.zone.set_txt("_inboxd.wrong.example", [f"inboxd-verify={added['verify_token']}x"], ["inboxd-verify=", "0"])
    dns.zone.set_mx("wrong.example", (10, "mx.inboxd.localhost.evil.example."))
    result = (await verify(pro, token, added["id"])).json()
    assert result["verify_status"] == "pending"
    assert result["txt_record"] is False and result["mx_record"] is False
    assert [r["ok"] for r in result["dns_records"]] == [False, False]


@pytest.mark.parametrize("failure", ["servfail", "timeout", "nxdomain"])
async def test_dns_failures_answer_pending(pro: Harness, dns: DnsServerPair, failure: str) -> None:
    token = await pro.new_user("pro")
    added = (await add(pro, token, "flaky.example")).json()
    dns.zone.set_mx("flaky.example", (10, MX_HOST))
    if failure == "servfail":
        dns.zone.servfail("_inboxd.flaky.example")
    elif failure == "timeout":
        dns.zone.silence("_inboxd.flaky.example")
    result = await verify(pro, token, added["id"])
    assert result.status_code == 200, result.text
    body = result.json()
    assert body["verify_status"] == "pending" and body["txt_record"] is False and body["mx_record"] is True
    assert [r["type"] for r in body["dns_records"]] == ["TXT"]
    # The record appears: the same domain verifies.
    dns.zone.clear("_inboxd.flaky.example")
    dns.zone.set_txt("_inboxd.flaky.example", [f"inboxd-verify={added['verify_token']}"])
    assert (await verify(pro, token, added["id"])).json()["verify_status"] == "verified"


async def test_verify_after_window_is_gone_and_removes_the_domain(pro: Harness, dns: DnsServerPair) -> None:
    token = await pro.new_user("pro")
    added = (await add(pro, token, "late.example")).json()
    kept = (await add(pro, token, "kept.example")).json()
    publish(dns, "kept.example", kept["verify_token"])
    assert (await verify(pro, token, kept["id"])).json()["verify_status"] == "verified"
    pro.clock.advance(72 * 3600 + 1)
    publish(dns, "late.example", added["verify_token"])
    expired = await verify(pro, token, added["id"])
    assert expired.status_code == 410
    assert expired.json()["error"] == "domain_expired" and expired.json()["message"]
    names = [d["domain"] for d in (await pro.http.get("/api/user/domains", headers=pro.auth(token))).json()["domains"]]
    assert names == ["kept.example"]
    assert (await verify(pro, token, added["id"])).status_code == 404
    # A verified domain has no window; the expired one can be added again.
    assert (await verify(pro, token, kept["id"])).json()["verify_status"] == "verified"
    assert (await add(pro, token, "late.example")).status_code == 201


async def test_lapsed_pending_domain_can_be_taken_by_another_user(pro: Harness) -> None:
    first, second = await pro.new_user("pro"), await pro.new_user("pro")
    assert (await add(pro, first, "taken.example")).status_code == 201
    assert (await add(pro, second, "taken.example")).json()["error"] == "domain_already_exists"
    pro.clock.advance(72 * 3600 + 1)
    assert (await add(pro, second, "taken.example")).status_code == 201
    assert (await pro.http.get("/api/user/domains", headers=pro.auth(first))).json() == {"domains": []}


async def test_duplicates_and_cap(pro: Harness) -> None:
    token, other = await pro.new_user("pro"), await pro.new_user("pro")
    assert (await add(pro, token, "dup.example")).status_code == 201
    for name, who in (("dup.example", token), ("DUP.example.", token), ("dup.example", other)):
        response = await add(pro, who, name)
        assert response.status_code == 409 and response.json()["error"] == "domain_already_exists", name
    for i in range(9):
        assert (await add(pro, token, f"d{i}.example")).status_code == 201
    over = await add(pro, token, "eleventh.example")
    assert over.status_code == 403 and over.json()["error"] == "domain_limit_reached"
    me = (await pro.http.get("/api/user/me", headers=pro.auth(token))).json()
    assert me["domain_count"] == 10 and me["max_domains"] == 10


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("Example.COM", "example.com"),
        ("trailing.example.", "trailing.example"),
        ("  spaced.example  ", "spaced.example"),
        ("Bücher.Example", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ("a-b.c-d.example", "a-b.c-d.example"),
        ("inboxd.localhost.example", "inboxd.localhost.example"),
        ("x" * 63 + ".example", "x" * 63 + ".example"),
    ],
)
async def test_domain_names_are_normalized(pro: Harness, raw: str, stored: str) -> None:
    token = await pro.new_user("pro")
    response = await add(pro, token, raw)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["domain"] == stored
    assert body["dns_records"][0]["host"] == f"_inboxd.{stored}"


LONG_NAME = ".".join(["a" * 50] * 5) + ".example"  # 262 characters: over 253


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("", "invalid_domain"),
        ("   ", "invalid_domain"),
        ("localhost", "invalid_domain"),
        ("exa mple.org", "invalid_domain"),
        ("-lead.example", "invalid_domain"),
        ("trail-.example", "invalid_domain"),
        ("a..b.example", "invalid_domain"),
        ("double.dot.example..", "invalid_domain"),
        (".lead.example", "invalid_domain"),
        ("under_score.example", "invalid_domain"),
        ("x" * 64 + ".example", "invalid_domain"),
        (LONG_NAME, "invalid_domain"),
        ("z" * 5000 + ".example", "invalid_domain"),
        ("1.2.3.4", "invalid_domain"),
        ("http://example.org", "invalid_domain"),
        ("user@example.org", "invalid_domain"),
        ("xn--zz.example", "invalid_domain"),
        ("💩.example", "invalid_domain"),
        ("inboxd.localhost", "invalid_domain"),
        ("INBOXD.localhost.", "invalid_domain"),
        ("sub.inboxd.localhost", "invalid_domain"),
        (MX_HOST, "invalid_domain"),
        (5, "invalid_request"),
        (None, "invalid_request"),
    ],
)
async def test_bad_domain_names(pro: Harness, raw: object, code: str) -> None:
    token = await pro.new_user("pro")
    response = await pro.http.post("/api/user/domains", json={"domain": raw}, headers=pro.auth(token))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == code


async def test_bad_bodies(pro: Harness) -> None:
    token = await pro.new_user("pro")
    for content in (b"", b"{", b"{}", b'{"name": "x"}', b"[]"):
        response = await pro.http.post(
            "/api/user/domains", content=content, headers={**pro.auth(token), "content-type": "application/json"}
        )
        assert response.status_code == 400 and response.json()["error"] == "invalid_request", content


async def test_other_users_domains_answer_404(pro: Harness, dns: DnsServerPair) -> None:
    owner, other = await pro.new_user("pro"), await pro.new_user("pro")
    added = (await add(pro, owner, "mine.example")).json()
    publish(dns, "mine.example", added["verify_token"])
    for method, path in (
        ("POST", f"/api/user/domains/{added['id']}/verify"),
        ("DELETE", f"/api/user/domains/{added['id']}"),
        ("POST", "/api/user/domains/00000000-0000-0000-0000-000000000000/verify"),
        ("DELETE", "/api/user/domains/not-a-uuid"),
    ):
        response = await pro.http.request(method, path, headers=pro.auth(other))
        assert response.status_code == 404 and response.json()["error"] == "not_found", path
    assert (await pro.http.get("/api/user/domains", headers=pro.auth(other))).json() == {"domains": []}
    # Untouched by those calls: still pending, then verifiable by its owner.
    assert (await verify(pro, owner, added["id"])).json()["verify_status"] == "verified"


async def test_cap_holds_under_concurrent_adds(pro: Harness) -> None:
    token = await pro.new_user("pro")
    responses = await asyncio.gather(*(add(pro, token, f"race{i}.example") for i in range(16)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * 10 + [403] * 6, statuses
    assert len((await pro.http.get("/api/user/domains", headers=pro.auth(token))).json()["domains"]) == 10
