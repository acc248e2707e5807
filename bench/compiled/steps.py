"""The measured steps, run in a process of their own: `python -m bench.compiled.steps STEP`.

Whichever `inboxd` is first on PYTHONPATH is measured: the source tree, or the scratch copy
whose modules mypyc compiled (`build.mypyc_tree`). Each run prints one JSON line: the CPU time
of the process per message (`time.process_time`, so other tenants of the machine do not count)
and the file the measured module was loaded from, which shows which variant ran.

- `session`: the SMTP protocol as `smtp-source -d` drives it, one connection per message:
  greeting, EHLO, MAIL, RCPT, DATA, the 4 KB message, the 250 after delivery, QUIT. The real
  `Session` on uvloop, with the real settings, metrics and transaction log line (level info, as
  `serve` configures it, written to /dev/null); only the transport (a sink) and the listener's
  hooks (the recipient known, the delivery done at once) are stand-ins, so what is measured
  is the protocol alone, not the parse, compression or commit that ingest adds.
- `handoff`: the least Python a compiled SMTP front end would still run per message: a callback
  with the message's bytes that spawns the task awaiting the delivery (done at once, as above)
  and hands the 250 back, the same way the session's `_end_data` and `_deliver` do.
- `summary`: `parse_summary` over the bench's 4 KB message as the session hands it over
  (a bytearray that starts with the `Received:` header), and over the mail corpus in tests/data.
- `summary-native`: the same inputs through `native_summary`, the summary taken from a compiled
  MIME parser (fast-mail-parser, Rust, from PyPI: `__main__` installs it into the scratch
  directory, never into the environment), and how many of the corpus's summaries equal ours.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, cast

import uvloop

from bench.message import build_message
from inboxd.config import Settings
from inboxd.logs import configure
from inboxd.mail.html_text import collapse, is_blank, preview
from inboxd.mail.message_walk import Summary
from inboxd.model import FaultSet, Mailbox
from inboxd.services.ingest import Recipient

SENDER = "sender@load.test"
RECIPIENT = "bench@inboxd.test"
CORPUS = Path(__file__).resolve().parent.parent.parent / "tests" / "data"


class SinkTransport:
    """What the session writes to: counts the replies, sends nothing."""

    def __init__(self) -> None:
        self.writes = 0
        self.closed = False
        self.last = b""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.last = data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


class KnownRecipient:
    """Listener hooks for one known mailbox whose deliveries are done as soon as they are asked."""

    def __init__(self, recipient: Recipient, done: asyncio.Future[object]) -> None:
        self._recipient = recipient
        self._done = done

    def ehlo_keywords(self) -> Sequence[str]:
        return ()

    def command(self, verb: str, arg: str) -> bool:
        return False

    def mail_refusal(self) -> str | None:
        return None

    def cached(self, address: str, *, declared_size: int | None) -> Recipient | None:
        return self._recipient

    async def resolve(self, address: str, *, declared_size: int | None) -> Recipient:
        return self._recipient

    def deliver(
        self,
        *,
        sender: str,
        recipients: Sequence[Recipient],
        envelope: Sequence[str],
        raw: bytes | bytearray,
        client: tuple[str, str | None],
    ) -> Awaitable[object]:
        return self._done

    def tls_started(self) -> None:
        return None

    def session_faults(self) -> FaultSet | None:
        return None

    @property
    def authenticated(self) -> bool:
        return False


def bench_recipient() -> Recipient:
    mailbox = Mailbox(
        id="mbx",
        user_id="usr",
        token_id=None,
        address=RECIPIENT,
        domain_id=None,
        quota=1 << 40,
        used=0,
        password_gen=0,
        created_at=0.0,
    )
    return Recipient(mailbox=mailbox, plan="free")


def quiet_logs(level: str) -> None:
    """Logging as `serve` sets it up (at `info`, one line per transaction), into /dev/null."""
    sink = open(os.devnull, "w")  # noqa: SIM115 - held for the life of the process
    with contextlib.redirect_stderr(sink):
        configure(level=level, fmt="text")


async def _sessions(messages: int, warmup: int) -> tuple[float, str]:
    from inboxd.smtp import session as session_module
    from inboxd.smtp.server import SmtpServer

    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    hooks = KnownRecipient(bench_recipient(), done)
    server = SmtpServer(cast(Any, None), settings=Settings(), hooks=lambda session: hooks)
    commands = (b"EHLO load.test\r\n", f"MAIL FROM:<{SENDER}>\r\n".encode(), f"RCPT TO:<{RECIPIENT}>\r\n".encode())
    data = b"DATA\r\n"
    body = build_message(4096, sender=SENDER, recipient=RECIPIENT) + b".\r\n"
    quit_ = b"QUIT\r\n"

    async def one() -> None:
        # One step per read, as smtp-source sends: it waits for each reply before the next command.
        session = session_module.Session(server)
        transport = SinkTransport()
        session.connection_made(cast(asyncio.Transport, transport))
        for command in commands:
            session.data_received(command)
        session.data_received(data)
        session.data_received(body)
        while session.delivering:
            await asyncio.sleep(0)
        if not transport.last.startswith(b"250 2.0.0"):
            raise RuntimeError(f"unexpected reply {transport.last!r}")
        session.data_received(quit_)
        session.connection_lost(None)

    for _ in range(warmup):
        await one()
    started = time.process_time()
    for _ in range(messages):
        await one()
    return time.process_time() - started, str(session_module.__file__)


async def _handoffs(messages: int, warmup: int) -> float:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()
    done.set_result(None)
    hooks = KnownRecipient(bench_recipient(), done)
    recipients = [bench_recipient()]
    body = bytearray(build_message(4096, sender=SENDER, recipient=RECIPIENT))
    tasks: set[asyncio.Task[None]] = set()
    transport = SinkTransport()

    async def deliver(raw: bytearray) -> None:
        await hooks.deliver(sender=SENDER, recipients=recipients, envelope=[RECIPIENT], raw=raw, client=("", None))
        transport.write(b"250 2.0.0 OK: queued as 0123456789abcdef\r\n")

    def on_message(raw: bytearray) -> None:
        # What a native front end would call once DATA has ended, from the event loop.
        task = loop.create_task(deliver(raw))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def one() -> None:
        on_message(bytearray(body))
        while tasks:
            await asyncio.sleep(0)

    for _ in range(warmup):
        await one()
    started = time.process_time()
    for _ in range(messages):
        await one()
    return time.process_time() - started


def measure_handoff(messages: int, warmup: int) -> dict[str, object]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        seconds = runner.run(_handoffs(messages, warmup))
    return {"step": "handoff", "messages": messages, "us_per_msg": seconds / messages * 1e6, "module": __file__}


def measure_session(messages: int, warmup: int, log_level: str = "info") -> dict[str, object]:
    quiet_logs(log_level)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        seconds, module = runner.run(_sessions(messages, warmup))
    logging.shutdown()
    return {
        "step": "session",
        "log_level": log_level,
        "messages": messages,
        "us_per_msg": seconds / messages * 1e6,
        "module": module,
    }


def summary_inputs() -> tuple[bytearray, list[bytearray]]:
    """The bench's message as the session hands it to ingest, and the corpus of tests/data."""
    received = (
        b"Received: from load.test ([127.0.0.1])\r\n\tby localhost (inboxd) with ESMTP id 0123456789abcdef\r\n"
        b"\tfor <bench@inboxd.test>; Thu, 26 Nov 2026 08:00:00 +0000\r\n"
    )
    bench = bytearray(received + build_message(4096, sender=SENDER, recipient=RECIPIENT))
    corpus = [bytearray(received + path.read_bytes()) for path in sorted(CORPUS.rglob("*.eml"))]
    return bench, corpus


