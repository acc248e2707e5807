"""`msg.checks()` and `msg.assert_checks(...)` of the pytest plugin (testing/checks.py): run by
`pytester` against the embedded inboxd (no spam filter configured there, so a spam requirement
must fail and say why), and `shortfalls` over real reports whose spam and DKIM parts hold results
the embedded server cannot produce."""

from __future__ import annotations

import msgspec
import pytest

from inboxd.mail.checks import judge_message
from inboxd.mail.checks.report import AuthPart, DkimSignature, SpamPart, SpamSymbol
from inboxd.testing.checks import shortfalls

CHECKS_SUITE = """
import smtplib
from email.message import EmailMessage

from inboxd.mail.checks.report import CheckReport


def receipt(to):
    m = EmailMessage()
    m["From"] = "Shop <shop@example.com>"
    m["To"] = to
    m["Subject"] = "Your receipt"
    m["Message-ID"] = "<receipt-1@example.com>"
    m["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    m.set_content('<div style="display: flex"><img src="cid:logo" alt="Shop">Thanks</div>', subtype="html")
    return m


def test_the_report(inboxd, mailbox):
    with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port) as smtp:
        smtp.send_message(receipt(mailbox.address))
    msg = mailbox.wait_for(subject="receipt", timeout=20)
    report = msg.checks()
    assert isinstance(report, CheckReport)
    assert not report.spam.configured and report.spam.verdict == "skipped"
    assert "broken_cid" in [f.code for f in report.content.findings]
    assert msg.assert_checks(links="ok") == report  # no links: nothing fell short


def test_everything_that_fell_short(inboxd, mailbox):
    with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port) as smtp:
        smtp.send_message(receipt(mailbox.address))
    msg = mailbox.wait_for(subject="receipt", timeout=20)
    msg.assert_checks(html_support=99.5, spam_score_below=5, links="ok", dkim="pass", content="no-errors")


def sign_up(to):
    # The README's example: a minimal sign-up mail, HTML with a text alternative.
    m = EmailMessage()
    m["From"] = "Acme <no-reply@acme.example>"
    m["To"] = to
    m["Subject"] = "Your sign-up code"
    m["Message-ID"] = "<sign-up-1@acme.example>"
    m["Date"] = "Thu, 26 Nov 2026 05:00:00 +0000"
    m.set_content("Welcome! Your code is 123456.")
    m.add_alternative(
        '<!DOCTYPE html><html lang="en"><body><p>Welcome!</p><p>Your code is <strong>123456</strong>.</p>'
        '<p><a href="https://acme.example/verify" target="_blank">Verify in one click</a></p></body></html>',
        subtype="html",
    )
    return m


def test_the_readme_example(inboxd, mailbox):
    with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port) as smtp:
        smtp.send_message(sign_up(mailbox.address))
    msg = mailbox.wait_for(subject="sign-up", timeout=20)
    report = msg.assert_checks(html_support=90, content="ok")
    assert report.html.verdict == "ok" and report.html.support >= 90


def test_a_sandbox_message(sandbox):
    with smtplib.SMTP(sandbox.smtp_host, sandbox.smtp_port) as smtp:
        smtp.login(sandbox.username, sandbox.password)
        smtp.send_message(receipt("customer@example.org"))
    msg = sandbox.wait_for(timeout=20)
    msg.assert_checks(content="ok")
"""


def test_checks_and_assert_checks_in_a_test_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=CHECKS_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * inboxd: message 'Your receipt' fell short of its checks:",
            "E *   - html_support: * is below 99.5% (worst: *",
            "E *   - spam_score_below: spam is not configured on the server, so there is no score (*RSPAMD_URL*)",
            "E *   - dkim: wanted 'pass', but the message has no DKIM signature",
            "E *   - content: wanted 'no-errors', got 'error': error broken_cid at cid:logo*",
        ]
    )
    # links="ok" held (no links), so it is not listed
    assert "  - links:" not in result.stdout.str()
    # the sandbox's message is judged through the same route: content "ok" fails on the warnings too
    result.stdout.fnmatch_lines(["E *   - content: wanted 'ok', got 'error': *missing_text_part*"])


RAW = b"From: a@example.com\r\nTo: b@example.net\r\nSubject: s\r\nMessage-ID: <1@example.com>\r\n\r\nhi\r\n"


def test_spam_score_and_dkim_results_are_judged() -> None:
    report = judge_message(RAW)
    scored = msgspec.structs.replace(
        report,
        spam=SpamPart(
            verdict="warning",
            configured=True,
            score=7.5,
            required=15.0,
            action="add header",
            symbols=[SpamSymbol(name="GTUBE", score=0.0), SpamSymbol(name="MISSING_DATE", score=7.5)],
        ),
        auth=AuthPart(
            verdict="error",
            dkim=[
                DkimSignature(domain="example.com", selector="s1", result="pass"),
                DkimSignature(domain="example.com", selector="s2", result="fail", error="body hash mismatch"),
            ],
        ),
    )
    assert shortfalls(scored, spam_score_below=5, dkim="pass") == [
        "spam_score_below: score 7.5 is not below 5 (top symbols: MISSING_DATE 7.5)",
        "dkim: wanted 'pass', got fail for d=example.com s=s2 (body hash mismatch)",
    ]
    assert shortfalls(scored, spam_score_below=8) == []


def test_a_skipped_part_never_passes() -> None:
    report = judge_message(RAW)  # authentication skipped, spam not configured, no HTML
    assert shortfalls(report, dkim="pass", spam_score_below=100, html_support=0) == [
        f"html_support: wanted at least 0%, but the part was skipped: {report.html.reason}",
        f"spam_score_below: spam is not configured on the server, so there is no score ({report.spam.reason})",
        f"dkim: wanted 'pass', but authentication was skipped: {report.auth.reason}",
    ]
    assert shortfalls(report) == []
    with pytest.raises(ValueError, match="links must be one of"):
        shortfalls(report, links="fine")  # type: ignore[arg-type]
