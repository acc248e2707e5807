"""The SMTP front end: a lean `asyncio.Protocol` that speaks ESMTP for reception only.

Why not aiosmtpd: it reads DATA line by line in Python, which caps its throughput per core
(docs/performance.md, "Figures behind the code"), and its replies (size, smuggling, line length)
are not ours to name. This protocol scans DATA for the terminator in C (`bytearray.find`), so a
4 KB message costs one search and one copy.

What it guarantees:
- only `CRLF.CRLF` ends DATA: a bare LF or CR around a dot never does (SMTP smuggling);
- no buffer grows without bound: a command line over 4 KiB is discarded as it streams and
  answered `500 5.5.2`; DATA past the size limit is discarded and answered `552 5.3.4`;
- NUL and bare CR in commands are refused;
- 250 is written only after `IngestService.deliver` returned, i.e. after the commit;
- sessions are capped in total and per client address (421 beyond either cap; IPv6 per /64);
- only a peer in `INBOXD_TRUSTED_PROXIES` may name the client address, with a PROXY protocol
  header (v1 or v2, `smtp/proxy_protocol.py`) it must send first: it is parsed once, before the
  greeting, and a trusted peer whose connection opens with anything else, or with nothing for
  `PROXY_HEADER_TIMEOUT` seconds, is answered 421 and closed. Other peers are never read for
  one. The implicit-TLS listener reads no header (TLS starts with the connection there);
- a client that does not read its replies is not read from either: reading pauses while more
  than `WRITE_HIGH` bytes of replies wait, and the client is dropped once they have waited
  `smtp_write_timeout` seconds; a session silent for `smtp_idle_timeout` seconds is closed.
Commands are handled strictly in order (PIPELINING): while one waits on the database, input
is buffered, and reading pauses once the buffer is large. The replies to commands that arrived
together go out in one write (up to HOLD_MAX of them), so a pipelining client's MAIL, RCPT and
DATA cost one send, not three.

Memory per message: DATA is kept as the chunks that arrived (see `_Message`), and copied once
at its end into one buffer of the message's size, the stuffed dots left out, each chunk let go
once copied. Above `OFF_LOOP_BYTES` that copy, the parse and the compression run in a thread, at most `BIG_AT_ONCE`
messages at a time, so a big message never holds the event loop and eight at once do not each
hold several copies.

What a listener adds is a `SessionHooks` per session: extra EHLO keywords and verbs (AUTH on
the submission listener, `smtp/submission.py`), the gate before MAIL, and where RCPT and DATA
go. `Reception`, the default, is the MX: RCPT names a mailbox, DATA stores a copy per mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any, Protocol, cast

from inboxd.config import Settings
from inboxd.errors import InboxdError, MessageRejected
from inboxd.http.client_address import TrustedProxies, trusted_proxies
from inboxd.metrics import Metrics
from inboxd.model import FaultSet
from inboxd.services.faults import NOTHING, Action, FaultService, first_action
from inboxd.services.ingest import OFF_LOOP_BYTES, IngestService, Recipient
from inboxd.services.limits import client_key
from inboxd.services.space import SpaceGuard
from inboxd.smtp import proxy_protocol
from inboxd.smtp import replies as R
from inboxd.tasks import TaskSet

log = logging.getLogger("inboxd.smtp")

LINE_LIMIT = 4096
PAUSE_AT = 1 << 20
# Unsent replies above which a session stops reading (asyncio's low-water mark is a quarter).
WRITE_HIGH = 64 * 1024
MAX_ERRORS = 20
# Replies held for one write at most (a pipelined transaction has a handful).
HOLD_MAX = 32
# A line that starts with a dot: the end of DATA when the dot is alone on it, else a stuffed dot.
DOT_LINE = b"\r\n."
# Stuffed dots noted as DATA streams in; past this many (hostile input) one replace at the end does it.
MAX_DOTS = 20_000
# Seconds a trusted proxy has to send its PROXY header once connected.
PROXY_HEADER_TIMEOUT = 10.0
# Big messages assembled, parsed and compressed at once: each holds its buffer and its compressed
# copy meanwhile, the others wait holding one (their chunks).
BIG_AT_ONCE = 1


class SessionHooks(Protocol):
    """One session's listener-specific behaviour; the engine calls it, it answers through the session."""

    def ehlo_keywords(self) -> Sequence[str]:
        """Extra EHLO keywords (e.g. `AUTH PLAIN LOGIN`)."""
        ...

    def command(self, verb: str, arg: str) -> bool:
        """Handle a verb the engine does not know; False when the listener does not know it either."""
        ...

    def mail_refusal(self) -> str | None:
        """The reply that refuses MAIL now (e.g. 530 before AUTH), or None."""
        ...

    def cached(self, address: str, *, declared_size: int | None) -> Recipient | None:
        """The mailbox an RCPT address lands in when known without waiting, else None (`resolve`)."""
        ...

    async def resolve(self, address: str, *, declared_size: int | None) -> Recipient:
        """The mailbox an RCPT address lands in, or a `MessageRejected`."""
        ...

    def deliver(
        self,
        *,
        sender: str,
        recipients: Sequence[Recipient],
        envelope: Sequence[str],
        raw: bytes | bytearray,
        client: tuple[str, str | None],
    ) -> Awaitable[object]:
        """Store the message (committed when the awaitable is done); `envelope` is every accepted
        RCPT address, `client` the client's address and HELO name (kept for the SPF check). A plain
        function returning the ingest's awaitable, so no frame of the hook keeps `raw` alive while
        the commit waits (ingest lets go of it once compressed)."""
        ...

    def tls_started(self) -> None:
        """The session restarted under TLS: forget what was said before it."""
        ...

    def session_faults(self) -> FaultSet | None:
        """The SMTP faults known before RCPT (the sandbox's, once AUTH named its user), for MAIL."""
        ...

    @property
    def authenticated(self) -> bool:
        """Whether the client authenticated (`Received:` then says ESMTPA, RFC 3848)."""
        ...


