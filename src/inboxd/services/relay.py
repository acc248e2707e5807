"""The SMTP client releases go out through: one session per release to the configured relay
(`INBOXD_RELAY_*`), with aiosmtplib, so no thread and no blocking call on the event loop.

aiosmtplib is chosen over stdlib `smtplib` in a thread: it is asyncio-native (timeouts per
command, cancellation when the server stops), verifies TLS certificates by default, and reports
refused recipients one by one. Its answers and failures are translated here into `RelayAnswer`s
and `RelayError`, so nothing else sees the library.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from inboxd.config import Settings
from inboxd.errors import RelayError
from inboxd.model import RelayAnswer


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
            username=s.relay_username or None,
            password=s.relay_password or None,
            local_hostname=s.resolved_smtp_hostname,
            timeout=s.relay_timeout,
            use_tls=mode == "tls",
            # "none" means none: aiosmtplib would otherwise upgrade whenever STARTTLS is offered.
            start_tls=mode == "starttls",
            tls_context=None if mode == "none" else self._context(),
        )
        try:
            async with client:
                try:
                    refused, reply = await client.sendmail(sender, list(recipients), raw)
                except aiosmtplib.SMTPRecipientsRefused as exc:
                    return [RelayAnswer(r.recipient, False, r.code, r.message) for r in exc.recipients]
                except aiosmtplib.SMTPResponseException as exc:
                    # MAIL FROM or DATA refused: that one answer is every recipient's.
                    return [RelayAnswer(address, False, exc.code, exc.message) for address in recipients]
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise RelayError(f"The relay {s.relay_host}:{s.relay_port} failed: {_describe(exc)}") from exc
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
