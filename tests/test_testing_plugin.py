"""The pytest plugin, run by pytest's own `pytester`: the embedded inboxd, a running one given by
`--inboxd-url`, the `mailbox` and `sandbox` fixtures, what a failed wait says, and the README's
example as written against a running inboxd. `wait_for`'s order is also checked directly, against
a server whose clock the test holds still."""

from __future__ import annotations

import asyncio
import contextlib
import os
import smtplib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.client import Client
from inboxd.testing import TestMailbox
from tests.conftest import Harness, send_mail, simple_message
from tests.serverproc import ServerProcess

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
ROOT = Path(__file__).resolve().parents[1]

EMBEDDED_SUITE = """
import smtplib
from email.message import EmailMessage

import pytest

SEEN = []


def send(inboxd, to, subject, body):
    message = EmailMessage()
    message["From"] = "Shop <shop@example.com>"
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port) as smtp:
        smtp.send_message(message)


def test_code_and_links(inboxd, mailbox):
    SEEN.append(mailbox.address)
    assert inboxd.embedded and mailbox.address.startswith("test-")
    inboxd.send(mailbox.address, subject="Verify your email",
                text="Your code is 734 112.\\nOr open https://shop.example/verify?t=9")
    msg = mailbox.wait_for(subject="Verify", timeout=20)
    assert msg.code == "734112"
    assert msg.links[0].url == "https://shop.example/verify?t=9"
    assert [m.subject for m in mailbox.messages()] == ["Verify your email"]


def test_each_wait_returns_a_newer_message(inboxd, mailbox):
    SEEN.append(mailbox.address)
    send(inboxd, mailbox.address, "Your code", "Code: 1111")
    assert mailbox.wait_for(timeout=20).code == "1111"
    send(inboxd, mailbox.address, "Your code", "Code: 2222")
    assert mailbox.wait_for(subject="code", timeout=20).code == "2222"


def test_mailboxes_are_deleted_after_each_test(inboxd):
    from inboxd.client import ApiError
    assert len(SEEN) == 2 and SEEN[0] != SEEN[1]
    for address in SEEN:
        with pytest.raises(ApiError, match="404"):
            inboxd.client.mailbox(address)


def test_failed_wait(inboxd, mailbox):
    send(inboxd, mailbox.address, "Welcome aboard", "Hello!")
    mailbox.wait_for(timeout=10)
    mailbox.wait_for(subject="Reset your password", timeout=1)


def test_the_embedded_servers_sandbox_is_the_runs_own(sandbox):
    message = EmailMessage()
    message["From"] = "app@example.com"
    message["To"] = "customer@example.org"
    message["Subject"] = "Receipt"
    message.set_content("Order 12 is paid.")
    with smtplib.SMTP(sandbox.smtp_host, sandbox.smtp_port) as smtp:
        smtp.login(sandbox.username, sandbox.password)
        smtp.send_message(message)
    assert sandbox.wait_for(timeout=20).subject == "Receipt"
"""

REMOTE_SUITE = """
import os
import smtplib
from email.message import EmailMessage


def test_uses_the_given_server(inboxd, mailbox):
    assert not inboxd.embedded and inboxd.url == os.environ["EXPECTED_URL"]
    inboxd.send(mailbox.address, subject="Hi", text="PIN: 9090")
    assert mailbox.wait_for(timeout=20).code == "9090"


def test_sandbox(sandbox):
    message = EmailMessage()
    message["From"] = "app@example.com"
    message["To"] = "customer@example.org"
    message["Subject"] = "Confirm your account"
    message.set_content("Your confirmation code: QX7K2M")
    with smtplib.SMTP(sandbox.smtp_host, sandbox.smtp_port) as smtp:
        smtp.login(sandbox.username, sandbox.password)
        smtp.send_message(message)
    msg = sandbox.wait_for(subject="Confirm", timeout=20)
    assert msg.code == "QX7K2M" and msg.recipients == ("customer@example.org",)
    assert [m.subject for m in sandbox.messages()] == ["Confirm your account"]
"""