class Reception:
    """The receiving listener's hooks: RCPT names a mailbox; nothing to add to the protocol."""

    def __init__(self, ingest: IngestService) -> None:
        self._ingest = ingest

    def ehlo_keywords(self) -> Sequence[str]:
        return ()

    def command(self, verb: str, arg: str) -> bool:
        return False

    def mail_refusal(self) -> str | None:
        return None

    def cached(self, address: str, *, declared_size: int | None) -> Recipient | None:
        return self._ingest.cached(address, declared_size=declared_size)

    async def resolve(self, address: str, *, declared_size: int | None) -> Recipient:
        return await self._ingest.resolve(address, declared_size=declared_size)

    def deliver(
        self,
        *,
        sender: str,
        recipients: Sequence[Recipient],
        envelope: Sequence[str],
        raw: bytes | bytearray,
        client: tuple[str, str | None],
    ) -> Awaitable[object]:
        return self._ingest.deliver(sender=sender, recipients=recipients, raw=raw, client_ip=client[0], helo=client[1])

    def tls_started(self) -> None:
        return None

    def session_faults(self) -> FaultSet | None:
        return None  # a mailbox is named at RCPT: its faults come with its recipient row

    @property
    def authenticated(self) -> bool:
        return False


HooksFactory = Callable[["_Session"], SessionHooks]


