"""What an SMTP session needs of the listener that built it, as types: `SessionHooks` (one session's
listener-specific behaviour) and `Listener` (the listener as the session and its transaction use it).

They live apart from `smtp/server.py` so the session (`smtp/session.py`) and its transaction
(`smtp/transaction.py`) name them without importing the listener, which imports the session to
build it: imports in `smtp/` point one way, server → session → transaction → hooks.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from inboxd.config import Settings
from inboxd.http.client_address import TrustedProxies
from inboxd.model import FaultSet
from inboxd.services.faults import FaultService
from inboxd.services.ingest import Recipient
from inboxd.services.space import SpaceGuard
from inboxd.smtp.tally import SmtpTally
from inboxd.tasks import TaskSet

S = TypeVar("S")


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


class Listener(Protocol[S]):
    """The listener (`smtp/server.py`'s `SmtpServer`) as its sessions of type `S` use it."""

    settings: Settings
    tls: ssl.SSLContext | None
    implicit_tls: bool
    hostname: str
    proxies: TrustedProxies
    closing: bool
    # Trusted proxies' connections whose PROXY header has not come yet.
    unnamed: set[S]
    tally: SmtpTally
    space: SpaceGuard | None
    # Answers the stages of mailboxes that have SMTP faults; None ignores them (a bare engine).
    faults: FaultService | None
    big: asyncio.Semaphore
    tasks: TaskSet
    hooks: Callable[[S], SessionHooks]

    def admit(self, session: S) -> str | None:
        """Count a new session in; the 421 to answer instead when a cap is reached."""
        ...

    def release(self, session: S) -> None: ...