def test_embedded_inboxd(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=EMBEDDED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * inboxd: a message with subject='Reset your password' newer than the one the previous wait_for "
            "returned did not arrive at test-*@* within 1 s.",
            "E * What did arrive (1, newest first):",
            "E * - *  from 'Shop <shop@example.com>'  subject 'Welcome aboard'",
        ]
    )


async def test_running_inboxd_given_by_url(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await ServerProcess.start(tmp_path / "data", INBOXD_PRO_CREATE_INTERVAL="0", INBOXD_SUBMISSION_PORT="0")
    try:
        assert server.bootstrap_token is not None
        url = f"http://127.0.0.1:{server.http_port}"
        pytester.makepyfile(test_app=REMOTE_SUITE)
        monkeypatch.setenv("INBOXD_TOKEN", server.bootstrap_token)
        monkeypatch.setenv("EXPECTED_URL", url)
        monkeypatch.setenv("INBOXD_EMPTY_SANDBOX", "1")  # the bootstrap user is this test's own
        args = ("-p", "no:cacheprovider", "--inboxd-url", url, "--inboxd-smtp", f"127.0.0.1:{server.smtp_port}")
        result = await asyncio.to_thread(pytester.runpytest_subprocess, *args, timeout=240)
        result.assert_outcomes(passed=2)
        # The mailbox the test used is gone, the sandbox keeps what it captured.
        async with httpx.AsyncClient(base_url=url) as http:
            auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
            assert (await http.get("/api/user/accounts", headers=auth)).json()["accounts"] == []
            assert len((await http.get("/api/user/sandbox/messages", headers=auth)).json()["messages"]) == 1
    finally:
        await server.stop()


async def test_wait_for_returns_every_mail_once_oldest_first(make_settings: Any) -> None:
    """Mail that arrived before the first call, several in one millisecond, then mail that arrives
    during a call: each `wait_for` returns the next one in the server's order, none is skipped."""
    now = [time.time()]
    server = Inboxd(make_settings(), clock=lambda: now[0])
    await server.start()
    assert server.bootstrap_token is not None
    client = Client(f"http://127.0.0.1:{server.http_port}", server.bootstrap_token)
    try:
        created = await asyncio.to_thread(client.create_mailbox)
        box = TestMailbox(client, id=created.id, address=created.address)

        async def send(subject: str) -> None:
            await asyncio.to_thread(send_mail, server.smtp_port, box.address, simple_message(subject=subject))

        for subject in ("one", "two", "three"):  # the clock stands still: one millisecond, ordered by id
            await send(subject)
        now[0] += 1
        await send("four")
        now[0] += 0.001
        await send("five")
        listed = await asyncio.to_thread(box.messages)  # newest first
        assert len({m.created_at for m in listed[2:]}) == 1
        got = [await asyncio.to_thread(box.wait_for, timeout=5) for _ in listed]
        assert [m.id for m in got] == [m.id for m in reversed(listed)]

        # Nothing new yet: the call waits, and returns the next mail the moment it is committed.
        waiting = asyncio.ensure_future(asyncio.to_thread(box.wait_for, subject="six", timeout=20))
        await asyncio.sleep(0.3)
        now[0] += 1
        await send("six")
        assert (await asyncio.wait_for(waiting, 20)).subject == "six"
        with pytest.raises(AssertionError, match="newer than the one the previous wait_for returned"):
            await asyncio.to_thread(box.wait_for, timeout=0.2)
    finally:
        client.close()
        await server.stop()


SANDBOX_SUITE = """
def test_sandbox(sandbox):
    raise AssertionError("a free plan has no sandbox: the fixture skips")
"""


@sqlite_only
async def test_sandbox_fixture_skips_for_a_plan_without_one(harness: Harness, pytester: pytest.Pytester) -> None:
    token = await harness.new_user(plan="free")
    pytester.makepyfile(test_app=SANDBOX_SUITE)
    url = f"http://127.0.0.1:{harness.server.http_port}"
    args = ("-p", "no:cacheprovider", "-rs", "--inboxd-url", url, "--inboxd-token", token)
    result = await asyncio.to_thread(pytester.runpytest_subprocess, *args, timeout=120)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *the token's plan has no SMTP sandbox*"])


README_CONFTEST = """
import pytest

from tests.sign_up_app import sign_up_page


@pytest.fixture
def page(inboxd):
    with sign_up_page(inboxd) as tab:
        yield tab
"""


def readme_example() -> str:
    """The first Python block of the README's "Testing with inboxd", as written there."""
    section = (ROOT / "README.md").read_text().split("\n## Testing with inboxd\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@contextlib.asynccontextmanager
async def running_inboxd(where: str, make_settings: Any, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A running inboxd's URL and bootstrap token: in this process, or `inboxd serve` on its own."""
    if where == "in-process":
        server = Inboxd(make_settings())
        await server.start()
        try:
            assert server.bootstrap_token is not None
            yield f"http://127.0.0.1:{server.http_port}", server.bootstrap_token
        finally:
            await server.stop()
    else:
        process = await ServerProcess.start(tmp_path / "served", INBOXD_PRO_CREATE_INTERVAL="0")
        try:
            assert process.bootstrap_token is not None
            yield f"http://127.0.0.1:{process.http_port}", process.bootstrap_token
        finally:
            await process.stop()


@sqlite_only
@pytest.mark.parametrize("where", ["in-process", "inboxd serve"])
async def test_readme_example_against_a_running_inboxd(
    where: str, make_settings: Any, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given only `--inboxd-url` and a token, the plugin learns the SMTP address from the server
    (`GET /api/server`), so the application under test mails the code where inboxd receives it."""
    pytester.makeconftest(README_CONFTEST)
    pytester.makepyfile(test_readme=readme_example())
    paths = [str(ROOT / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # `tests.sign_up_app`, this tree's inboxd
    async with running_inboxd(where, make_settings, tmp_path) as (url, token):
        monkeypatch.setenv("INBOXD_TOKEN", token)
        args = ("-p", "no:cacheprovider", "--inboxd-url", url)
        result = await asyncio.to_thread(pytester.runpytest_subprocess, *args, timeout=240)
    result.assert_outcomes(passed=1)


SANDBOX_KEPT_SUITE = """
def test_sandbox(sandbox):
    assert sandbox.messages() == []
"""


@sqlite_only
async def test_sandbox_fixture_leaves_a_running_servers_sandbox_alone(
    harness: Harness, pytester: pytest.Pytester
) -> None:
    """Against a running server the token's user's sandbox may hold someone's mail: the fixture
    empties it only when told that it is the run's own (`--inboxd-empty-sandbox`)."""
    auth = harness.auth()
    info = (await harness.http.get("/api/user/sandbox", headers=auth)).json()

    def submit() -> None:
        with smtplib.SMTP("127.0.0.1", harness.server.submission_port, timeout=30) as smtp:
            smtp.login(info["username"], harness.admin_token)
            smtp.send_message(simple_message(subject="Someone's captured mail"))

    await asyncio.to_thread(submit)
    pytester.makepyfile(test_app=SANDBOX_KEPT_SUITE)
    url = f"http://127.0.0.1:{harness.server.http_port}"
    args = ("-p", "no:cacheprovider", "--inboxd-url", url, "--inboxd-token", harness.admin_token)
    result = await asyncio.to_thread(pytester.runpytest_subprocess, *args, timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*is not a server this run started: pass --inboxd-empty-sandbox*"])
    kept = (await harness.http.get("/api/user/sandbox/messages", headers=auth)).json()["messages"]
    assert [m["subject"] for m in kept] == ["Someone's captured mail"]

    told = await asyncio.to_thread(pytester.runpytest_subprocess, *args, "--inboxd-empty-sandbox", timeout=120)
    told.assert_outcomes(passed=1)
    assert (await harness.http.get("/api/user/sandbox/messages", headers=auth)).json()["messages"] == []
