"""The SMTP transaction line written straight to `logs.configure`'s handler is the line the record
path writes, and any other logging set-up (a raised level, a disabled logger, a handler, a filter,
JSON) is honoured: the line then goes the usual way, or nowhere (as `tests/test_access_line.py`
checks for the HTTP access line). The line comes from a real session of a real `SmtpServer` (the
engine's own `Transaction._record`), with recipients the ingest service resolved."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator

import pytest

from inboxd import logs
from inboxd.services.ingest import Recipient
from inboxd.smtp.server import SmtpServer
from inboxd.smtp.session import Session
from tests.conftest import Harness

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
SMTP = logging.getLogger("inboxd.smtp")

# (peer, sender, mailbox addresses, reply): a plain one, then control characters, a forged line, a
# token-shaped sender and an empty envelope, each taking the scrubbing, quoting and "-" paths.
CASES: list[tuple[str, str | None, list[str], str]] = [
    ("127.0.0.1", "a@example.test", ["box@inboxd.localhost"], "250 2.0.0 OK: queued as 0123456789abcdef"),
    (
        "::1",
        "x\r\n2026-01-01 00:00:00,000 INFO forged\x1b[2J\u2028ibx_" + "a" * 20 + "@example.test",
        ["one@inboxd.localhost", "two@inboxd.localhost"],
        '550 5.7.1 "no" = no',
    ),
    ("10.0.0.1", None, [], "452 4.3.1 Insufficient system storage"),
]


pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
Case = tuple[str, str | None, list[str], str]
Direct = Callable[[Case], None]


@pytest.fixture
async def write_line(harness: Harness) -> Direct:
    """Write a case's line as the engine does at a transaction's end: a session of a real listener
    (not started: no socket is needed to write a line), its envelope as RCPT would have left it."""
    server = SmtpServer(harness.server.services.ingest, settings=harness.server.settings)
    recipients: dict[str, Recipient] = {}
    for address in sorted({a for case in CASES for a in case[2]}):
        await harness.new_mailbox(local=address.partition("@")[0])
        recipients[address] = await harness.server.services.ingest.resolve(address, declared_size=None)

    def write(case: Case) -> None:
        peer, sender, mailboxes, reply = case
        session = Session(server)
        session.peer, session.sender = peer, sender
        session.recipients = [recipients[a] for a in mailboxes]
        session._record(reply, size=4233, seconds=0.0092811, stage="DATA")

    return write


def _outcome(reply: str) -> str:
    return "accepted" if reply.startswith("250") else "deferred" if reply[0] == "4" else "rejected"


def _by_record(case: Case) -> None:
    """The same line made the usual way: a record through the logger and its handlers."""
    peer, sender, mailboxes, reply = case
    SMTP.info(
        "smtp transaction %s",
        _outcome(reply),
        extra={
            "fields": {
                "client": peer,
                "from": sender if sender is not None else "-",
                "mailbox": ",".join(mailboxes) or "-",
                "size": 4233,
                "stage": "DATA",
                "reply": reply,
                "ms": 9.28,
            }
        },
    )


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """`logs.configure`'s set-up, writing to a string; the logging set-up put back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    out = io.StringIO()
    logs.configure(level="info", fmt="text")
    root.handlers[0].setStream(out)  # type: ignore[attr-defined]
    try:
        yield out
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.logThreads, logging.logProcesses, logging.logMultiprocessing = saved[2:]
        SMTP.setLevel(logging.NOTSET)
        SMTP.disabled = False
        SMTP.propagate = True


def _only_configured() -> None:
    """Take away the handlers pytest's log capture puts on the root logger for a test's body."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if isinstance(h.formatter, logs.TextFormatter | logs.JsonFormatter)]


def _clear(stream: io.StringIO) -> None:
    stream.seek(0)
    stream.truncate()


def test_the_direct_line_is_the_records_line(
    write_line: Direct, stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only_configured()

    def no_record(*args: object, **kwargs: object) -> logging.LogRecord:
        raise AssertionError("the line was made as a record")

    for case in CASES:
        for rid in ("rid-1", ""):
            assert logs.write_info(SMTP, "x", {}) is True  # the direct path is taken
            token = logs.request_id.set(rid)
            try:
                _clear(stream)
                with monkeypatch.context() as patched:
                    patched.setattr(SMTP, "makeRecord", no_record)
                    write_line(case)
                direct = stream.getvalue()
                _clear(stream)
                _by_record(case)
                recorded = stream.getvalue()
            finally:
                logs.request_id.reset(token)
            assert direct.endswith("\n") and direct.count("\n") == 1, direct
            assert STAMP.match(direct) and STAMP.match(recorded)
            assert STAMP.sub("", direct) == STAMP.sub("", recorded)
            assert "\r" not in direct and "\x1b" not in direct and "ibx_aaaa" not in direct


def test_a_raised_level_or_disabled_logger_writes_nothing(write_line: Direct, stream: io.StringIO) -> None:
    _only_configured()
    assert logs.write_info(SMTP, "x", {}) is True
    _clear(stream)
    SMTP.setLevel(logging.WARNING)
    write_line(CASES[0])
    SMTP.setLevel(logging.NOTSET)
    SMTP.disabled = True
    write_line(CASES[0])
    SMTP.disabled = False
    logging.getLogger().handlers[0].setLevel(logging.WARNING)
    write_line(CASES[0])
    assert stream.getvalue() == ""


def test_a_handler_or_filter_added_sees_the_record(
    write_line: Direct, stream: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="inboxd.smtp")
    write_line(CASES[0])
    assert [r.getMessage() for r in caplog.records] == ["smtp transaction accepted"]
    assert caplog.records[0].fields["size"] == 4233  # type: ignore[attr-defined]
    assert "smtp transaction accepted" in stream.getvalue()  # and the configured handler too
    caplog.handler.setLevel(logging.WARNING)  # out of the way for what follows
    dropped: list[str] = []

    def drop(record: logging.LogRecord) -> bool:
        dropped.append(record.getMessage())
        return False

    SMTP.addFilter(drop)
    try:
        before = stream.getvalue()
        write_line(CASES[0])
        assert dropped == ["smtp transaction accepted"] and stream.getvalue() == before
    finally:
        SMTP.removeFilter(drop)
    SMTP.propagate = False
    write_line(CASES[0])
    assert stream.getvalue() == before  # no handler reached: nothing written by the direct path


def test_the_json_format_goes_the_usual_way(write_line: Direct) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    logs.configure(level="info", fmt="json")
    root.handlers[0].setStream(out)  # type: ignore[attr-defined]
    _only_configured()
    try:
        assert logs.write_info(SMTP, "x", {}) is False
        write_line(CASES[0])
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    line = json.loads(out.getvalue())
    assert line["message"] == "smtp transaction accepted" and line["mailbox"] == "box@inboxd.localhost"
    assert line["ms"] == 9.28
