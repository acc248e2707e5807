"""The submission listener's hooks: SMTP AUTH (PLAIN, LOGIN) and capture into the SMTP sandbox.

On this listener nothing is delivered anywhere: after AUTH every RCPT is accepted (up to the
recipient limit) and recorded, and DATA stores one copy in the authenticated user's sandbox
with its envelope, committed before 250, through the same ingest path as received mail.

Rules (issue 14):
- AUTH is offered under TLS (STARTTLS or the implicit-TLS port), or without TLS when the
  listener is on a loopback address or `submission_allow_plaintext_auth` is set; else 538. A
  client a trusted proxy names (PROXY header) is not local however the listener is bound: it
  gets AUTH without TLS only where `submission_allow_plaintext_auth` says so.
- Credentials: the sandbox username and any live API token of its user. Failures are counted
  with the sign-in rules (services/limits.py: per username and client, per client, and a
  slowdown per username), apart from `POST /api/token`'s: 535 while under them, then 421 and
  the connection closes. The reply never tells an unknown username from a wrong token.
- The token is checked again at the first RCPT of every message, so a revoked token stops a
  session that is already open.
- STARTTLS forgets the authentication (the engine calls `tls_started`), and the engine drops
  whatever was pipelined behind STARTTLS.
- With `sandbox_anonymous_user`, a session that does not authenticate captures into that
  user's sandbox (a laptop's zero configuration).
"""

from __future__ import annotations

import asyncio
import binascii
import ipaddress
import logging
from base64 import b64decode
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from inboxd.config import Settings
from inboxd.errors import Forbidden, MessageRejected, RateLimited, Unauthorized
from inboxd.model import FaultSet
from inboxd.services.faults import FaultService
from inboxd.services.ingest import IngestService, Recipient
from inboxd.services.limits import Admission
from inboxd.services.sandbox import SandboxService, Submitter, Target
from inboxd.smtp import replies as R
from inboxd.smtp.hooks import SessionHooks
from inboxd.smtp.session import Session

log = logging.getLogger("inboxd.smtp.submission")

MECHANISMS = "AUTH PLAIN LOGIN"
_USERNAME_CHALLENGE = "VXNlcm5hbWU6"  # base64 "Username:"
_PASSWORD_CHALLENGE = "UGFzc3dvcmQ6"  # base64 "Password:"


class Submission:
    """Makes each submission session's hooks; one per listener."""

    def __init__(
        self,
        *,
        sandboxes: SandboxService,
        ingest: IngestService,
        admission: Admission,
        settings: Settings,
        plaintext_auth: bool | None = None,
        faults: FaultService | None = None,
    ) -> None:
        self.sandboxes = sandboxes
        self.faults = faults
        self.ingest = ingest
        self.admission = admission
        self.settings = settings
        # Whether AUTH is offered without TLS; given explicitly only where a listener is built by hand.
        if plaintext_auth is None:
            plaintext_auth = settings.submission_allow_plaintext_auth or _is_loopback(settings.submission_host)
        self.plaintext_auth = plaintext_auth

    def __call__(self, session: Session) -> SessionHooks:
        return _SubmissionSession(self, session)