class SmtpServer:
    """Listens, tracks sessions, and stops them in order (deliveries in flight finish first)."""

    def __init__(
        self,
        ingest: IngestService,
        *,
        settings: Settings,
        tls: ssl.SSLContext | None = None,
        hooks: HooksFactory | None = None,
        implicit_tls: bool = False,
        metrics: Metrics | None = None,
        space: SpaceGuard | None = None,
        faults: FaultService | None = None,
    ) -> None:
        self.ingest = ingest
        # Answers the stages of mailboxes that have SMTP faults; None ignores them (a bare engine).
        self.faults = faults
        self.settings = settings
        self.tls = tls
        # Implicit TLS (RFC 8314): every connection is TLS from its first byte; no STARTTLS.
        self.implicit_tls = implicit_tls and tls is not None
        reception = Reception(ingest)
        self.hooks: HooksFactory = hooks or (lambda session: reception)
        self.metrics = metrics or Metrics()
        self.space = space
        self.hostname = settings.resolved_smtp_hostname
        # TLS starts with the connection on the implicit-TLS listener: no header can come first there.
        self.proxies = TrustedProxies(()) if self.implicit_tls else trusted_proxies(tuple(settings.trusted_proxies))
        self.sessions: set[_Session] = set()
        # Trusted proxies' connections whose PROXY header has not come yet (not counted as sessions).
        self.unnamed: set[_Session] = set()
        self.per_ip: dict[str, int] = {}
        self.big = asyncio.Semaphore(BIG_AT_ONCE)
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
            self._server = await loop.create_server(
                lambda: _Session(self),
                sock=sock,
                backlog=1024,
                ssl=self.tls if self.implicit_tls else None,
                ssl_handshake_timeout=self.settings.tls_handshake_timeout if self.implicit_tls else None,
            )

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def admit(self, session: _Session) -> str | None:
        """Count a new session in; the 421 to answer instead when a cap is reached."""
        settings = self.settings
        if len(self.sessions) >= settings.smtp_max_sessions:
            return R.TOO_MANY_SESSIONS
        client = session.client = client_key(session.peer)
        if self.per_ip.get(client, 0) >= settings.smtp_max_sessions_per_ip:
            return R.TOO_MANY_FROM_IP
        self.sessions.add(session)
        self.metrics.smtp_sessions.inc()
        self.per_ip[client] = self.per_ip.get(client, 0) + 1
        return None

    def release(self, session: _Session) -> None:
        self.unnamed.discard(session)
        if session in self.sessions:
            self.sessions.discard(session)
            self.metrics.smtp_sessions.dec()
            left = self.per_ip.get(session.client, 1) - 1
            if left > 0:
                self.per_ip[session.client] = left
            else:
                self.per_ip.pop(session.client, None)

    async def stop(self, *, grace: float = 10.0) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + grace
        while any(s.delivering for s in self.sessions) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for session in [*self.sessions, *self.unnamed]:
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
        # The message under way between DATA and its end.
        self.message: _Message | None = None
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
        self.server.metrics.smtp_connections.inc()
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

    def do_mail(self, arg: str) -> None:
        if self.helo is None:
            self.error(R.NEED_HELO)
            return
        if self.sender is not None:
            self.error(R.NESTED_MAIL)
            return
        refusal = self.hooks.mail_refusal()
        if refusal is not None:
            self.error(refusal)
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
        declared = next((int(p[5:]) for p in params if p.upper().startswith("SIZE=")), None)
        faults = self.hooks.session_faults()
        if faults is not None and "mail" in faults.stages:
            self._faulty([faults], "mail", lambda: self._take_sender(address, declared), sender=address)
            return
        self._take_sender(address, declared)

    def _take_sender(self, address: str, declared: int | None) -> None:
        self.sender = address
        self.declared_size = declared
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
        if len(self.envelope) >= self.server.settings.max_recipients:
            self.reply(R.TOO_MANY_RECIPIENTS)
            return
        recipient = self.hooks.cached(address, declared_size=self.declared_size)
        if recipient is not None:  # answered from memory: no task, no wait
            self._accept(address, recipient)
            return
        self.busy = True
        self.server.tasks.spawn(self._resolve(address))

    async def _resolve(self, address: str) -> None:
        try:
            recipient = await self.hooks.resolve(address, declared_size=self.declared_size)
            self.held = []  # this answer goes out with those of the commands pipelined behind it
        except InboxdError as exc:
            self.error(R.reply_for(exc))
        except Exception:
            log.exception("recipient lookup failed")
            self.reply(R.TEMP_FAILURE)
        else:
            if not self._accept(address, recipient):
                return  # a fault's delay answers later, and goes on with the session then
        self.busy = False
        self.pump()

    def _accept(self, address: str, recipient: Recipient) -> bool:
        """Accept the recipient, unless its mailbox's faults answer RCPT; False while a delay runs."""
        faults = recipient.faults
        if faults is not None and "rcpt" in faults.stages:
            proceed = functools.partial(self._take_recipient, address, recipient)
            return self._faulty([faults], "rcpt", proceed, sender=self.sender or "", recipient=address)
        self._take_recipient(address, recipient)
        return True

    def _take_recipient(self, address: str, recipient: Recipient) -> None:
        # Plus addressing can name one mailbox twice: it gets one copy, with the tags of both.
        for i, known in enumerate(self.recipients):
            if known.mailbox.id == recipient.mailbox.id:
                if recipient.tags:
                    self.recipients[i] = dataclasses.replace(known, tags=(*known.tags, *recipient.tags))
                break
        else:
            self.recipients.append(recipient)
        self.envelope.append(address)
        self.reply(R.RECIPIENT_OK)

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
        sets = [r.faults for r in self.recipients if r.faults is not None and "data" in r.faults.stages]
        if sets:
            self._faulty(sets, "data", self._start_data, refused=self.reset, sender=self.sender or "")
            return
        self._start_data()

    def _start_data(self) -> None:
        self.reply(R.START_DATA)
        self.queue_id = uuid.uuid4().hex[:16]
        limit = self.server.settings.max_message_size
        # Room for the dots of a stuffed message of the largest size; more is answered 552 at its end.
        self.message = _Message(self._received(self.queue_id), limit=limit + limit // 8 + 1024)
        pipelined = bytes(self.buf)
        self.buf.clear()
        if pipelined:
            rest = self.message.feed(pipelined)
            if rest is not None:
                self._end_data(rest)

    async def _deliver(self, message: _Message) -> None:
        started = time.perf_counter()
        size = max(0, message.size - message.header)
        answer = R.TEMP_FAILURE
        try:
            if message.overflow:
                answer = R.TOO_BIG
                return
            action = await self._data_end_action()
            if action is not NOTHING:
                fault = await self._data_end_fault(action)
                if fault is not None:
                    answer = fault
                    return
            if message.size > OFF_LOOP_BYTES:
                async with self.server.big:
                    await self._deliver_message(message)
            else:
                await self._deliver_message(message)
            answer = R.QUEUED.format(id=self.queue_id)
        except InboxdError as exc:
            answer = R.reply_for(exc)
        except Exception:
            log.exception("delivery failed")
        finally:
            self.held = []  # the answer goes out with those of the commands pipelined behind it
            if answer:
                self.reply(answer)
            self._record(answer or "421 dropped", size=size, seconds=time.perf_counter() - started)
            if not answer:
                self.drop()
            elif answer.startswith("421"):
                self.close(None)
            self.reset()
            self.delivering = False
            self.busy = False
            self.pump()

    async def _data_end_action(self) -> Action:
        engine = self.server.faults
        if engine is None or all(r.faults is None for r in self.recipients):
            return NOTHING
        sets = [r.faults for r in self.recipients]
        try:
            return await first_action(engine, sets, "data_end", client=self.peer, sender=self.sender or "")
        except Exception:
            log.exception("SMTP faults could not be decided; answering normally")
            return NOTHING

    async def _data_end_fault(self, action: Action) -> str | None:
        """A data_end fault, before anything is stored: the reply instead of 250, "" to drop the
        connection without one, or None to go on and deliver (a delay alone)."""
        if action.delay:
            await asyncio.sleep(action.delay)
        if action.disconnect:
            return ""
        return action.reply

    # SMTP faults ------------------------------------------------------------------------------

    def _faulty(
        self,
        sets: list[FaultSet],
        stage: str,
        proceed: Callable[[], None],
        *,
        refused: Callable[[], None] | None = None,
        sender: str = "",
        recipient: str = "",
    ) -> bool:
        """Answer a stage that has fault rules once they are decided (their counters may live in
        Redis): the fault's reply, a drop, or `proceed` (the normal answer) after any delay. Input
        is held meanwhile; False, since the answer comes later."""
        engine = self.server.faults
        if engine is None:
            proceed()
            return True
        self._release()
        self.busy = True
        self.server.tasks.spawn(self._decide(engine, sets, stage, proceed, refused, sender, recipient))
        return False

    async def _decide(
        self,
        engine: FaultService,
        sets: list[FaultSet],
        stage: str,
        proceed: Callable[[], None],
        refused: Callable[[], None] | None,
        sender: str,
        recipient: str,
    ) -> None:
        try:
            try:
                action = await first_action(engine, sets, stage, client=self.peer, sender=sender, recipient=recipient)
            except Exception:
                log.exception("SMTP faults could not be decided; answering normally")
                action = NOTHING
            if action.delay:
                await asyncio.sleep(action.delay)
            self.held = []
            if self.transport is not None:
                self._answer_fault(action, proceed, refused)
        finally:
            self.busy = False
            if self.transport is not None:
                self.pump()

    def _answer_fault(self, action: Action, proceed: Callable[[], None], refused: Callable[[], None] | None) -> None:
        if action.disconnect:
            self._record("421 dropped", size=0, seconds=action.delay, stage="fault")
            self.drop()
            return
        if action.reply is None:
            proceed()
            return
        if refused is not None:
            refused()
        self._record(action.reply, size=0, seconds=action.delay, stage="fault")
        if action.reply.startswith("421"):
            self.close(action.reply)  # 421 means the server closes the connection (RFC 5321 3.8)
        else:
            self.reply(action.reply)

    async def _deliver_message(self, message: _Message) -> None:
        # No local here keeps the bytes: ingest lets go of them once they are compressed.
        assert self.sender is not None
        await self.hooks.deliver(
            sender=self.sender,
            recipients=self.recipients,
            envelope=self.envelope,
            raw=await self._raw(message),
            client=(self.peer, self.helo),
        )

    async def _raw(self, message: _Message) -> bytearray:
        """The bytes to store (assembled in a thread when big); too big is refused."""
        if message.size > OFF_LOOP_BYTES:
            raw = await asyncio.to_thread(message.assemble)
        else:
            raw = message.assemble()
        if len(raw) - message.header > self.server.settings.max_message_size:
            raise MessageRejected(code="too_big")
        return raw

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
        if self.hooks.authenticated:
            proto += "A"
        # RFC 5321 4.4: the recipient path as sent, when there is exactly one (never the sandbox's own address).
        single = f"\r\n\tfor <{self.envelope[0]}>" if len(self.envelope) == 1 else ""
        stamp = _date_of(int(time.time()))
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

    declared_size: int | None = None
    queue_id = ""


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


class _Message:
    """DATA as it streams in: the chunks as they came, and where the stuffed dots are.

    The chunks are kept as received and copied once at the end: one buffer grown to 25 MiB next to
    others is copied again at each growth, on the event loop. Each chunk is searched once for CRLF
    followed by a dot: that is the end of DATA when CRLF follows the dot, a stuffed dot (RFC 5321
    4.5.2) otherwise. The stream starts with the `Received:` header (written when DATA starts, as
    Postfix does), whose final CRLF lets a first line that starts with a dot be found too.
    """

    __slots__ = ("chunks", "dots", "head", "header", "limit", "overflow", "size")

    def __init__(self, received: bytes, *, limit: int) -> None:
        self.chunks = [received]
        self.size = self.header = len(received)
        self.limit = limit
        # The stream's last bytes, searched again with the next chunk (a match may straddle them).
        self.head = received[-2:]
        # Stream offsets of the dots to drop; None once there are too many to note (hostile input).
        self.dots: list[int] | None = []
        self.overflow = False

    def feed(self, data: bytes) -> bytes | None:
        """Take bytes of DATA; once CRLF.CRLF has come, the bytes that followed it (else None)."""
        region = self.head + data
        base = self.size - len(self.head)
        pos = region.find(DOT_LINE)
        while pos >= 0:
            if len(region) < pos + 5:
                break  # whether this dot ends DATA shows with the next bytes
            if region.startswith(b"\r\n", pos + 3):
                self._keep(data, end=base + pos + 2)
                return region[pos + 5 :]
            if self.dots is not None:
                self.dots.append(base + pos + 2)
                if len(self.dots) > MAX_DOTS:
                    self.dots = None
            pos = region.find(DOT_LINE, pos + 3)
        self.head = region[pos:] if pos >= 0 else region[-2:]
        self._keep(data)
        return None

    def _keep(self, data: bytes, *, end: int | None = None) -> None:
        start = self.size
        self.size += len(data)
        if self.overflow:
            return
        if self.size - self.header > self.limit:
            # Too big: keep counting (the reply comes at the end of DATA), keep nothing.
            self.overflow = True
            self.chunks, self.dots = [], None
            return
        if end is None:
            self.chunks.append(data)
        elif end > start:
            self.chunks.append(data[: end - start])
        else:
            # The end's CRLF began in chunks already kept: take back what came after it.
            excess = start - end
            while excess:
                last = self.chunks.pop()
                cut = min(excess, len(last))
                if cut < len(last):
                    self.chunks.append(last[: len(last) - cut])
                excess -= cut

    def assemble(self) -> bytearray:
        """The message without its stuffed dots, in one buffer of its final size; each chunk is let
        go once copied, so the message is held about once, not as chunks and their join.

        The copy is one slice assignment per piece: short GIL holds, whatever the message's size.
        """
        chunks, dots, self.chunks = self.chunks, self.dots, []
        if dots is None:
            # Too many stuffed dots to have noted (hostile input): undone over the whole text.
            return bytearray().join(chunks).replace(DOT_LINE, b"\r\n")
        out = bytearray(sum(len(chunk) for chunk in chunks) - len(dots))
        marks = iter(dots)
        mark = next(marks, -1)
        offset = written = 0
        for index, chunk in enumerate(chunks):
            chunks[index] = b""
            view = memoryview(chunk)
            start = 0
            while 0 <= mark - offset < len(chunk):
                piece = view[start : mark - offset]
                out[written : written + len(piece)] = piece
                written += len(piece)
                start = mark - offset + 1
                mark = next(marks, -1)
            piece = view[start:]
            out[written : written + len(piece)] = piece
            written += len(piece)
            offset += len(chunk)
            del view, piece, chunk
        return out


@functools.lru_cache(maxsize=2)
def _date_of(second: int) -> str:
    """RFC 5322's date of a second: formatted once per second, not once per message (pure)."""
    return format_datetime(datetime.fromtimestamp(second, UTC))


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
