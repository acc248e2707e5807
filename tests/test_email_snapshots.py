"""The `email_snapshot` fixture (issue 28), run by pytest's own `pytester` against the embedded
inboxd: a missing snapshot is written and fails, the same mail then passes (its dates, code, link
token and mailbox address differ every run), a changed subject, body line or image fails with a
readable diff, `--inboxd-update-snapshots` accepts the change. The normalized form is also checked
directly."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image

from inboxd.testing.snapshots import image_difference, normalize, pretty_html

SUITE = """
import os
import secrets
import smtplib
from email.message import EmailMessage
from email.utils import formatdate, make_msgid


def send(inboxd, to):
    code = f"{secrets.randbelow(900000) + 100000}"
    token = secrets.token_urlsafe(12)
    message = EmailMessage()
    message["From"] = "Shop <shop@example.com>"
    message["To"] = to
    message["Subject"] = os.environ.get("SUBJECT", "Verify your email")
    message["Date"] = formatdate()
    message["Message-ID"] = make_msgid()
    line = os.environ.get("LINE", "Thanks for signing up.")
    message.set_content(f"{line}\\nYour code is {code}.\\nSent {formatdate()} to {to}.\\n"
                        f"https://shop.example/verify?token={token}&lang=en")
    colour = os.environ.get("COLOUR", "#0a7d32")
    message.add_alternative(
        f"<p>{line}</p><p>Your code is <b>{code}</b>.</p>"
        f"<div style='background:{colour};height:120px'>Banner</div>"
        f"<p><a href='https://shop.example/verify?token={token}&lang=en'>Verify</a></p>",
        subtype="html",
    )
    with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port) as smtp:
        smtp.send_message(message)


def test_welcome(inboxd, mailbox, email_snapshot):
    send(inboxd, mailbox.address)
    msg = mailbox.wait_for(timeout=20)
    email_snapshot.assert_match(msg, image=os.environ.get("IMAGE") == "1", width=375)
