"""Logging: one line per SMTP transaction, per webhook attempt and per HTTP request.

`INBOXD_LOG_FORMAT=text` (the default) writes `time level logger: message key=value …`;
`json` writes one JSON object per line for log shippers. A line logged while an HTTP request
is handled carries that request's id (`request_id`), which the answer returns in `X-Request-ID`.

Structured fields go in `extra={"fields": {...}}`. Every line passes `scrub` on its way out,
whoever logged it (uvicorn's WebSocket lines too):
- secrets are redacted: the sign-in link's secret in `/auth/link/{secret}`, every value of a
  query string (`?token=[redacted]`), and anything shaped like our API tokens (`ibx_…`),
  webhook secrets (`whsec_…`) or mailbox tokens (a JWT);
- control characters are escaped (`\\x0d`), so a request path holding CR/LF cannot write a second,
  forged line into the text log; a traceback's own lines are indented under their record.
Beyond that net, nothing that logs here passes a token, a password, a webhook secret or an
`Authorization` header; the tests grep the logs of a real server for them.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import json
import logging
import re
import sys
import threading
import time
from typing import Any, TextIO, cast

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("inboxd_request_id", default="")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[redacted]"

# C0, DEL, C1 and the Unicode line and paragraph separators: each can end or rewrite a line in a
# terminal or a line-based log reader.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LINK_SECRET = re.compile(r"(/auth/link/)[^/?#\s\"']+", re.IGNORECASE)
# A query string's values: only URLs carry `?name=value`, and none of their values is needed to
# read a log, while some (an OAuth `code`, a token a client put there) are secrets.
_QUERY_VALUE = re.compile(r"([?&;][^=&;?#\s\"']*=)[^&;#\s\"']+")
# A secret-named member of JSON text (a WebSocket frame logged at debug level).
_JSON_SECRET = re.compile(r'("(?:token|password|secret|csrf_token)"\s*:\s*")[^"]*"', re.IGNORECASE)
_TOKEN_SHAPED = re.compile(
    r"\b(ibx_)[A-Za-z0-9_-]{16,}"  # API tokens
    r"|\b(whsec_)[A-Za-z0-9+/]{16,}={0,2}"  # webhook secrets
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # mailbox tokens (JWT)
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _token(match: re.Match[str]) -> str:
    return (match.group(1) or match.group(2) or "") + REDACTED


def redact(text: str) -> str:
    """`text` with the secrets it may hold replaced by `[redacted]` (see the module docstring)."""
    # Each pattern runs only where a cheap look finds what it needs: this is on every request's line.
    if "link/" in text.lower():
        text = _LINK_SECRET.sub(r"\1" + REDACTED, text)
    if "?" in text and "=" in text:
        text = _QUERY_VALUE.sub(r"\1" + REDACTED, text)
    if '":' in text or '" :' in text:
        text = _JSON_SECRET.sub(r"\1" + REDACTED + '"', text)
    if "ibx_" in text or "whsec_" in text or "eyJ" in text:
        text = _TOKEN_SHAPED.sub(_token, text)
    return text


def scrub(text: str) -> str:
    """`text` redacted, and its control characters escaped: one log line's worth."""
    text = redact(text)
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def _scrub_lines(text: str) -> str:
    """A traceback or stack, scrubbed line by line: its own line breaks stay."""
    return "\n".join(scrub(line) for line in text.split("\n"))


def _clean(value: Any) -> Any:
    return scrub(value) if isinstance(value, str) else value


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    out: dict[str, Any] = {k: _clean(v) for k, v in fields.items()} if isinstance(fields, dict) else {}
    rid = getattr(record, "request_id", "")
    if rid:
        out["request_id"] = rid
    return out


class _RequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_id.get()
        return True


def _message(record: logging.LogRecord) -> str:
    return scrub(record.getMessage())


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(_TEXT)
        # The time to the second, formatted once per second: every HTTP request writes a line.
        self._second = -1
        self._second_text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return self._time(record.created, int(record.msecs))

    def _time(self, created: float, msecs: int) -> str:
        second = int(created)
        if second != self._second:
            self._second_text = time.strftime(self.default_time_format, self.converter(created))
            self._second = second
        return f"{self._second_text},{msecs:03d}"  # as logging.Formatter.default_msec_format

    def line(self, *, created: float, levelname: str, name: str, message: str, fields: str) -> str:
        """The line `format` writes for a record of these values with no exception or stack, the
        message already scrubbed and `fields` its `key=value …` text (`_fields_text`): what
        `format` does for such a record, without making one."""
        # `msecs` as `logging.LogRecord` computes it from `created`.
        head = f"{self._time(created, int((created - int(created)) * 1000))} {levelname} {name}: {message}"
        return head + " " + fields if fields else head

    def formatMessage(self, record: logging.LogRecord) -> str:
        # `format` has just set `message` from `getMessage()`.
        record.message = scrub(record.message)
        return super().formatMessage(record)

    # Every line of a traceback or stack is indented, so only a record's own first line starts
    # at the margin and an exception's text (which may quote a request) cannot pass for a record.
    def formatException(self, ei: Any) -> str:
        return _indent(_scrub_lines(super().formatException(ei)))

    def formatStack(self, stack_info: str) -> str:
        return _indent(_scrub_lines(super().formatStack(stack_info)))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _fields(record)
        if fields:
            head, newline, tail = line.partition("\n")
            line = _with_fields(head, fields) + newline + tail
        return line


def _with_fields(head: str, fields: dict[str, Any]) -> str:
    if not fields:
        return head
    return head + " " + " ".join([f"{k}={_text(v)}" for k, v in fields.items()])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.split("\n"))