class _SubmissionSession:
    def __init__(self, listener: Submission, session: Session) -> None:
        self.listener = listener
        self.session = session
        self.submitter: Submitter | None = None
        self.target: Target | None = None
        # The sandbox's SMTP faults, read at AUTH and at each message's first RCPT.
        self.faults: FaultSet | None = None

    # SessionHooks ------------------------------------------------------------------------------

    def ehlo_keywords(self) -> Sequence[str]:
        return (MECHANISMS,) if self._auth_offered() else ()

    def command(self, verb: str, arg: str) -> bool:
        if verb != "AUTH":
            return False
        self._auth(arg)
        return True

    def mail_refusal(self) -> str | None:
        if self.submitter is None and not self.listener.settings.sandbox_anonymous_user:
            return R.AUTH_REQUIRED
        return None

    def cached(self, address: str, *, declared_size: int | None) -> Recipient | None:
        return None  # every message rechecks its sender's credentials, plan and quotas at RCPT

    async def resolve(self, address: str, *, declared_size: int | None) -> Recipient:
        # Checked once per message, at its first RCPT: the credentials, the plan, the quotas.
        if self.target is None or not self.session.envelope:
            self.target = None
            sandboxes = self.listener.sandboxes
            if self.submitter is not None:
                try:
                    target = await sandboxes.recheck(self.submitter)
                except MessageRejected:
                    self.submitter = None
                    raise
            else:
                target = await sandboxes.anonymous(self.listener.settings.sandbox_anonymous_user)
            used, limit = await self.listener.admission.usage(target.user)
            if used >= limit:
                raise MessageRejected(code="ops_quota_exceeded")
            self.target = target
            self.faults = await self._sandbox_faults(target.recipient.mailbox.id)
        recipient = self.target.recipient
        if declared_size and recipient.mailbox.used + declared_size > recipient.mailbox.quota:
            raise MessageRejected(code="mailbox_full")
        return recipient if self.faults is None else replace(recipient, faults=self.faults)

    async def _sandbox_faults(self, mailbox_id: str) -> FaultSet | None:
        faults = self.listener.faults
        return None if faults is None else await faults.of_sandbox(mailbox_id)

    def session_faults(self) -> FaultSet | None:
        # Only an authenticated session is known to be the user's before RCPT (README, SMTP faults).
        return self.faults if self.submitter is not None else None

    def deliver(
        self,
        *,
        sender: str,
        recipients: Sequence[Recipient],
        envelope: Sequence[str],
        raw: bytes | bytearray,
        client: tuple[str, str | None],
    ) -> Awaitable[object]:
        stored = self.listener.ingest.deliver(
            sender=sender, recipients=recipients, raw=raw, envelope=envelope, client_ip=client[0], helo=client[1]
        )
        return self._after(stored)

    async def _after(self, stored: Awaitable[object]) -> None:
        await stored
        # Each captured message is one operation of the plan's month; the next reads the quotas afresh.
        target, self.target = self.target, None
        if target is not None:
            try:
                await self.listener.admission.count(target.user)
            except Exception:
                # The message is committed: its 250 must not turn into a retry (and a duplicate)
                # because the counter's store (Redis) failed.
                log.warning("could not count a captured message as an operation", exc_info=True)

    @property
    def authenticated(self) -> bool:
        return self.submitter is not None

    def tls_started(self) -> None:
        self.submitter = None
        self.target = None

    # AUTH -------------------------------------------------------------------------------------

    def _auth_offered(self) -> bool:
        session, listener = self.session, self.listener
        if session.secure:
            return True
        return listener.settings.submission_allow_plaintext_auth if session.proxied else listener.plaintext_auth

    def _auth(self, arg: str) -> None:
        session = self.session
        if session.helo is None:
            session.error(R.NEED_HELO)
            return
        if self.submitter is not None:
            session.error(R.AUTH_ALREADY)
            return
        if session.sender is not None:
            session.error(R.AUTH_IN_TRANSACTION)
            return
        if not self._auth_offered():
            session.error(R.AUTH_NEEDS_TLS)
            return
        mechanism, _, initial = arg.partition(" ")
        mechanism, initial = mechanism.upper(), initial.strip()
        if mechanism == "PLAIN":
            if initial:
                self._plain(initial.encode("utf-8", "surrogateescape"))
            else:
                self._ask("", self._plain)
        elif mechanism == "LOGIN":
            if initial:
                self._login_username(initial.encode("utf-8", "surrogateescape"))
            else:
                self._ask(_USERNAME_CHALLENGE, self._login_username)
        else:
            session.error(R.AUTH_MECHANISM if mechanism else R.SYNTAX_ERROR)

    def _ask(self, challenge: str, then: Callable[[bytes], None]) -> None:
        def answer(line: bytes) -> None:
            if line.strip() == b"*":
                self.session.error(R.AUTH_CANCELLED)
                return
            then(line)

        self.session.line_handler = answer
        self.session.reply(R.AUTH_CHALLENGE.format(challenge=challenge))

    def _plain(self, response: bytes) -> None:
        decoded = _decode(response)
        parts = None if decoded is None else decoded.split(b"\x00")
        if parts is None or len(parts) != 3:
            self.session.error(R.AUTH_UNDECODABLE)
            return
        authzid, username, password = (_text(p) for p in parts)
        if username is None or password is None or authzid is None or authzid not in ("", username):
            self.session.error(R.AUTH_UNDECODABLE)
            return
        self.session.run(self._verify(username, password))

    def _login_username(self, response: bytes) -> None:
        decoded = _decode(response)
        username = None if decoded is None else _text(decoded)
        if username is None:
            self.session.error(R.AUTH_UNDECODABLE)
            return
        self._ask(_PASSWORD_CHALLENGE, lambda line: self._login_password(username, line))

    def _login_password(self, username: str, response: bytes) -> None:
        decoded = _decode(response)
        password = None if decoded is None else _text(decoded)
        if password is None:
            self.session.error(R.AUTH_UNDECODABLE)
            return
        self.session.run(self._verify(username, password))

    async def _verify(self, username: str, password: str) -> None:
        listener, session = self.listener, self.session
        try:
            # Entered as a failure before the password check, so concurrent guesses count at once.
            attempt = await listener.admission.reserve_sign_in(username, client=session.peer, realm="smtp")
        except RateLimited:
            session.close(R.AUTH_TOO_MANY)
            return
        try:
            submitter = await listener.sandboxes.authenticate(username, password)
        except Unauthorized:
            session.error(R.AUTH_FAILED)
            return
        except BaseException as exc:
            await listener.admission.release_sign_in(attempt)
            if not isinstance(exc, Forbidden):
                raise
            session.error(R.AUTH_PRO_REQUIRED)
            return
        await listener.admission.sign_in_succeeded(attempt)
        self.faults = await self._sandbox_faults(submitter.sandbox.mailbox.id)
        if self.faults is not None and not await self._auth_fault():
            return
        self.submitter, self.target = submitter, None
        session.reply(R.AUTH_OK)

    async def _auth_fault(self) -> bool:
        """The sandbox's `connect` then `auth` faults, once AUTH named the user (the first moment a
        submission session is known to be theirs); False when a fault answered instead of 235."""
        engine, faults, session = self.listener.faults, self.faults, self.session
        assert engine is not None and faults is not None
        for stage in ("connect", "auth"):
            if stage not in faults.stages:
                continue
            action = await engine.decide(faults, stage, client=session.peer)
            if action.delay:
                await asyncio.sleep(action.delay)
            if action.disconnect:
                session.drop()
                return False
            if action.reply is not None:
                if action.reply.startswith("421"):
                    session.close(action.reply)
                else:
                    session.error(action.reply)
                return False
        return True


def _decode(response: bytes) -> bytes | None:
    value = response.strip()
    if value == b"=":
        return b""
    try:
        return b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _text(value: bytes) -> str | None:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
