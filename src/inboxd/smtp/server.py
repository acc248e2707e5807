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

Memory per message: DATA is kept as the chunks that arrived (see `DataBuffer`), and copied once
at its end into one buffer of the message's size, the stuffed dots left out, each chunk let go
once copied. Above `OFF_LOOP_BYTES` that copy, the parse and the compression run in a thread, at most `BIG_AT_ONCE`
messages at a time, so a big message never holds the event loop and eight at once do not each
hold several copies.

What a listener adds is a `SessionHooks` per session: extra EHLO keywords and verbs (AUTH on
the submission listener, `smtp/submission.py`), the gate before MAIL, and where RCPT and DATA
go. `Reception`, the default, is the MX: RCPT names a mailbox, DATA stores a copy per mailbox.

Where it lives: this module is the listener (`SmtpServer`: sockets, admission, shutdown) and the
receiving hooks; `smtp/hooks.py` the types a session names (`SessionHooks`, `Listener`);
`smtp/session.py` the protocol (reading, commands, replies, TLS, timeouts); `smtp/transaction.py`
MAIL, RCPT, DATA and the delivery at its end; `smtp/data.py` DATA's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence

from inboxd.config import Settings
from inboxd.http.client_address import TrustedProxies, trusted_proxies
from inboxd.metrics import Metrics
from inboxd.model import FaultSet
from inboxd.services.faults import FaultService
from inboxd.services.ingest import IngestService, Recipient
from inboxd.services.limits import client_key
from inboxd.services.space import SpaceGuard
from inboxd.smtp import replies as R
from inboxd.smtp.hooks import SessionHooks
from inboxd.smtp.session import Session
from inboxd.smtp.tally import SmtpTally
from inboxd.tasks import TaskSet

# Big messages assembled, parsed and compressed at once: each holds its buffer and its compressed
# copy meanwhile, the others wait holding one (their chunks).
BIG_AT_ONCE = 1

log = logging.getLogger("inboxd.smtp")


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


HooksFactory = Callable[[Session], SessionHooks]


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
        self.tally = SmtpTally(self.metrics)
        self.space = space
        self.hostname = settings.resolved_smtp_hostname
        # TLS starts with the connection on the implicit-TLS listener: no header can come first there.
        self.proxies = TrustedProxies(()) if self.implicit_tls else trusted_proxies(tuple(settings.trusted_proxies))
        self.sessions: set[Session] = set()
        # Trusted proxies' connections whose PROXY header has not come yet (not counted as sessions).
        self.unnamed: set[Session] = set()
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
                lambda: Session(self),
                self.settings.smtp_host,
                self.settings.smtp_port,
                reuse_address=True,
                backlog=1024,
            )
        else:
            self._server = await loop.create_server(
                lambda: Session(self),
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

    def admit(self, session: Session) -> str | None:
        """Count a new session in; the 421 to answer instead when a cap is reached."""
        settings = self.settings
        if len(self.sessions) >= settings.smtp_max_sessions:
            return R.TOO_MANY_SESSIONS
        client = session.client = client_key(session.peer)
        if self.per_ip.get(client, 0) >= settings.smtp_max_sessions_per_ip:
            return R.TOO_MANY_FROM_IP
        self.sessions.add(session)
        self.tally.session(1)
        self.per_ip[client] = self.per_ip.get(client, 0) + 1
        return None

    def release(self, session: Session) -> None:
        self.unnamed.discard(session)
        if session in self.sessions:
            self.sessions.discard(session)
            self.tally.session(-1)
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
