"""An example application's own test suite, as a user would write it with the pytest plugin's
`mailbox.faults(...)` and `mailbox.greylist(...)`: it proves the application retries on 452 and
421, backs off under `rate`, gets through greylisting, and reports a dropped connection. The
suite runs under pytester on two pytest-xdist workers against one inboxd, so the two workers'
faults, on different mailboxes, must not reach each other."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import Harness

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# The application under test: a mailer that retries what SMTP says is temporary, with backoff.
MAILER = '''
import smtplib
import time
from email.message import EmailMessage


class DeliveryFailed(Exception):
    pass


class Mailer:
    def __init__(self, host, port, *, attempts=6, backoff=0.25):
        self.host, self.port = host, port
        self.attempts, self.backoff = attempts, backoff
        self.waits = []  # the backoff delays taken, for the tests to see

    def send(self, to, subject, body):
        """Send; retry 4xx replies and dropped connections; give up on 5xx. Returns the attempts used."""
        message = EmailMessage()
        message["From"] = "app@example.com"
        message["To"] = to
        message["Subject"] = subject
        message.set_content(body)
        last = None
        for attempt in range(1, self.attempts + 1):
            try:
                with smtplib.SMTP(self.host, self.port, timeout=10) as smtp:
                    smtp.send_message(message)
                return attempt
            except smtplib.SMTPRecipientsRefused as exc:
                code = next(iter(exc.recipients.values()))[0]
                if code >= 500:
                    raise DeliveryFailed(f"refused: {code}") from exc
                last = exc
            except smtplib.SMTPResponseException as exc:
                if exc.smtp_code >= 500:
                    raise DeliveryFailed(f"refused: {exc.smtp_code}") from exc
                last = exc
            except (smtplib.SMTPServerDisconnected, ConnectionError) as exc:
                last = exc
            delay = self.backoff * 2 ** (attempt - 1)
            self.waits.append(delay)
            time.sleep(delay)
        raise DeliveryFailed(f"gave up after {self.attempts} attempts: {last!r}")
'''

SUITE = """
import os
import time
from pathlib import Path

import pytest

from mailer import DeliveryFailed, Mailer


@pytest.fixture
def mailer(inboxd):
    return Mailer(inboxd.smtp_host, inboxd.smtp_port)


def test_retries_a_full_mailbox(mailer, mailbox):
    with mailbox.faults(rcpt="452 4.2.2 Mailbox full", times=2):
        assert mailer.send(mailbox.address, "Welcome", "Hi") == 3
    assert mailbox.wait_for(timeout=10).subject == "Welcome"


def test_retries_a_server_that_closes_with_421(mailer, mailbox):
    with mailbox.faults(data="421 4.3.2 Service shutting down", times=1):
        assert mailer.send(mailbox.address, "Receipt", "Paid") == 2
    assert mailbox.wait_for(timeout=10).subject == "Receipt"


def test_backs_off_under_a_rate_limit(mailer, mailbox):
    rate = {"stage": "rcpt", "rate": {"messages": 2, "per_s": 1, "reply": "451 4.7.0 Slow down"}}
    with mailbox.faults(rate):
        started = time.monotonic()
        used = [mailer.send(mailbox.address, f"Digest {n}", "...") for n in range(3)]
    assert used[:2] == [1, 1] and used[2] > 1  # the third waited for the window
    assert mailer.waits and time.monotonic() - started >= 0.25
    assert len(mailbox.messages()) == 3


def test_gets_through_greylisting(mailer, mailbox):
    with mailbox.greylist(min_retry_s=1):
        assert mailer.send(mailbox.address, "Verify", "Code 1234") > 1
        assert sum(mailer.waits) >= 1  # it came back after the greylisting delay
    assert mailbox.wait_for(timeout=10).code == "1234"


def test_reports_a_dropped_connection(mailer, mailbox):
    mailer.attempts = 2
    with mailbox.faults({"stage": "data", "disconnect": True}):
        with pytest.raises(DeliveryFailed, match="gave up after 2 attempts"):
            mailer.send(mailbox.address, "Lost", "...")
    assert mailbox.messages() == []


def test_a_permanent_refusal_is_not_retried(mailer, mailbox):
    with mailbox.faults(rcpt="550 5.1.1 No such user"):
        with pytest.raises(DeliveryFailed, match="refused: 550"):
            mailer.send(mailbox.address, "Nope", "...")
    assert mailer.waits == []


# Run on every worker at once (`--dist each`): gw0 holds faults on its mailbox while gw1 sends
# to its own, and the two wait for each other so the windows overlap.
def test_parallel_workers_keep_their_faults_apart(mailer, mailbox, worker_id):
    here = Path(os.environ["RENDEZVOUS"])

    def wait_for_file(name):
        deadline = time.monotonic() + 60
        while not (here / name).exists():
            assert time.monotonic() < deadline, f"the other worker never wrote {name}"
            time.sleep(0.05)

    if worker_id == "gw0":
        with mailbox.faults(rcpt="550 5.7.1 This worker's mailbox only"):
            (here / "faults-on").touch()
            wait_for_file("healthy-done")
            with pytest.raises(DeliveryFailed, match="refused: 550"):
                mailer.send(mailbox.address, "Refused", "...")
    else:
        wait_for_file("faults-on")
        for n in range(5):
            assert mailer.send(mailbox.address, f"Clean {n}", "...") == 1
        (here / "healthy-done").touch()
        assert len(mailbox.messages()) == 5
"""


SANDBOX_SUITE = """
def test_faults_are_cleared_even_when_the_test_fails(sandbox):
    with sandbox.faults(auth="454 4.7.0 Temporary authentication failure", times=1):
        assert [r["stage"] for r in sandbox.client.sandbox_faults()] == ["auth"]
        raise AssertionError("the test fails inside the block")
"""


def _args(harness: Harness, *extra: str) -> tuple[str, ...]:
    url = f"http://127.0.0.1:{harness.server.http_port}"
    smtp = f"127.0.0.1:{harness.server.smtp_port}"
    return (
        "-p",
        "no:cacheprovider",
        *extra,
        "--inboxd-url",
        url,
        "--inboxd-token",
        harness.admin_token,
        "--inboxd-smtp",
        smtp,
    )


@sqlite_only
async def test_an_example_apps_suite_proves_each_fault_on_two_xdist_workers(
    harness: Harness, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test runs on both workers at once (`--dist each`), each with its own mailbox: a fault
    that reached the other worker's mailbox would break its counts (`times`, `rate`, greylisting)."""
    pytester.makepyfile(mailer=MAILER, test_app=SUITE)
    rendezvous = pytester.path / "rendezvous"
    rendezvous.mkdir()
    monkeypatch.setenv("RENDEZVOUS", str(rendezvous))
    result = await asyncio.to_thread(
        pytester.runpytest_subprocess, *_args(harness, "-n", "2", "--dist", "each"), timeout=240
    )
    result.assert_outcomes(passed=14)
    assert "2 workers" in result.stdout.str()
    assert {p.name for p in rendezvous.iterdir()} == {"faults-on", "healthy-done"}


@sqlite_only
async def test_the_plugin_clears_faults_when_the_test_fails(harness: Harness, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=SANDBOX_SUITE)
    # The harness's admin is this test's own user: its sandbox may be emptied.
    args = _args(harness, "--inboxd-empty-sandbox")
    result = await asyncio.to_thread(pytester.runpytest_subprocess, *args, timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the test fails inside the block*"])
    left = await harness.http.get("/api/user/sandbox/faults", headers=harness.auth())
    assert left.json() == {"rules": []}
