"""The SMTP client releases go out through: one session per release to the configured relay
(`INBOXD_RELAY_*`), with aiosmtplib, so no thread and no blocking call on the event loop.

aiosmtplib is chosen over stdlib `smtplib` in a thread: it is asyncio-native (timeouts per
command, cancellation when the server stops), verifies TLS certificates by default, and reports
refused recipients one by one. Its answers and failures are translated here into `RelayAnswer`s
and `RelayError`, so nothing else sees the library.

A failure says which setting to change (`_advice`): the session is driven step by step (connect,
STARTTLS, AUTH, the message), so a relay that offers no STARTTLS or no AUTH is told apart by what
it offered in EHLO, and other failures by the exception's type (a certificate that does not verify,
a TLS handshake that fails, a refused connection, a timeout), never by a library's wording.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from inboxd.config import Settings
from inboxd.errors import RelayError
from inboxd.model import RelayAnswer


class _Unoffered(Exception):
    """The relay did not offer in EHLO what the settings need (STARTTLS, AUTH)."""

    def __init__(self, extension: str) -> None:
        super().__init__(f"it does not offer {extension}")
        self.extension = extension


class SmtpRelay:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._tls: ssl.SSLContext | None = None

    def _context(self) -> ssl.SSLContext:
        # Verification stays on: the relay's certificate must chain to INBOXD_RELAY_CA_FILE or to
        # the system's store and name INBOXD_RELAY_HOST. Made on first use (it reads files).
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self._settings.relay_ca_file or None)
        return self._tls

    async def send(self, *, sender: str, recipients: Sequence[str], raw: bytes) -> list[RelayAnswer]:
        """Send `raw` to `recipients`; the relay's answer for each, in order. Raises `RelayError`
        when the session fails before any recipient has an answer of its own."""
        # Imported at the first release: a server that never releases keeps it out of memory.
        import aiosmtplib

        s = self._settings
        mode = s.relay_tls
        client = aiosmtplib.SMTP(
            hostname=s.relay_host,
            port=s.relay_port,
            local_hostname=s.resolved_smtp_hostname,
            timeout=s.relay_timeout,
            use_tls=mode == "tls",
            # STARTTLS and AUTH are the steps below: "none" means none (aiosmtplib would otherwise
            # upgrade whenever STARTTLS is offered), and a missing one is named.
            start_tls=False,
            tls_context=None if mode == "none" else self._context(),
        )
        try:
            async with client:
                await client.ehlo()  # what the relay offers, before anything relies on it
                if mode == "starttls":
                    if not client.supports_extension("starttls"):
                        raise _Unoffered("STARTTLS")
                    await client.starttls()
                    await client.ehlo()  # RFC 3207: what was offered in clear is forgotten
                if s.relay_username:
                    if not client.supports_extension("auth"):
                        raise _Unoffered("AUTH")
                    await client.login(s.relay_username, s.relay_password)
                try:
                    refused, reply = await client.sendmail(sender, list(recipients), raw)
                except aiosmtplib.SMTPRecipientsRefused as exc:
                    return [RelayAnswer(r.recipient, False, r.code, r.message) for r in exc.recipients]
                except aiosmtplib.SMTPResponseException as exc:
                    if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
                        raise
                    # MAIL FROM or DATA refused: that one answer is every recipient's.
                    return [RelayAnswer(address, False, exc.code, exc.message) for address in recipients]
        except (aiosmtplib.SMTPException, OSError, _Unoffered) as exc:
            raise RelayError(
                f"The relay {s.relay_host}:{s.relay_port} failed: {_describe(exc)}. {_advice(exc, s)}"
            ) from exc
        # aiosmtplib gives DATA's reply as its text alone: a 250, since no exception came.
        return [
            RelayAnswer(a, False, refused[a].code, refused[a].message)
            if a in refused
            else RelayAnswer(a, True, 250, reply)
            for a in recipients
        ]


def _describe(exc: BaseException) -> str:
    import aiosmtplib

    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"{exc.code} {exc.message}"
    return str(exc) or type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from or during (aiosmtplib wraps the socket's errors)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _advice(exc: BaseException, s: Settings) -> str:
    """Which setting to change for this failure, in one sentence."""
    import aiosmtplib

    chain = _chain(exc)
    local = s.relay_host in ("127.0.0.1", "::1", "localhost")
    plain = "set INBOXD_RELAY_TLS=none" + (" (a relay on this machine needs no TLS)" if local else " if it has none")
    if isinstance(exc, _Unoffered):
        if exc.extension == "AUTH":
            return (
                "Leave INBOXD_RELAY_USERNAME empty for a relay that takes mail without AUTH, or use its "
                "submission port (INBOXD_RELAY_PORT)."
            )
        return f"For a relay without TLS {plain}; INBOXD_RELAY_TLS=tls for one that speaks TLS from the start."
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return (
            f"Its certificate does not verify for {s.relay_host}: set INBOXD_RELAY_CA_FILE to the CA that "
            f"signed it, or {plain}."
        )
    if any(isinstance(e, ssl.SSLError) for e in chain):
        if s.relay_tls == "tls":
            return f"TLS did not start: a relay that greets in plain SMTP needs INBOXD_RELAY_TLS=starttls, or {plain}."
        return f"TLS did not start: {plain}."
    if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
        return "Check INBOXD_RELAY_USERNAME and INBOXD_RELAY_PASSWORD (or INBOXD_RELAY_PASSWORD_FILE)."
    if isinstance(exc, aiosmtplib.SMTPTimeoutError) or any(isinstance(e, TimeoutError) for e in chain):
        tls = " or a TLS mode the relay does not speak (INBOXD_RELAY_TLS)" if s.relay_tls == "tls" else ""
        return f"Nothing answered within INBOXD_RELAY_TIMEOUT={s.relay_timeout:g} s: check the relay is up{tls}."
    if isinstance(exc, aiosmtplib.SMTPConnectError) or any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "Nothing took the connection: check INBOXD_RELAY_HOST and INBOXD_RELAY_PORT."
    return "Check the INBOXD_RELAY_* settings against what the relay expects."
