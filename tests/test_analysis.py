"""Mail analysis on its own bounded executor (services/analysis.py), seen through the running server:
concurrent requests of one message compute once, one user's heavy jobs never make another user's
request wait behind them, a report part past INBOXD_ANALYSIS_BUDGET answers what it has with an
`analysis_cut` finding (and a later request gets the finished work), the dashboard's HTML view is
made once per message and kept, the dashboard's Checks tab is admitted and counted as the API's
`GET …/checks` is, and a report kept from before rspamd was configured is scored again."""

from __future__ import annotations

import asyncio
import contextlib
import smtplib
import time
from collections.abc import AsyncIterator, Iterator
from email.message import EmailMessage
from email.policy import SMTP
from functools import partial
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.model import Mailbox, User
from inboxd.store import mailboxes as mailbox_store
from tests.conftest import Clock, Harness
from tests.dns_server import DnsServerPair, FakeDns
from tests.test_checks_links import Site
from tests.test_checks_links import site as site
from tests.test_web_sessions import signed_in

ROW = (
    '<tr><td style="padding:4px;color:#333;font-family:Arial" class="c{i}"><span style="font-weight:bold">'
    'Item {i}</span> <b>x</b> <i>y</i></td><td style="text-align:right;border-radius:4px">{i}.00</td></tr>'
)


