"""The pytest plugin: command-line options and the `inboxd`, `mailbox` and `sandbox` fixtures
(and `email_snapshot`, from testing/snapshots.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

try:
    import pytest
except ImportError as exc:  # the entry point is only loaded by pytest, but an import by hand is not
    from inboxd.extras import install_command

    raise ImportError(f"inboxd's pytest plugin needs pytest: {install_command('pytest')}") from exc

from inboxd.client import ApiError
from inboxd.testing.mailbox import TestMailbox, TestSandbox
from inboxd.testing.server import InboxdServer, connect, start_embedded
from inboxd.testing.snapshots import add_options as add_snapshot_options
from inboxd.testing.snapshots import email_snapshot  # noqa: F401 - a fixture, found by pytest here


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inboxd", "inboxd: test e-mail")
    group.addoption(
        "--inboxd-url",
        default=None,
        help="Use the inboxd at this URL (else INBOXD_URL; else start one for the session).",
    )
    group.addoption("--inboxd-token", default=None, help="Its API token (else INBOXD_TOKEN).")
    group.addoption(
        "--inboxd-smtp",
        default=None,
        help="Its SMTP address as host:port (else INBOXD_SMTP; else what the server says, GET /api/server).",
    )
    group.addoption(
        "--inboxd-empty-sandbox",
        action="store_true",
        default=False,
        help="Let the `sandbox` fixture empty the token's user's SMTP sandbox before each test "
        "(else INBOXD_EMPTY_SANDBOX=1): give a token of a user kept for test runs.",
    )
    add_snapshot_options(group)


@pytest.fixture(scope="session")
def inboxd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InboxdServer]:
    """The inboxd of this test session: the one given by `--inboxd-url` / `INBOXD_URL` (with
    `--inboxd-token` / `INBOXD_TOKEN`), or else one started on free ports in a temporary directory."""
    config = request.config
    url = config.getoption("--inboxd-url") or os.environ.get("INBOXD_URL")
    if url:
        token = config.getoption("--inboxd-token") or os.environ.get("INBOXD_TOKEN")
        if not token:
            raise pytest.UsageError("--inboxd-url / INBOXD_URL needs an API token: --inboxd-token or INBOXD_TOKEN")
        smtp = config.getoption("--inboxd-smtp") or os.environ.get("INBOXD_SMTP")
        server = connect(url, token, smtp)
        server.sandbox_ours = bool(config.getoption("--inboxd-empty-sandbox")) or _flag("INBOXD_EMPTY_SANDBOX")
    else:
        server = start_embedded(tmp_path_factory.mktemp("inboxd"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def mailbox(inboxd: InboxdServer) -> Iterator[TestMailbox]:
    """A fresh mailbox on the server's default domain, deleted after the test."""
    created = inboxd.client.create_mailbox()
    box = TestMailbox(inboxd.client, id=created.id, address=created.address, token=created.token)
    try:
        yield box
    finally:
        try:
            inboxd.client.delete_mailbox(created.id)
        except ApiError as exc:
            if exc.status != 404:  # the test may have deleted it itself
                raise


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@pytest.fixture
def sandbox(inboxd: InboxdServer) -> Iterator[TestSandbox]:
    """The token's user's SMTP sandbox, emptied before the test (so tests using it run one at a
    time against one server). Skips the test when the server has no sandbox (404) or the token's
    plan has none (403 `pro_required`).

    Emptying deletes mail, so it happens only to a sandbox that is the run's own: the embedded
    server's, or, against a running server, the token's user's once `--inboxd-empty-sandbox` says
    that user is kept for tests. Otherwise the test errors, and the sandbox is left as it was."""
    try:
        info = inboxd.client.sandbox()
    except ApiError as exc:
        if exc.status == 404:
            pytest.skip("this inboxd has no SMTP sandbox")
        if exc.status == 403 and exc.code == "pro_required":
            pytest.skip(f"the token's plan has no SMTP sandbox: {exc.message}")
        raise
    if not inboxd.sandbox_ours:
        pytest.fail(
            f"inboxd: the `sandbox` fixture empties the SMTP sandbox of the token's user before each test, "
            f"and {inboxd.url} is not a server this run started: pass --inboxd-empty-sandbox "
            "(or INBOXD_EMPTY_SANDBOX=1) with a token of a user kept for test runs "
            "(`inboxd users create --email ci@example.com --plan pro`, then `inboxd tokens create`).",
            pytrace=False,
        )
    box = TestSandbox(inboxd.client, info, password=inboxd.token)
    box.purge()
    yield box