# What makes a field's value quoted: a space, a quote, `=` or a backslash.
_NEEDS_QUOTES = re.compile(r'[ "=\\]')


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or _NEEDS_QUOTES.search(text)) else text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
            **_fields(record),
        }
        if record.exc_info:
            out["exception"] = _scrub_lines(self.formatException(record.exc_info))
        return json.dumps(out, default=str, ensure_ascii=False)


JsonFormatter.converter = time.gmtime


# `serve`'s lines are written out together: at most this many seconds after the first of them, or
# once this many characters wait, or at once for a warning or worse.
FLUSH_SECONDS = 0.2
FLUSH_CHARS = 64 * 1024


class BatchedLines:
    """A text stream that holds what is written and hands it to `target` in one write: every
    `FLUSH_SECONDS` (a thread of its own wakes for it), when `FLUSH_CHARS` wait, on `drain`, and at
    exit. A line per SMTP transaction and per HTTP request, each flushed on its own, cost a system
    call apiece (docs/performance.md, "Ingest's writes"); held together they cost one per batch.
    `flush` (which `logging` calls after every record) does nothing: a killed process loses at
    most the last `FLUSH_SECONDS` of lines, and a warning or worse is drained at once (`_LineHandler`)."""

    def __init__(self, target: TextIO, *, seconds: float = FLUSH_SECONDS, chars: int = FLUSH_CHARS) -> None:
        self._target = target
        self._seconds = seconds
        self._chars = chars
        self._parts: list[str] = []
        self._size = 0
        self._lock = threading.Lock()  # held while a batch is written, so batches keep their order
        self._waiting = threading.Event()
        threading.Thread(target=self._flusher, name="inboxd-log-flush", daemon=True).start()
        atexit.register(self.drain)

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            full = self._size >= self._chars
        if full:
            self.drain()
        else:
            self._waiting.set()
        return len(text)

    def flush(self) -> None:
        """Called by `logging` after each record: the lines wait for the batch."""

    def drain(self) -> None:
        with self._lock:
            if self._parts:
                text = "".join(self._parts)
                self._parts.clear()
                self._size = 0
                # A closed or broken stderr loses the batch, as `logging` loses a line it cannot
                # write; it must not end the flushing thread or fail the caller that drained.
                with contextlib.suppress(OSError, ValueError):
                    self._target.write(text)
                    self._target.flush()

    def _flusher(self) -> None:
        while True:
            self._waiting.wait()
            time.sleep(self._seconds)
            self._waiting.clear()
            self.drain()


class _LineHandler(logging.StreamHandler[TextIO]):
    """The handler `configure` installs, known by its type to `write_info`."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if record.levelno >= logging.WARNING and isinstance(self.stream, BatchedLines):
            self.stream.drain()


def _direct_handler(logger: logging.Logger, level: int) -> _LineHandler | None:
    """The one handler a record of `logger` at `level` would reach, when that is `configure`'s
    text handler as it set it up (its filter, its formatter) and nothing else would see the
    record; else None."""
    if logger.filters:
        return None
    found: _LineHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None or type(handler) is not _LineHandler:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    if (
        found is None
        or level < found.level
        or type(found.formatter) is not TextFormatter
        or len(found.filters) != 1
        or type(found.filters[0]) is not _RequestId
    ):
        return None
    return found


def write_info(logger: logging.Logger, message: str, fields: dict[str, Any]) -> bool:
    """Write `logger.info(message, extra={"fields": fields})`'s line (the caller has checked that
    `logger` is enabled for info) straight to the handler, when the text set-up of `configure`
    is the only one that would see it: the same line, without making a record and passing it
    through the logger's and handler's machinery, which cost as much again as the line's own
    text (the access line is written for every HTTP request). False, and nothing written, under
    any other set-up (JSON, a handler or filter added, a level raised on the handler): the caller
    then logs it the usual way."""
    handler = _direct_handler(logger, logging.INFO)
    if handler is None:
        return False
    formatter = handler.formatter
    assert isinstance(formatter, TextFormatter)
    handler.acquire()
    try:
        line = formatter.line(
            created=time.time(),
            levelname="INFO",
            name=logger.name,
            message=scrub(message),
            fields=_fields_text(fields, request_id.get()),
        )
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except RecursionError:  # as logging.StreamHandler.emit
        raise
    except Exception:
        handler.handleError(logging.LogRecord(logger.name, logging.INFO, __file__, 0, message, None, None))
    finally:
        handler.release()
    return True


def _fields_text(fields: dict[str, Any], rid: str) -> str:
    """`fields` and the request id as `TextFormatter.format` appends them (`_fields`, `_text`)."""
    parts = [f"{k}={_string_field(v) if isinstance(v, str) else _text(v)}" for k, v in fields.items()]
    if rid:
        parts.append(f"request_id={_text(rid)}")
    return " ".join(parts)


@functools.lru_cache(maxsize=1024)
def _string_field(value: str) -> str:
    """A string field's text in a line, `_text(scrub(value))`, kept for the few values (routes,
    client addresses) that come back on every line."""
    return _text(scrub(value))


def drain() -> None:
    """Write out the lines `configure`'s batches hold now (before a message printed on the way out,
    so that the log keeps its order)."""
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(stream, BatchedLines):
            stream.drain()


def configure(*, level: str, fmt: str, batched: bool = False) -> None:
    """Route every logger (ours, uvicorn's) to stderr in the chosen format; with `batched` (as
    `serve` does) through `BatchedLines`."""
    handler = _LineHandler(cast(TextIO, BatchedLines(sys.stderr)) if batched else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_RequestId())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # No formatter here writes a record's thread or process: not looking them up for every record
    # (as the logging documentation's "Optimization" section suggests) saves a share of each line.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