def heavy_message(rows: int, *, link: str = "", tag: str = "") -> bytes:
    """An HTML mail whose checks and HTML view take a while: a table of `rows` styled rows
    (2,000 rows are about 440 KB and most of a second of analysis here), linear work, no trick."""
    msg = EmailMessage()
    msg["From"] = "Shop <news@example.org>"
    msg["To"] = "customer@example.net"
    msg["Subject"] = f"Your statement {tag}"
    msg["Message-ID"] = f"<statement-{tag}-{rows}@example.org>"
    msg["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    msg.set_content("Your statement is in the HTML part.\n")
    table = "".join(ROW.format(i=i) for i in range(rows))
    anchor = f'<p><a href="{link}">Pay now</a></p>' if link else ""
    msg.add_alternative(f"<html><body>{anchor}<table>{table}</table></body></html>", subtype="html")
    return msg.as_bytes(policy=SMTP)


def plain_message(tag: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Alice <alice@example.org>"
    msg["To"] = "bob@example.net"
    msg["Subject"] = f"Lunch {tag}"
    msg["Message-ID"] = f"<lunch-{tag}@example.org>"
    msg["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    msg.set_content("Lunch at noon?\n")
    return msg.as_bytes(policy=SMTP)


def send(port: int, to: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, local_hostname="mta.example.org", timeout=60) as client:
        client.sendmail("bounces@example.org", [to], raw)


@pytest.fixture
def zone() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def serving(make_settings: Any, clock: Clock, zone: DnsServerPair, **overrides: Any) -> AsyncIterator[Inboxd]:
    settings = make_settings(
        dns_nameservers=[zone.address], link_check_allow_private=True, link_check_timeout=5.0, **overrides
    )
    server = Inboxd(settings, clock=clock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def user_with_mailbox(server: Inboxd, name: str, *, plan: str = "pro") -> tuple[User, Mailbox, str]:
    """A user, an API token of theirs and a mailbox that token made."""
    services = server.services
    user = await services.users.create_user(f"{name}@example.test", plan=plan)
    token = (await services.users.create_token(user, "test")).value
    address = f"{name}@{server.settings.default_domain}"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
        created = await http.post(
            "/api/accounts",
            json={"address": address, "password": "secret123"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert created.status_code == 201, created.text
    assert server._db is not None
    mailbox = await server._db.read(partial(mailbox_store.get_by_address, address=address))
    assert mailbox is not None
    return user, mailbox, token


async def delivered(server: Inboxd, mailbox: Mailbox, raws: list[bytes]) -> list[str]:
    """Send each of `raws` to `mailbox`; their ids, oldest first."""
    for raw in raws:
        await asyncio.to_thread(send, server.smtp_port, mailbox.address, raw)
    page = await server.services.messages.page(mailbox, 1)
    assert len(page) == len(raws)
    return [m.id for m in reversed(page)]


def codes(part: dict[str, Any]) -> list[str]:
    return [f["code"] for f in part["findings"]]


async def test_three_concurrent_checks_of_a_heavy_message_compute_once(
    make_settings: Any, clock: Clock, zone: DnsServerPair, site: Site
) -> None:
    async with serving(make_settings, clock, zone) as server:
        _, mailbox, token = await user_with_mailbox(server, "heavy")
        (message_id,) = await delivered(server, mailbox, [heavy_message(2000, link=f"{site.base}/ok", tag="one")])
        url = f"/api/accounts/{mailbox.address}/messages/{message_id}/checks"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
            auth = {"Authorization": f"Bearer {token}"}
            answers = await asyncio.gather(*(http.get(url, headers=auth) for _ in range(3)))
        assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text
        assert answers[0].json() == answers[1].json() == answers[2].json()
        analysis = server.services.checks.analysis
        assert analysis.runs["checks"] == 1 and analysis.runs["pure"] == 1
        # The outside world saw one computation too: the link was fetched once, not three times.
        assert [m for m in site.methods if m[1] == "/ok"] == [("HEAD", "/ok")]


@pytest.mark.alone
async def test_another_users_request_does_not_wait_behind_a_users_heavy_checks(
    make_settings: Any, clock: Clock, zone: DnsServerPair
) -> None:
    # More heavy jobs than the default thread pool has threads (min(32, cores + 4)): on a shared
    # pool the eighth waits, and a request of anyone else behind it.
    async with serving(make_settings, clock, zone, analysis_threads=2) as server:
        _, heavy_box, _ = await user_with_mailbox(server, "flood")
        _, light_box, light_token = await user_with_mailbox(server, "quiet")
        heavy_ids = await delivered(server, heavy_box, [heavy_message(5000, tag=str(i)) for i in range(8)])
        (light_id,) = await delivered(server, light_box, [plain_message("light")])
        done: list[str] = []

        async def heavy(message_id: str) -> None:
            await server.services.checks.report(heavy_box, message_id)
            done.append("heavy")

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=120) as http:
            flood = [asyncio.ensure_future(heavy(message_id)) for message_id in heavy_ids]
            await asyncio.sleep(0.5)  # every heavy report under way, its pure parts queued or running
            assert not done
            started = time.perf_counter()
            answer = await http.get(
                f"/api/accounts/{light_box.address}/messages/{light_id}",
                headers={"Authorization": f"Bearer {light_token}"},
            )
            light_took = time.perf_counter() - started
            done.append("light")
            assert answer.status_code == 200 and answer.json()["subject"] == "Lunch light"
            await asyncio.gather(*flood)
        flood_took = time.perf_counter() - started
        # The light request (a first open: its parse runs on the analysis executor too) came back
        # before the flood's second report (the first may finish while it is asked: the checks
        # read at most 1 MB of HTML, so a flood report is well under a second), in a small share
        # of the flood's time.
        assert done.index("light") <= 1, done
        assert light_took / flood_took < 0.2, (light_took, flood_took)
        assert server.services.checks.analysis.runs["pure"] == 8


async def test_a_part_past_the_budget_answers_what_it_has_and_a_later_request_gets_the_rest(
    make_settings: Any, clock: Clock, zone: DnsServerPair
) -> None:
    async with serving(make_settings, clock, zone, analysis_budget=0.05) as server:
        _, mailbox, token = await user_with_mailbox(server, "budget")
        (message_id,) = await delivered(server, mailbox, [heavy_message(3000, tag="cut")])
        url = f"/api/accounts/{mailbox.address}/messages/{message_id}/checks"
        analysis = server.services.checks.analysis
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
            auth = {"Authorization": f"Bearer {token}"}
            cut = await http.get(url, headers=auth)
            assert cut.status_code == 200, cut.text
            report = cut.json()
            assert "analysis_cut" in codes(report["html"]) and "analysis_cut" in codes(report["content"])
            assert "analysis_cut" in codes(report["links"]) and report["links"]["items"] == []
            assert "INBOXD_ANALYSIS_BUDGET" in report["html"]["findings"][0]["message"]
            assert report["verdict"] != "ok"
            assert analysis.cuts["pure"] == 1
            # The pure parts went on in their thread; once they are done, the next request gets
            # them without computing them again.
            for _ in range(600):
                if (message_id, "pure") in analysis._late:
                    break
                await asyncio.sleep(0.05)
            whole = (await http.get(url, headers=auth)).json()
        assert "analysis_cut" not in codes(whole["html"]) and whole["html"]["support"] is not None
        assert "analysis_cut" not in codes(whole["content"])
        assert analysis.runs["pure"] == 1 and analysis.runs["checks"] == 2


@pytest.mark.alone
async def test_the_dashboards_html_view_is_made_once_and_kept(
    make_settings: Any, clock: Clock, zone: DnsServerPair
) -> None:
    async with serving(make_settings, clock, zone) as server:
        user, mailbox, _ = await user_with_mailbox(server, "viewer", plan="free")
        (message_id,) = await delivered(server, mailbox, [heavy_message(3000, tag="view")])
        base = f"http://127.0.0.1:{server.http_port}"
        h = Harness(server=server, http=httpx.AsyncClient(base_url=base), clock=clock, admin_token="")
        try:
            async with signed_in(h, user.email) as client:
                path = f"/mailboxes/{mailbox.id}/messages/{message_id}/html"
                took = []
                for _ in range(3):
                    started = time.perf_counter()
                    view = await client.get(path)
                    took.append(time.perf_counter() - started)
                    assert view.status_code == 200 and "Item 2999" in view.text
                remote = await client.get(path, params={"remote": "1"})
                assert remote.status_code == 200
        finally:
            await h.http.aclose()
        analysis = server.services.messages.analysis
        assert analysis.runs["html"] == 1 and analysis.runs["html+remote"] == 1
        assert max(took[1:]) / took[0] < 0.5, took


async def test_the_dashboards_checks_tab_is_admitted_and_counted_as_the_api(
    make_settings: Any, clock: Clock, zone: DnsServerPair
) -> None:
    async with serving(make_settings, clock, zone, free_ops_limit=6) as server:
        user, mailbox, _ = await user_with_mailbox(server, "tab", plan="free")
        first_id, second_id = await delivered(server, mailbox, [plain_message("one"), plain_message("two")])
        admission = server.services.admission
        base = f"http://127.0.0.1:{server.http_port}"
        h = Harness(server=server, http=httpx.AsyncClient(base_url=base), clock=clock, admin_token="")
        try:
            async with signed_in(h, user.email) as client:
                used, limit = await admission.usage(user)
                page = await client.get(f"/mailboxes/{mailbox.id}/messages/{first_id}", params={"tab": "checks"})
                assert page.status_code == 200 and "Content" in page.text
                assert (await admission.usage(user))[0] == used + 1  # computed: one operation
                again = await client.get(f"/mailboxes/{mailbox.id}/messages/{first_id}", params={"tab": "checks"})
                assert again.status_code == 200
                assert (await admission.usage(user))[0] == used + 1  # kept: no operation
                # With the month's quota used up, a report is not computed from the dashboard either.
                while (await admission.usage(user))[0] < limit:
                    await admission.count(user)
                refused = await client.get(f"/mailboxes/{mailbox.id}/messages/{second_id}", params={"tab": "checks"})
                assert refused.status_code == 429
                assert server.services.checks.analysis.runs["checks"] == 1
        finally:
            await h.http.aclose()


@pytest.fixture
async def scorer() -> AsyncIterator[str]:
    """rspamd's `POST /checkv2` at its transport, answering one score (the suite's real rspamd,
    tests/rspamd_server.py, is what tests/test_checks_spam.py uses; here only its being there matters)."""
    from aiohttp import web

    async def checkv2(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"score": 1.5, "required_score": 15.0, "action": "no action", "symbols": {}})

    app = web.Application()
    app.router.add_post("/checkv2", checkv2)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = web.TCPSite(runner, "127.0.0.1", 0)
    await listener.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_report_from_before_rspamd_was_configured_is_scored_again(
    make_settings: Any, clock: Clock, zone: DnsServerPair, scorer: str
) -> None:
    async with serving(make_settings, clock, zone) as server:
        _, mailbox, token = await user_with_mailbox(server, "spam")
        (message_id,) = await delivered(server, mailbox, [plain_message("spam")])
        before = await server.services.checks.report(mailbox, message_id)
        assert before.spam.verdict == "skipped" and not before.spam.configured
    # The same database (make_settings keeps the test's storage), now with rspamd: the kept report's
    # spam part is computed again, by itself.
    async with serving(make_settings, clock, zone, rspamd_url=scorer) as server:
        checks = server.services.checks
        after = await checks.report(mailbox, message_id)
        assert after.spam.configured and after.spam.score is not None
        assert after.html == before.html and after.content == before.content
        assert checks.analysis.runs["checks:spam"] == 1 and checks.analysis.runs["pure"] == 0
        kept = await checks.report(mailbox, message_id)
        assert kept == after and checks.analysis.runs["checks:spam"] == 1  # kept now
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
            url = f"/api/accounts/{mailbox.address}/messages/{message_id}/checks/spam"
            again = await http.get(url, params={"refresh": "spam"}, headers={"Authorization": f"Bearer {token}"})
            assert again.status_code == 200 and again.json()["configured"] is True
            wrong = await http.get(url, params={"refresh": "ham"}, headers={"Authorization": f"Bearer {token}"})
            assert wrong.status_code == 400 and "`spam`" in wrong.json()["message"]
        assert checks.analysis.runs["checks:spam"] == 2 and checks.analysis.runs["pure"] == 0
