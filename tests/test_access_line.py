"""The access line written straight to `logs.configure`'s handler is the line the record path
writes, and any other logging set-up (a raised level, a disabled logger, a handler, a filter,
JSON) is honoured: the line then goes the usual way, or nowhere."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from inboxd import logs
from inboxd.api.observe import log_access
from inboxd.http.client_address import scope_client_address

# The time, to the millisecond, is the one part of a line that differs between two writes.
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")

SCOPES: list[dict[str, Any]] = [
    {"method": "GET", "path": "/api/accounts/abc/messages", "client": ("127.0.0.1", 5000), "headers": []},
    # Control characters, a line separator, a sign-in link's secret and a token in the path, a
    # client address needing quotes: each takes the scrubbing and quoting paths.
    {
        "method": "GET",
        "path": "/x\r\n2026-01-01 00:00:00,000 INFO forged\x1b[2J\u2028/auth/link/s3cret/ibx_" + "a" * 20,
        "client": ("::1", 5000),
        "headers": [],
    },
    {"method": "GET", "path": "/", "client": None, "headers": []},
]


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
        http = logging.getLogger("inboxd.http")
        http.setLevel(logging.NOTSET)
        http.disabled = False
        http.propagate = True


def _only_configured() -> None:
    """Take away the handlers pytest's log capture puts on the root logger for a test's body."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if isinstance(h.formatter, logs.TextFormatter | logs.JsonFormatter)]


def _access(scope: dict[str, Any], rid: str = "rid-1") -> None:
    token = logs.request_id.set(rid)
    try:
        log_access(scope, status=200, route="/api/accounts/{mailbox}/messages", size=1234, elapsed=0.0012345)
    finally:
        logs.request_id.reset(token)


def _by_record(scope: dict[str, Any], rid: str = "rid-1") -> None:
    """The same line made the usual way: a record through the logger and its handlers."""
    token = logs.request_id.set(rid)
    try:
        logging.getLogger("inboxd.http").info(
            "%s %s %d",
            scope["method"],
            scope["path"],
            200,
            extra={
                "fields": {
                    "client": scope_client_address(scope, ()),
                    "route": "/api/accounts/{mailbox}/messages",
                    "bytes": 1234,
                    "ms": 1.23,
                }
            },
        )
    finally:
        logs.request_id.reset(token)


def test_the_direct_line_is_the_records_line(stream: io.StringIO) -> None:
    _only_configured()
    handler = logging.getLogger().handlers[0]
    for scope in SCOPES:
        for rid in ("rid-1", ""):
            assert logs.write_info(logging.getLogger("inboxd.http"), "x", {}) is True  # the direct path is taken
            stream.seek(0)
            stream.truncate()
            _access(scope, rid)
            direct = stream.getvalue()
            stream.seek(0)
            stream.truncate()
            _by_record(scope, rid)
            recorded = stream.getvalue()
            assert direct.endswith("\n") and direct.count("\n") == 1, direct
            assert STAMP.match(direct) and STAMP.match(recorded)
            assert STAMP.sub("", direct) == STAMP.sub("", recorded)
            assert "\r" not in direct and "\x1b" not in direct and "s3cret" not in direct
    assert handler.formatter is not None


def test_a_raised_level_or_disabled_logger_writes_nothing(stream: io.StringIO) -> None:
    _only_configured()
    assert logs.write_info(logging.getLogger("inboxd.http"), "x", {}) is True
    stream.seek(0)
    stream.truncate()
    http = logging.getLogger("inboxd.http")
    http.setLevel(logging.WARNING)
    _access(SCOPES[0])
    http.setLevel(logging.NOTSET)
    http.disabled = True
    _access(SCOPES[0])
    http.disabled = False
    logging.getLogger().handlers[0].setLevel(logging.WARNING)
    _access(SCOPES[0])
    assert stream.getvalue() == ""


def test_a_handler_or_filter_added_sees_the_record(stream: io.StringIO, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inboxd.http")
    _access(SCOPES[0])
    assert [r.getMessage() for r in caplog.records] == ["GET /api/accounts/abc/messages 200"]
    assert caplog.records[0].fields["bytes"] == 1234  # type: ignore[attr-defined]
    assert "GET /api/accounts/abc/messages 200" in stream.getvalue()  # and the configured handler too
    caplog.handler.setLevel(logging.WARNING)  # out of the way for what follows
    http = logging.getLogger("inboxd.http")
    dropped: list[str] = []

    def drop(record: logging.LogRecord) -> bool:
        dropped.append(record.getMessage())
        return False

    http.addFilter(drop)
    try:
        before = stream.getvalue()
        _access(SCOPES[0])
        assert dropped == ["GET /api/accounts/abc/messages 200"] and stream.getvalue() == before
    finally:
        http.removeFilter(drop)
    http.propagate = False
    _access(SCOPES[0])
    assert stream.getvalue() == before  # no handler reached: nothing written by the direct path


def test_the_json_format_goes_the_usual_way() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    logs.configure(level="info", fmt="json")
    root.handlers[0].setStream(out)  # type: ignore[attr-defined]
    _only_configured()
    try:
        assert logs.write_info(logging.getLogger("inboxd.http"), "x", {}) is False
        _access(SCOPES[0])
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    line = json.loads(out.getvalue())
    assert line["message"] == "GET /api/accounts/abc/messages 200" and line["request_id"] == "rid-1"
