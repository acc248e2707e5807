"""A stored message's report (services/checks/reports.py), on both back ends: a DKIM-signed HTML
message received over SMTP with a HELO, its links served by a local site, the DNS by the suite's
server. The report is computed at the first request and kept; `refresh="links"` fetches again."""

from __future__ import annotations

import asyncio
import smtplib
from collections.abc import AsyncIterator, Iterator
from email.message import EmailMessage
from email.policy import SMTP
from functools import partial
from typing import Any

import httpx
import msgspec
import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.client import AsyncClient
from inboxd.mail.checks.report import CheckReport
from inboxd.services.checks.reports import CheckService
from inboxd.store import mailboxes as mailbox_store
from inboxd.store.schema import message_checks
from inboxd.store.sql import Statement
from tests.conftest import Clock
from tests.dns_server import DnsServerPair, FakeDns
from tests.test_checks_auth import key as key
from tests.test_checks_auth import publish_key, signed
from tests.test_checks_links import Site
from tests.test_checks_links import site as site

pytestmark = pytest.mark.usefixtures("site")


@pytest.fixture
def zone() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def server(make_settings: Any, clock: Clock, zone: DnsServerPair) -> AsyncIterator[Inboxd]:
    settings = make_settings(dns_nameservers=[zone.address], link_check_allow_private=True, link_check_timeout=2.0)
    inboxd = Inboxd(settings, clock=clock)
    await inboxd.start()
    try:
        yield inboxd
    finally:
        await inboxd.stop()


def html_message(base: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Shop <news@example.org>"
    msg["To"] = "customer@example.net"
    msg["Subject"] = "Your order"
    msg["Message-ID"] = "<order-1@example.org>"
    msg["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    msg.set_content(f"Your order: {base}/ok\n")
    msg.add_alternative(
        f'<p>Your <a href="{base}/moved">order</a> and <a href="{base}/missing">invoice</a>.'
        f'<img src="{base}/ok" alt="logo"></p>',
        subtype="html",
    )
    return msg.as_bytes(policy=SMTP)


def send(port: int, to: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, local_hostname="mta.example.org", timeout=30) as client:
        client.sendmail("bounces@example.org", [to], raw)


async def test_a_report_is_computed_once_and_kept(
    server: Inboxd, zone: DnsServerPair, site: Site, key: tuple[bytes, str]
) -> None:
    publish_key(zone.zone, key, "s1._domainkey.example.org")
    zone.zone.set_txt("example.org", ["v=spf1 ip4:127.0.0.1 -all"])
    zone.zone.set_txt("_dmarc.example.org", ["v=DMARC1; p=reject"])
    services = server.services
    address = f"orders@{server.settings.default_domain}"
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
    await asyncio.to_thread(send, server.smtp_port, mailbox.address, signed(html_message(site.base), key))
    (message,) = await services.messages.page(mailbox, 1)
    checks: CheckService = services.checks

    report = await checks.report(mailbox, message.id)
    assert report.auth.spf is not None and report.auth.spf.result == "pass"
    assert report.auth.spf.helo == "mta.example.org"
    assert [(d.domain, d.result) for d in report.auth.dkim] == [("example.org", "pass")]
    assert report.auth.dmarc is not None and report.auth.dmarc.result == "pass"
    assert report.spam.verdict == "skipped" and not report.spam.configured
    by_url = {(i.url, i.kind): i for i in report.links.items}
    assert by_url[(f"{site.base}/moved", "link")].status == 200
    assert by_url[(f"{site.base}/missing", "link")].status == 404
    assert [(f.code, f.where) for f in report.links.findings] == [("link_broken", f"{site.base}/missing")]
    assert report.links.verdict == "error" and report.verdict == "error"
    fetched = len(site.methods)

    again = await checks.report(mailbox, message.id)
    assert again == report and len(site.methods) == fetched  # kept: nothing fetched again

    refreshed = await checks.report(mailbox, message.id, refresh="links")
    assert len(site.methods) > fetched
    assert refreshed.auth == report.auth and refreshed.html == report.html

    assert server._db is not None
    kept = Statement(
        lambda: (
            sa.select(sa.func.count())
            .select_from(message_checks)
            .where(message_checks.c.message_id == sa.bindparam("message_id"))
        )
    )
    assert await server._db.read(lambda tx: tx.fetchval(kept, message_id=message.id)) == 1
    await services.messages.delete(mailbox, message.id)  # the kept report goes with the message
    assert await server._db.read(lambda tx: tx.fetchval(kept, message_id=message.id)) == 0


async def test_the_api_answers_the_report_and_each_part(server: Inboxd, site: Site) -> None:
    address = f"api-checks@{server.settings.default_domain}"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
        auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
        created = await http.post("/api/accounts", json={"address": address, "auth_key": "ab" * 32}, headers=auth)
        assert created.status_code == 201, created.text
        await asyncio.to_thread(send, server.smtp_port, address, html_message(site.base))
        listed = await http.get(f"/api/accounts/{address}/messages", headers=auth)
        (item,) = listed.json()["messages"]
        base = f"/api/accounts/{address}/messages/{item['id']}/checks"

        whole = await http.get(base, headers=auth)
        assert whole.status_code == 200, whole.text
        report = whole.json()
        assert set(report) == {"verdict", "html", "links", "spam", "auth", "content"}
        assert report["spam"] == {**report["spam"], "verdict": "skipped", "configured": False}
        assert report["auth"]["spf"]["helo"] == "mta.example.org"
        used = int(whole.headers["X-Ops-Used"])
        for part in ("html", "links", "spam", "auth", "content"):
            alone = await http.get(f"{base}/{part}", headers=auth)
            assert alone.status_code == 200, alone.text
            assert alone.json() == report[part]
            used, before = int(alone.headers["X-Ops-Used"]), used
            assert used == before + 1  # each read is an operation
        async with AsyncClient(f"http://127.0.0.1:{server.http_port}", token=server.bootstrap_token) as client:
            typed = await client.checks(address, item["id"], refresh_links=True)
        assert isinstance(typed, CheckReport) and typed.auth.spf is not None
        assert typed.html == msgspec.json.decode(msgspec.json.encode(report["html"]), type=type(typed.html))
        refreshed = await http.get(f"{base}/links", params={"refresh": "links"}, headers=auth)
        assert refreshed.status_code == 200
        wrong = await http.get(base, params={"refresh": "everything"}, headers=auth)
        assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_request"
        unknown = await http.get(
            f"/api/accounts/{address}/messages/{'0' * 8}-0000-0000-0000-{'0' * 12}/checks", headers=auth
        )
        assert unknown.status_code == 404
