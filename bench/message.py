"""The benchmark's test message: a plain-text mail of exactly the requested size on the wire."""

from __future__ import annotations

from pathlib import Path

_TEXT = (
    "inboxd receives mail over SMTP and serves it through REST so that tests and developers "
    "can read what an application sent without a real mail provider in the loop"
)
_WORDS = _TEXT.split(" ")


def build_message(size: int = 4096, *, sender: str, recipient: str) -> bytes:
    """A CRLF message of exactly `size` bytes (headers and body, no terminating dot).

    No body line starts with a dot, so the bytes on the wire equal the message's size.
    """
    headers = (
        f"From: Bench Sender <{sender}>\r\n"
        f"To: <{recipient}>\r\n"
        "Subject: Benchmark message of four kilobytes\r\n"
        "Date: Sat, 21 Nov 2026 12:00:00 +0000\r\n"
        "Message-ID: <bench@load.test>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: text/plain; charset="utf-8"\r\n'
        "\r\n"
    ).encode()
    text = bytearray()
    i = 0
    while len(headers) + len(text) < size:
        line = " ".join(_WORDS[(i + k) % len(_WORDS)] for k in range(11))
        text += line.encode() + b"\r\n"
        i += 11
    body = bytes(text[: size - len(headers) - 2])
    if body.endswith(b"\r"):
        body = body[:-1] + b"x"
    body += b"\r\n"
    message = headers + body
    assert len(message) == size, len(message)
    return message


def write_for_smtp_source(message: bytes, path: Path) -> Path:
    """`smtp-source -F` reads lines and sends each with CRLF, so the file holds LF endings."""
    path.write_bytes(message.replace(b"\r\n", b"\n"))
    return path
