"""Logging: one line per SMTP transaction, per webhook attempt and per HTTP request.

`INBOXD_LOG_FORMAT=text` (the default) writes `time level logger: message key=value …`;
`json` writes one JSON object per line for log shippers. A line logged while an HTTP request
is handled carries that request's id (`request_id`), which the answer returns in `X-Request-ID`.

Structured fields go in `extra={"fields": {...}}`. Nothing that logs here passes a token, a
password, a webhook secret, an `Authorization` header or a query string; the tests grep for
them.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from typing import Any

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("inboxd_request_id", default="")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    out: dict[str, Any] = dict(fields) if isinstance(fields, dict) else {}
    rid = getattr(record, "request_id", "")
    if rid:
        out["request_id"] = rid
    return out


class _RequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = request_id.get()
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _fields(record)
        if fields:
            line += " " + " ".join(f"{k}={_text(v)}" for k, v in fields.items())
        return line


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


JsonFormatter.converter = __import__("time").gmtime


def configure(*, level: str, fmt: str) -> None:
    """Route every logger (ours, uvicorn's) to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_RequestId())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