"""


@dataclass
class Runs:
    pytester: pytest.Pytester
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, **env: str) -> pytest.RunResult:
        mp = pytest.MonkeyPatch()
        try:
            for name in ("SUBJECT", "LINE", "COLOUR", "IMAGE"):
                mp.delenv(name, raising=False)
            for name, value in env.items():
                mp.setenv(name, value)
            return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=240)
        finally:
            mp.undo()

    @property
    def snapshots(self) -> Path:
        return self.pytester.path / "__email_snapshots__" / "test_mail"


@pytest.fixture
def runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Runs:
    # These runs are a developer's, where a missing snapshot is written to be reviewed; under CI it
    # fails unwritten (tests/test_email_snapshots_trust.py), and this suite runs under CI too.
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_mail=SUITE)
    return Runs(pytester)


def test_text_snapshots_written_matched_diffed_and_updated(runs: Runs) -> None:
    first = runs.run()
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*e-mail snapshot *test_welcome.txt did not exist: written now*"])
    stored = (runs.snapshots / "test_welcome.txt").read_text()
    assert "Subject: Verify your email" in stored
    assert "Your code is <code>." in stored and "Sent <date> to <mailbox>." in stored
    assert "verify?token=<token>&lang=<token>" in stored
    assert "<b>\n" in stored  # the HTML is pretty-printed, one node a line

    runs.run().assert_outcomes(passed=1)  # a new code, token, date and mailbox: all masked

    changed = runs.run(SUBJECT="Verify your e-mail address")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "*e-mail snapshot *test_welcome.txt differs (--inboxd-update-snapshots accepts the change):",
            "*-Subject: Verify your email",
            "*+Subject: Verify your e-mail address",
        ]
    )
    line = runs.run(LINE="Thanks for joining.")
    line.assert_outcomes(failed=1)
    line.stdout.fnmatch_lines(["*-Thanks for signing up.", "*+Thanks for joining."])

    runs.run("--inboxd-update-snapshots", LINE="Thanks for joining.").assert_outcomes(passed=1)
    assert "Thanks for joining." in (runs.snapshots / "test_welcome.txt").read_text()
    runs.run(LINE="Thanks for joining.").assert_outcomes(passed=1)


def test_image_snapshots_written_matched_diffed_and_updated(runs: Runs) -> None:
    first = runs.run(IMAGE="1")
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*e-mail snapshot image *test_welcome.375.png did not exist: written now*"])
    stored = runs.snapshots / "test_welcome.375.png"
    assert Image.open(stored).size == (375, 800)

    runs.run(IMAGE="1").assert_outcomes(passed=1)

    changed = runs.run(IMAGE="1", COLOUR="#c0392b")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        ["*e-mail snapshot image *test_welcome.375.png differs in *% of its pixels*test_welcome.375.actual.png*"]
    )
    actual, diff = runs.snapshots / "test_welcome.375.actual.png", runs.snapshots / "test_welcome.375.diff.png"
    assert Image.open(actual).convert("RGB").getpixel((100, 150)) != Image.open(stored).convert("RGB").getpixel(
        (100, 150)
    )
    assert Image.open(diff).convert("RGB").getpixel((100, 150)) == (255, 0, 0)
    # The text shows the change too, in the style attribute.
    changed.stdout.fnmatch_lines(['*-<div style="background:#0a7d32;height:120px">'])

    runs.run("--inboxd-update-snapshots", IMAGE="1", COLOUR="#c0392b").assert_outcomes(passed=1)
    assert not actual.exists() and not diff.exists()
    runs.run(IMAGE="1", COLOUR="#c0392b").assert_outcomes(passed=1)


@dataclass
class Detail:
    id: str = "m1"
    address: str = "test-abc@inboxd.localhost"
    subject: str = "Hi"
    text_body: str = ""
    html_body: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    codes: tuple[str, ...] = ()
    attachments: tuple[object, ...] = ()


def test_normalized_form_masks_what_changes_between_runs() -> None:
    detail = Detail(
        headers=(
            ("From", "Shop <shop@example.com>"),
            ("To", "test-ABC@inboxd.localhost"),
            ("Subject", "Hi"),
            ("Message-ID", "<abc.123@shop.example>"),
            ("Date", "Tue, 3 Feb 2026 10:00:00 +0000"),
            ("Content-Type", 'multipart/alternative; boundary="===============123456=="'),
        ),
        text_body="Code 482913, on 2026-02-03T10:00:00Z.\n--===============123456==\nhttps://x.example/a?t=abc&u=1#top",
        html_body='<p onclick="x()">Hi <img src="data:image/png;base64,AAAA"><script>bad()</script></p>',
        codes=("482913",),
    )
    text = normalize(detail, headers=("From", "To", "Subject", "Message-ID", "Date"), masks=[(r"Hi\b", "Hello")])
    assert text.splitlines()[:5] == [
        "From: Shop <shop@example.com>",
        "To: <mailbox>",
        "Subject: Hello",
        "Message-ID: <message-id>",
        "Date: <date>",
    ]
    assert "Code <code>, on <date>." in text
    assert "--<boundary>" in text
    assert "https://x.example/a?t=<token>&u=<token>#top" in text
    assert "onclick" not in text and "bad()" not in text
    assert re.search(r'<img src="data:image/png<[0-9a-f]{12}>">', text)


def test_pretty_html_is_one_node_a_line() -> None:
    assert pretty_html("<table><tr><td>a  b</td></tr></table>").splitlines() == [
        "<table>",
        "  <tbody>",
        "    <tr>",
        "      <td>",
        "        a b",
        "      </td>",
        "    </tr>",
        "  </tbody>",
        "</table>",
    ]


def test_image_difference_counts_pixels_beyond_the_threshold() -> None:
    base = Image.new("RGB", (10, 10), (255, 255, 255))
    near = Image.new("RGB", (10, 10), (250, 250, 250))
    assert image_difference(base, near)[0] == 0.0
    spot = base.copy()
    spot.putpixel((3, 3), (0, 0, 0))
    share, picture = image_difference(base, spot)
    assert share == 0.01 and picture.getpixel((3, 3)) == (255, 0, 0)
    assert image_difference(base, Image.new("RGB", (10, 11)))[0] == 1.0