def measure_summary(messages: int, warmup: int) -> dict[str, object]:
    from inboxd.mail import message_walk

    bench, corpus = summary_inputs()
    for _ in range(warmup):
        message_walk.parse_summary(bench)
    started = time.process_time()
    for _ in range(messages):
        message_walk.parse_summary(bench)
    bench_seconds = time.process_time() - started
    rounds = max(1, messages // (10 * len(corpus)))
    for raw in corpus:
        message_walk.parse_summary(raw)
    started = time.process_time()
    for _ in range(rounds):
        for raw in corpus:
            message_walk.parse_summary(raw)
    corpus_seconds = time.process_time() - started
    return {
        "step": "summary",
        "messages": messages,
        "us_per_msg": bench_seconds / messages * 1e6,
        "corpus_messages": len(corpus),
        "corpus_us_per_msg": corpus_seconds / (rounds * len(corpus)) * 1e6,
        "module": str(message_walk.__file__),
    }


def _header(headers: dict[str, list[str]], name: str) -> list[str]:
    return next((values for key, values in headers.items() if key.lower() == name), [])


def native_summary(parser: Any, raw: bytes | bytearray) -> Summary:
    """`parse_summary`'s fields from a compiled parser's full parse (it takes bytes only: a copy)."""
    try:
        mail = parser.parse_email(bytes(raw))
    except parser.ParseError:
        return Summary(from_="", subject="", preview_text="")
    headers: dict[str, list[str]] = mail.headers
    from_ = collapse(", ".join(_header(headers, "from")[:1]))
    text: str = mail.text_plain[0] if mail.text_plain else ""
    html: str = mail.text_html[0] if mail.text_html and is_blank(text) else ""
    x_tags = ",".join(_header(headers, "x-tags"))
    return Summary(from_=from_, subject=collapse(mail.subject or ""), preview_text=preview(text, html), x_tags=x_tags)


def measure_native_summary(messages: int, warmup: int) -> dict[str, object]:
    from inboxd.mail.message_walk import parse_summary

    # Imported by name: an optional package that mypy and the default install know nothing of.
    parser = importlib.import_module("fast_mail_parser")
    bench, corpus = summary_inputs()
    if native_summary(parser, bench) != parse_summary(bench):
        raise RuntimeError("the compiled parser's summary of the bench mail differs from ours")
    for _ in range(warmup):
        native_summary(parser, bench)
    started = time.process_time()
    for _ in range(messages):
        native_summary(parser, bench)
    bench_seconds = time.process_time() - started
    # The compiled parser's call alone, the rest being the Python that makes a summary of its result.
    as_bytes = bytes(bench)
    started = time.process_time()
    for _ in range(messages):
        parser.parse_email(as_bytes)
    parse_seconds = time.process_time() - started
    rounds = max(1, messages // (10 * len(corpus)))
    same = sum(native_summary(parser, raw) == parse_summary(raw) for raw in corpus)
    started = time.process_time()
    for _ in range(rounds):
        for raw in corpus:
            native_summary(parser, raw)
    corpus_seconds = time.process_time() - started
    return {
        "step": "summary-native",
        "messages": messages,
        "us_per_msg": bench_seconds / messages * 1e6,
        "parse_us_per_msg": parse_seconds / messages * 1e6,
        "corpus_messages": len(corpus),
        "corpus_same": same,
        "corpus_us_per_msg": corpus_seconds / (rounds * len(corpus)) * 1e6,
        "module": str(parser.__file__),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compiled.steps")
    parser.add_argument("step", choices=["session", "handoff", "summary", "summary-native"])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--log-level", default="info", help="session: the level logging is configured at")
    args = parser.parse_args(argv)
    if args.step == "session":
        result = measure_session(args.messages, args.warmup, args.log_level)
    elif args.step == "handoff":
        result = measure_handoff(args.messages, args.warmup)
    elif args.step == "summary-native":
        result = measure_native_summary(args.messages, args.warmup)
    else:
        result = measure_summary(args.messages, args.warmup)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
