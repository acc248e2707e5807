"""The spam score from a real rspamd started by the tests (tests/rspamd_server.py): GTUBE is
rejected, a plain personal mail is not; without INBOXD_RSPAMD_URL nothing is asked."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, make_msgid
from pathlib import Path

import pytest

from inboxd.config import Settings
from inboxd.services.checks.reports import spam_part
from inboxd.services.checks.spam import Envelope, SpamChecker
from tests.conftest import free_port
from tests.dns_server import DnsServerPair, FakeDns
from tests.rspamd_server import Rspamd

GTUBE = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"


@pytest.fixture(scope="module")
def rspamd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rspamd]:
    dns = DnsServerPair(FakeDns())
    dns.start()
    server = Rspamd(tmp_path_factory.mktemp("rspamd"), dns=dns.address)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        dns.stop()


def personal(body: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Alice Martin <alice@example.org>"
    msg["To"] = "Bob Durand <bob@example.net>"
    msg["Subject"] = "Dinner on Friday"
    msg["Date"] = format_datetime(datetime(2026, 11, 20, 18, 30, tzinfo=UTC))
    msg["Message-ID"] = make_msgid(domain="example.org")
    msg.set_content(body)
    return msg.as_bytes(policy=SMTP)


ENVELOPE = Envelope(
    client_ip="127.0.0.1", helo="laptop.example.org", mail_from="alice@example.org", recipients=["bob@example.net"]
)


async def test_gtube_is_rejected(rspamd: Rspamd) -> None:
    result = await SpamChecker(Settings(rspamd_url=rspamd.url)).check(personal(f"Hi Bob,\n\n{GTUBE}\n"), ENVELOPE)
    assert result.error is None
    assert result.action == "reject"
    assert "GTUBE" in {s.name for s in result.symbols}
    part = spam_part(result)
    assert (part.verdict, part.configured, part.action) == ("error", True, "reject")
    assert [f.code for f in part.findings] == ["spam_rejected"]


async def test_a_plain_personal_mail_is_not_rejected(rspamd: Rspamd) -> None:
    body = "Hi Bob,\n\nAre you still free on Friday evening? We could try the new place near the station.\n\nAlice\n"
    result = await SpamChecker(Settings(rspamd_url=rspamd.url)).check(personal(body), ENVELOPE)
    assert result.error is None, result.error
    assert result.action == "no action", result
    assert result.score is not None and result.required is not None and result.score < result.required
    assert result.symbols and all(s.name for s in result.symbols)
    assert any(s.description for s in result.symbols)
    part = spam_part(result)
    assert (part.verdict, part.score, part.findings) == ("ok", result.score, [])


def test_without_the_setting_nothing_is_configured() -> None:
    assert not SpamChecker(Settings()).configured
    part = spam_part(None)
    assert (part.verdict, part.configured, part.score, part.action) == ("skipped", False, None, None)


async def test_an_unreachable_rspamd_is_an_error_not_a_score(tmp_path: Path) -> None:
    result = await SpamChecker(Settings(rspamd_url=f"http://127.0.0.1:{free_port()}")).check(b"x", Envelope())
    assert result.score is None and result.action is None
    assert (result.error or "").startswith("rspamd unreachable")
