"""One SMTP session: reading, the PROXY header, commands in order (PIPELINING), held replies, flow
control, STARTTLS and timeouts. The mail transaction (MAIL, RCPT, DATA and the delivery at its end)
is `smtp/transaction.py`, a base class of the session; DATA's bytes are gathered by `smtp/data.py`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from inboxd.services.ingest import Recipient
from inboxd.smtp import proxy_protocol
from inboxd.smtp import replies as R
from inboxd.smtp.data import DataBuffer
from inboxd.smtp.hooks import Listener
from inboxd.smtp.transaction import Transaction

log = logging.getLogger("inboxd.smtp")

LINE_LIMIT = 4096
PAUSE_AT = 1 << 20
# Unsent replies above which a session stops reading (asyncio's low-water mark is a quarter).
WRITE_HIGH = 64 * 1024
MAX_ERRORS = 20
# Replies held for one write at most (a pipelined transaction has a handful).
HOLD_MAX = 32
# Seconds a trusted proxy has to send its PROXY header once connected.
PROXY_HEADER_TIMEOUT = 10.0


class _Session(Transaction, asyncio.Protocol):
    def __init__(self, server: Listener[_Session]) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        # The message under way between DATA and its end.
        self.message: DataBuffer | None = None
        self.busy = False
        self.delivering = False
        self.discarding_line = False
        self.paused = False
        self.write_paused = False
        self.write_timer: asyncio.TimerHandle | None = None
        self.errors = 0
        # The client's address (the socket peer, or what a trusted proxy's header names) and the
        # key it is counted under (its /64 for IPv6).
        self.peer = ""
        self.client = ""
        self.awaiting_header = False
        self.proxied = False  # whether a trusted proxy's header named the client
        self.helo: str | None = None
        self.esmtp = False
        self.secure = server.implicit_tls
        self.sender: str | None = None
        self.recipients: list[Recipient] = []
        # Every accepted RCPT address, in order: plus addressing may fold them into fewer
        # mailboxes, but the limit is on what the client sent, and the sandbox records them all.
        self.envelope: list[str] = []
        self.last_activity = time.monotonic()
        self.idle_timer: asyncio.TimerHandle | None = None
        # Set by a hook that expects the next line to be an answer (an AUTH exchange), not a command.
        self.line_handler: Callable[[bytes], None] | None = None
        self.hooks = server.hooks(self)
        # Replies held while a burst of commands is taken (`pump`), then written at once: a client
        # that pipelines MAIL, RCPT and DATA gets their replies in one write, not three.
        self.held: list[bytes] | None = None

    # asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "unknown"
        self.server.tally.connection()
        if self.server.closing:
            self.close(R.SHUTTING_DOWN)
            return
        if self.server.proxies.trusts(self.peer):
            # The proxy names the client first; the session opens once it has.
            self.awaiting_header = True
            self.server.unnamed.add(self)
            self.idle_timer = asyncio.get_running_loop().call_later(PROXY_HEADER_TIMEOUT, self._no_header)
            return
        self._open()

    def _open(self) -> None:
        """Admit the session (its caps) and greet the client."""
        assert self.transport is not None
        refusal = self.server.admit(self)
        if refusal is not None:
            self.close(refusal)
            return
        self.transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.reply(R.GREETING.format(host=self.server.hostname))
        self._arm_idle(self.server.settings.smtp_idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.release(self)
        self.transport = None
        for timer in (self.idle_timer, self.write_timer):
            if timer is not None:
                timer.cancel()

    def pause_writing(self) -> None:
        # The client is not reading its replies: stop taking commands that would add more.
        self.write_paused = True
        self._flow()
        if self.write_timer is None:
            timeout = self.server.settings.smtp_write_timeout
            self.write_timer = asyncio.get_running_loop().call_later(timeout, self._write_stuck)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.write_timer is not None:
            self.write_timer.cancel()
            self.write_timer = None
        if not self.busy:
            self.pump()
        self._flow()

    def _write_stuck(self) -> None:
        self.write_timer = None
        if self.transport is not None:
            log.info("dropping an SMTP client of %s that does not read its replies", self.peer)
            # Abort, not close: a close would wait for the replies it never reads.
            self.transport.abort()
            self.transport = None

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self.awaiting_header:
            self._read_header(data)
            return
        if self.message is not None:
            rest = self.message.feed(data)
            if rest is not None:
                self._end_data(rest)
            return
        if self.discarding_line:
            end = data.find(b"\n")
            if end < 0:
                return
            self.discarding_line = False
            self.reply(R.LINE_TOO_LONG)
            self.buf += data[end + 1 :]
        else:
            self.buf += data
        if self.busy or self.write_paused:
            self._flow()
            return
        self.pump()

    def _read_header(self, data: bytes) -> None:
        """The trusted proxy's PROXY header: parsed once, as soon as its bytes are in."""
        self.buf += data
        try:
            header = proxy_protocol.parse(self.buf)
        except proxy_protocol.ProxyHeaderError as exc:
            log.info("refusing a connection from trusted proxy %s: %s", self.peer, exc)
            self.close(R.PROXY_HEADER_REQUIRED)
            return
        if header is None:
            return
        del self.buf[: header.length]
        self.awaiting_header = False
        self.server.unnamed.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        if header.client is not None:
            self.peer, self.proxied = header.client, True
        self._open()
        if self.buf and self.transport is not None:
            self.pump()

    def _no_header(self) -> None:
        self.idle_timer = None
        if self.transport is not None and self.awaiting_header:
            log.info("no PROXY header from trusted proxy %s", self.peer)
            self.close(R.PROXY_HEADER_REQUIRED)

    def _flow(self) -> None:
        """Read only while replies are being taken and the input waiting is small."""
        if self.transport is None:
            return
        stop = self.write_paused or (self.busy and len(self.buf) > PAUSE_AT)
        if stop and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        elif not stop and self.paused:
            self.paused = False
            self.transport.resume_reading()

    # Input ------------------------------------------------------------------------------------

    def pump(self) -> None:
        if self.held is None:
            self.held = []
        try:
            self._take_commands()
        finally:
            self._release()
        self._flow()

    def _take_commands(self) -> None:
        while not self.busy and not self.write_paused and self.transport is not None:
            if self.message is not None:
                break
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
                self.line_handler = None
                self.error(R.LINE_TOO_LONG)
                continue
            if self.line_handler is not None:
                handler, self.line_handler = self.line_handler, None
                handler(line)
                continue
            self.command(line)

    def _end_data(self, rest: bytes) -> None:
        message, self.message = self.message, None
        assert message is not None
        self.buf = bytearray(rest)
        self.busy = True
        self.delivering = True
        self.server.tasks.spawn(self._deliver(message))

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
            if self.hooks.command(verb, arg):
                return
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
        lines.extend(self.hooks.ehlo_keywords())
        lines.append("HELP")
        self.reply("\r\n".join(f"250-{x}" for x in lines[:-1]) + f"\r\n250 {lines[-1]}")

    def do_helo(self, arg: str) -> None:
        if not arg:
            self.error(R.SYNTAX_ERROR)
            return
        self.reset()
        self.helo, self.esmtp = arg, False
        self.reply(f"250 {self.server.hostname}")

    # SMTP faults ------------------------------------------------------------------------------

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
            transport = await asyncio.get_running_loop().start_tls(
                self.transport,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self.server.settings.tls_handshake_timeout,
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            self.close(None)
            return
        assert transport is not None
        self.transport = transport
        self.secure = True
        self.helo = None
        self.line_handler = None
        self.hooks.tls_started()
        self.reset()
        self.buf.clear()
        self.busy = False
        self.pump()

    # Output and state -------------------------------------------------------------------------

    def reply(self, text: str) -> None:
        data = text.encode("utf-8", "surrogateescape") + b"\r\n"
        if self.held is not None:
            self.held.append(data)
            if len(self.held) >= HOLD_MAX:  # a long burst is written as it goes: flow control sees it
                self._release()
                self.held = []
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _release(self) -> None:
        """Write the replies held since `pump` (or an answered step) started holding them."""
        held, self.held = self.held, None
        if held and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(held))

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
        self.envelope = []

    def run(self, work: Coroutine[Any, Any, None]) -> None:
        """Run a hook's asynchronous step with input held, then go on with buffered commands."""
        self.busy = True
        self.server.tasks.spawn(self._run(work))

    async def _run(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:
            log.exception("a session step failed")
            self.reply(R.TEMP_FAILURE)
        finally:
            self.busy = False
            if self.transport is not None:
                self.pump()

    def close(self, text: str | None) -> None:
        if text is not None:
            self.reply(text)
        self._release()  # before the close, which would drop later writes
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def drop(self) -> None:
        """Close without a reply, as a crashed server does (a `disconnect` fault)."""
        self._release()
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def _arm_idle(self, delay: float) -> None:
        self.idle_timer = asyncio.get_running_loop().call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        if self.transport is None:
            return
        timeout = self.server.settings.smtp_idle_timeout
        left = self.last_activity + timeout - time.monotonic()
        if left <= 0 and not self.delivering:
            self.close(R.IDLE_TIMEOUT)
            return
        self._arm_idle(max(left, timeout / 10))


# The session as listener hooks see it (its replies, state and `run`).
Session = _Session


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
