"""The SMTP front end: a lean `asyncio.Protocol` that speaks ESMTP for reception only.

Why not aiosmtpd: it reads DATA line by line in Python and tops out near 1k msg/s per core, and
its replies (size, smuggling, line length) are not ours to name. This protocol scans DATA for
the terminator in C (`bytearray.find`), so a 4 KB message costs one search and one copy.

What it guarantees:
- only `CRLF.CRLF` ends DATA: a bare LF or CR around a dot never does (SMTP smuggling);
- no buffer grows without bound: a command line over 4 KiB is discarded as it streams and
  answered `500 5.5.2`; DATA past the size limit is discarded and answered `552 5.3.4`;
- NUL and bare CR in commands are refused;
- 250 is written only after `IngestService.deliver` returned, i.e. after the commit.
Commands are handled strictly in order (PIPELINING): while one waits on the database, input
is buffered, and reading pauses once the buffer is large.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
import uuid
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import cast

from inboxd.config import Settings
from inboxd.errors import InboxdError
from inboxd.metrics import Metrics
from inboxd.services.ingest import IngestService, Recipient
from inboxd.services.space import SpaceGuard
from inboxd.smtp import replies as R
from inboxd.tasks import TaskSet

log = logging.getLogger("inboxd.smtp")

LINE_LIMIT = 4096
PAUSE_AT = 1 << 20
MAX_ERRORS = 20
IDLE_TIMEOUT = 300.0
TERMINATOR = b"\r\n.\r\n"


class SmtpServer:
    """Listens, tracks sessions, and stops them in order (deliveries in flight finish first)."""

    def __init__(
        self,
        ingest: IngestService,
        *,
        settings: Settings,
        tls: ssl.SSLContext | None = None,
        metrics: Metrics | None = None,
        space: SpaceGuard | None = None,
    ) -> None:
        self.ingest = ingest
        self.settings = settings
        self.tls = tls
        self.metrics = metrics or Metrics()
        self.space = space
        self.hostname = settings.resolved_smtp_hostname
        self.sessions: set[_Session] = set()
        self.closing = False
        self._server: asyncio.Server | None = None
        # The sessions' deliveries, recipient checks and TLS upgrades, referenced until they end.
        self.tasks = TaskSet()

    async def start(self, sock: socket.socket | None = None) -> None:
        loop = asyncio.get_running_loop()
        if sock is None:
            self._server = await loop.create_server(
                lambda: _Session(self),
                self.settings.smtp_host,
                self.settings.smtp_port,
                reuse_address=True,
                backlog=1024,
            )
        else:
            self._server = await loop.create_server(lambda: _Session(self), sock=sock, backlog=1024)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self, *, grace: float = 10.0) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + grace
        while any(s.delivering for s in self.sessions) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for session in list(self.sessions):
            session.close(R.SHUTTING_DOWN)
        await self.tasks.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


class _Session(asyncio.Protocol):
    def __init__(self, server: SmtpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.in_data = False
        self.scan = 0
        self.overflow = False
        self.busy = False
        self.delivering = False
        self.discarding_line = False
        self.paused = False
        self.errors = 0
        self.peer = ""
        self.helo: str | None = None
        self.esmtp = False
        self.secure = False
        self.sender: str | None = None
        self.recipients: list[Recipient] = []
        self.last_activity = time.monotonic()
        self.idle_timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "unknown"
        self.server.sessions.add(self)
        self.server.metrics.smtp_connections.inc()
        self.server.metrics.smtp_sessions.inc()
        if self.server.closing:
            self.close(R.SHUTTING_DOWN)
            return
        self.reply(R.GREETING.format(host=self.server.hostname))
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.server.sessions:
            self.server.metrics.smtp_sessions.dec()
        self.server.sessions.discard(self)
        self.transport = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.in_data:
            self.buf += data
        elif self.discarding_line:
            end = data.find(b"\n")
            if end < 0:
                return
            self.discarding_line = False
            self.reply(R.LINE_TOO_LONG)
            self.buf += data[end + 1 :]
        else:
            self.buf += data
        if self.busy:
            if len(self.buf) > PAUSE_AT and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()
            return
        self.pump()

    # Input ------------------------------------------------------------------------------------

    def pump(self) -> None:
        while not self.busy and self.transport is not None:
            if self.in_data:
                if not self._scan_data():
                    return
                continue
            end = self.buf.find(b"\n")
            if end < 0:
                if len(self.buf) > LINE_LIMIT:
                    self.buf.clear()
                    self.discarding_line = True
                break
            line = bytes(self.buf[:end])
            del self.buf[: end + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > LINE_LIMIT:
                self.error(R.LINE_TOO_LONG)
                continue
            self.command(line)
        if self.paused and not self.busy and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def _scan_data(self) -> bool:
        """Look for CRLF.CRLF; True when a message ended (its delivery is then under way)."""
        end = self.buf.find(TERMINATOR, self.scan)
        if end < 0:
            limit = self.server.settings.max_message_size
            if len(self.buf) > limit + limit // 8 + 1024:
                # Too big: keep only what could begin the terminator, and answer at its end.
                self.overflow = True
                del self.buf[:-4]
            self.scan = max(len(self.buf) - 4, 0)
            return False
        body = bytes(self.buf[2 : end + 2])
        del self.buf[: end + 5]
        self.in_data = False
        self.scan = 0
        self.busy = True
        self.delivering = True
        self.server.tasks.spawn(self._deliver(body))
        return True

    # Commands -------------------------------------------------------------------------------

    def command(self, line: bytes) -> None:
        if b"\x00" in line or b"\r" in line:
            self.error(R.BAD_CHARACTERS)
            return
        text = line.decode("utf-8", "surrogateescape")
        verb, _, arg = text.partition(" ")
        verb = verb.upper()
        arg = arg.strip()
        handler = _COMMANDS.get(verb)
        if handler is None:
            self.error(R.NOT_IMPLEMENTED if verb in ("AUTH", "BDAT", "ETRN", "TURN", "EXPN") else R.UNRECOGNIZED)
            return
        handler(self, arg)

    def do_ehlo(self, arg: str) -> None:
        if not arg:
            self.error(R.SYNTAX_ERROR)
            return
        self.reset()
        self.helo, self.esmtp = arg, True
        lines = [
            self.server.hostname,
            f"SIZE {self.server.settings.max_message_size}",
            "8BITMIME",
            "SMTPUTF8",
            "PIPELINING",
            "ENHANCEDSTATUSCODES",
        ]
        if self.server.tls is not None and not self.secure:
            lines.append("STARTTLS")
        lines.append("HELP")
        self.reply("\r\n".join(f"250-{x}" for x in lines[:-1]) + f"\r\n250 {lines[-1]}")

    def do_helo(self, arg: str) -> None:
        if not arg:
            self.error(R.SYNTAX_ERROR)
            return
        self.reset()
        self.helo, self.esmtp = arg, False
        self.reply(f"250 {self.server.hostname}")

    def do_mail(self, arg: str) -> None:
        if self.helo is None:
            self.error(R.NEED_HELO)
            return
        if self.sender is not None:
            self.error(R.NESTED_MAIL)
            return
        if self._short_of_space(stage="MAIL"):
            return
        parsed = _path(arg, "FROM:")
        if parsed is None:
            self.error(R.SYNTAX_ERROR)
            return
        address, params = parsed
        if address and not _plausible(address):
            self.error(R.BAD_ADDRESS)
            return
        for param in params:
            key, _, value = param.partition("=")
            key = key.upper()
            if key == "SIZE":
                if not (value.isascii() and value.isdigit()):
                    self.error(R.SYNTAX_ERROR)
                    return
                if int(value) > self.server.settings.max_message_size:
                    self.error(R.TOO_BIG)
                    return
            elif key == "BODY":
                if value.upper() not in ("7BIT", "8BITMIME"):
                    self.error(R.SYNTAX_ERROR)
                    return
            elif key != "SMTPUTF8":
                self.error(R.PARAM_UNKNOWN)
                return
        self.sender = address
        self.declared_size = next((int(p[5:]) for p in params if p.upper().startswith("SIZE=")), None)
        self.reply(R.SENDER_OK)

    def do_rcpt(self, arg: str) -> None:
        if self.sender is None:
            self.error(R.NEED_MAIL)
            return
        parsed = _path(arg, "TO:")
        if parsed is None or not parsed[0]:
            self.error(R.SYNTAX_ERROR)
            return
        address, params = parsed
        if params:
            self.error(R.PARAM_UNKNOWN)
            return
        # A recipient must be UTF-8 (RFC 6531): bytes that are not arrive as surrogates, which no
        # mailbox address holds and no database takes.
        if not _plausible(address) or "@" not in address or not _is_utf8(address):
            self.error(R.BAD_ADDRESS)
            return
        if len(self.recipients) >= self.server.settings.max_recipients:
            self.reply(R.TOO_MANY_RECIPIENTS)
            return
        self.busy = True
        self.server.tasks.spawn(self._resolve(address))

    async def _resolve(self, address: str) -> None:
        try:
            recipient = await self.server.ingest.resolve(address, declared_size=self.declared_size)
        except InboxdError as exc:
            self.error(R.reply_for(exc))
        except Exception:
            log.exception("recipient lookup failed")
            self.reply(R.TEMP_FAILURE)
        else:
            # Plus addressing can name one mailbox twice: it gets one copy.
            if all(r.mailbox.id != recipient.mailbox.id for r in self.recipients):
                self.recipients.append(recipient)
            self.reply(R.RECIPIENT_OK)
        self.busy = False
        self.pump()

    def do_data(self, arg: str) -> None:
        if not self.recipients:
            self.error(R.NEED_RCPT if self.sender is not None else R.NEED_MAIL)
            return
        if arg:
            self.error(R.SYNTAX_ERROR)
            return
        if self._short_of_space(stage="DATA"):
            self.reset()
            return
        self.reply(R.START_DATA)
        self.in_data = True
        self.overflow = False
        self.buf[:0] = b"\r\n"
        self.scan = 0

    async def _deliver(self, stuffed: bytes) -> None:
        started = time.perf_counter()
        size = len(stuffed)
        answer = R.TEMP_FAILURE
        try:
            if self.overflow:
                answer = R.TOO_BIG
                return
            # Undo dot-stuffing: a line that starts with a dot lost its first dot in transit.
            body = (b"\r\n" + stuffed).replace(b"\r\n.", b"\r\n")[2:]
            size = len(body)
            if size > self.server.settings.max_message_size:
                answer = R.TOO_BIG
                return
            assert self.sender is not None
            queue_id = uuid.uuid4().hex[:16]
            raw = self._received(queue_id) + body
            await self.server.ingest.deliver(sender=self.sender, recipients=self.recipients, raw=raw)
            answer = R.QUEUED.format(id=queue_id)
        except InboxdError as exc:
            answer = R.reply_for(exc)
        except Exception:
            log.exception("delivery failed")
        finally:
            self.reply(answer)
            self._record(answer, size=size, seconds=time.perf_counter() - started)
            self.reset()
            self.delivering = False
            self.busy = False
            if self.transport is not None:
                self.pump()

    def _short_of_space(self, *, stage: str) -> bool:
        """Answer 452 when free space is under INBOXD_MIN_FREE_BYTES (the sender retries later)."""
        space = self.server.space
        if space is None or not space.low():
            return False
        self.reply(R.INSUFFICIENT_STORAGE)
        self._record(R.INSUFFICIENT_STORAGE, size=0, seconds=0.0, stage=stage)
        return True

    def _record(self, answer: str, *, size: int, seconds: float, stage: str = "DATA") -> None:
        """The transaction's metrics and its one log line (never the message, never AUTH)."""
        code = answer[:3]
        outcome = "accepted" if code == "250" else "deferred" if code[0] == "4" else "rejected"
        metrics = self.server.metrics
        metrics.smtp_transactions.labels(outcome, code).inc()
        if outcome == "accepted":
            metrics.smtp_bytes.inc(size)
            metrics.smtp_ingest.observe(seconds)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "smtp transaction %s",
                outcome,
                extra={
                    "fields": {
                        "client": self.peer,
                        "from": self.sender if self.sender is not None else "-",
                        "mailbox": ",".join(r.mailbox.address for r in self.recipients) or "-",
                        "size": size,
                        "stage": stage,
                        "reply": answer,
                        "ms": round(seconds * 1000, 2),
                    }
                },
            )

    def _received(self, queue_id: str) -> bytes:
        proto = "ESMTP" if self.esmtp else "SMTP"
        if self.secure:
            proto += "S"
        single = f"\r\n\tfor <{self.recipients[0].mailbox.address}>" if len(self.recipients) == 1 else ""
        stamp = format_datetime(datetime.now(UTC))
        helo = (self.helo or "unknown").replace("\r", "").replace("\n", "")
        return (
            f"Received: from {helo} ([{self.peer}])\r\n\tby {self.server.hostname} (inboxd) with {proto} "
            f"id {queue_id}{single}; {stamp}\r\n"
        ).encode("utf-8", "surrogateescape")

    def do_rset(self, arg: str) -> None:
        self.reset()
        self.reply(R.OK)

    def do_noop(self, arg: str) -> None:
        self.reply(R.OK)

    def do_vrfy(self, arg: str) -> None:
        self.reply(R.VRFY_CANNOT)

    def do_help(self, arg: str) -> None:
        self.reply(R.HELP)

    def do_quit(self, arg: str) -> None:
        self.close(R.BYE)

    def do_starttls(self, arg: str) -> None:
        context = self.server.tls
        if context is None:
            self.error(R.NOT_IMPLEMENTED)
            return
        if self.secure:
            self.error(R.TLS_ALREADY)
            return
        # Anything pipelined after STARTTLS is dropped: it must not count as sent under TLS.
        self.buf.clear()
        self.reply(R.READY_TLS)
        self.busy = True
        self.server.tasks.spawn(self._upgrade(context))

    async def _upgrade(self, context: ssl.SSLContext) -> None:
        assert self.transport is not None
        try:
            transport = await asyncio.get_running_loop().start_tls(self.transport, self, context, server_side=True)
        except (OSError, ssl.SSLError):
            self.close(None)
            return
        assert transport is not None
        self.transport = transport
        self.secure = True
        self.helo = None
        self.reset()
        self.buf.clear()
        self.busy = False
        self.pump()

    # Output and state -------------------------------------------------------------------------

    def reply(self, text: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(text.encode("utf-8", "surrogateescape") + b"\r\n")

    def error(self, text: str) -> None:
        self.errors += 1
        if self.errors >= MAX_ERRORS:
            self.close(R.TOO_MANY_ERRORS)
            return
        self.reply(text)

    def reset(self) -> None:
        self.sender = None
        self.declared_size = None
        self.recipients = []

    def close(self, text: str | None) -> None:
        if text is not None:
            self.reply(text)
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def _arm_idle(self) -> None:
        self.idle_timer = asyncio.get_running_loop().call_later(60.0, self._check_idle)

    def _check_idle(self) -> None:
        if self.transport is None:
            return
        if not self.delivering and time.monotonic() - self.last_activity > IDLE_TIMEOUT:
            self.close(R.IDLE_TIMEOUT)
            return
        self._arm_idle()

    declared_size: int | None = None


_COMMANDS = {
    "EHLO": _Session.do_ehlo,
    "HELO": _Session.do_helo,
    "MAIL": _Session.do_mail,
    "RCPT": _Session.do_rcpt,
    "DATA": _Session.do_data,
    "RSET": _Session.do_rset,
    "NOOP": _Session.do_noop,
    "VRFY": _Session.do_vrfy,
    "HELP": _Session.do_help,
    "QUIT": _Session.do_quit,
    "STARTTLS": _Session.do_starttls,
}


def _path(arg: str, keyword: str) -> tuple[str, list[str]] | None:
    """`FROM:<addr> PARAMS` → (addr, params); None when malformed. `<>` gives ""."""
    if arg[: len(keyword)].upper() != keyword:
        return None
    rest = arg[len(keyword) :].lstrip()
    if not rest.startswith("<"):
        return None
    close = rest.find(">")
    if close < 0:
        return None
    address = rest[1:close].strip()
    if address.startswith("@") and ":" in address:
        address = address.split(":", 1)[1]  # an obsolete source route
    return address, rest[close + 1 :].split()


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plausible(address: str) -> bool:
    return 0 < len(address) <= 320 and not any(c.isspace() or c in "<>" or ord(c) < 32 for c in address)
