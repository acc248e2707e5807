"""Release: send a stored message on to a real inbox through the configured relay, and record it.

The rules, in the order they are checked (nothing is sent unless all pass):
- releases are off unless both `INBOXD_RELAY_HOST` and `INBOXD_RELAY_ALLOW` are set (403
  `release_disabled`); with them on, `INBOXD_RELAY_SENDER` must be set too (config.py stops the
  start otherwise);
- only Pro users and admins release (403 `pro_required`): a release sends mail from the
  operator's relay, under the operator's name;
- `to` holds 1 to `MAX_RECIPIENTS` plain ASCII addresses (`local@domain`, no display name, no
  whitespace, CR or LF: they go into the SMTP envelope), with no `%` or `!` in the local part (the
  old source routes, `a%b@relay` and `b!a@relay`, that a relay may send on to a host of their
  choosing), else 400 `invalid_request`;
- every recipient is allowed by `INBOXD_RELAY_ALLOW`, which lists domains (exactly that domain)
  and addresses; else 403 `recipient_not_allowed` naming the refused ones;
- the message is the caller's and not expired (404, 410);
- the user has a release left this hour (429 `release_limit_reached`).
The message goes out byte for byte as stored, with a `Received:` header that names the release and
a set of `Resent-From` (`INBOXD_RELAY_SENDER`), `Resent-Date`, `Resent-To` and `Resent-Message-ID`
(RFC 5322 §3.6.6) added in front: the reader's client shows who sent it on, and the original `From`
is left as it was written, never taken for the envelope. The envelope sender is
`INBOXD_RELAY_SENDER`, never an address from the message. The relay's answer per recipient is
recorded with who released it and when, also when the relay cannot be reached (then 502
`relay_error`, whose message names the setting to change).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import partial

from inboxd.config import Settings
from inboxd.errors import Forbidden, InvalidRequest, RelayError
from inboxd.model import Mailbox, RelayAnswer, Release, User
from inboxd.services.limits import Admission
from inboxd.services.messages import MessageService
from inboxd.services.relay import SmtpRelay
from inboxd.store import releases as store
from inboxd.store.db import Database

MAX_RECIPIENTS = 20
HISTORY = 100
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A dot-atom local part and a host name of two labels or more: what an envelope address may be.
ADDRESS = re.compile(rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+")


def valid_address(address: str) -> bool:
    return len(address) <= 254 and ADDRESS.fullmatch(address) is not None


def routed(address: str) -> bool:
    """Whether the local part holds `%` or `!`: a source route some relays still follow."""
    local = address.rpartition("@")[0]
    return "%" in local or "!" in local


class ReleaseService:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        clock: Callable[[], float],
        messages: MessageService,
        admission: Admission,
        relay: SmtpRelay,
    ) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._messages = messages
        self._admission = admission
        self._relay = relay
        allow = settings.relay_allow
        self._allowed_addresses = frozenset(a for a in allow if "@" in a)
        self._allowed_domains = frozenset(a for a in allow if "@" not in a)

    @property
    def enabled(self) -> bool:
        return bool(self._settings.relay_host and self._settings.relay_allow)

    @property
    def allowed(self) -> list[str]:
        """What `INBOXD_RELAY_ALLOW` lets a release reach, as the form lists it (domains, addresses)."""
        return sorted(self._allowed_domains) + sorted(self._allowed_addresses)

    @staticmethod
    def may_release(user: User) -> bool:
        return user.is_pro or user.role == "admin"

    def check_recipients(self, to: Sequence[str]) -> list[str]:
        """`to` as it will be sent, or the error that refuses it."""
        if not self.enabled:
            missing = "INBOXD_RELAY_HOST" if not self._settings.relay_host else "INBOXD_RELAY_ALLOW"
            raise Forbidden(f"Releases are off on this server: {missing} is not set.", code="release_disabled")
        if not 1 <= len(to) <= MAX_RECIPIENTS:
            raise InvalidRequest(f"`to` must name 1 to {MAX_RECIPIENTS} addresses.")
        bad = [a for a in to if not valid_address(a)]
        if bad:
            raise InvalidRequest(f"Not an email address: {', '.join(repr(a) for a in bad)}.")
        bad = [a for a in to if routed(a)]
        if bad:
            raise InvalidRequest(
                f"`%` and `!` are refused in the local part (a source route the relay could follow): "
                f"{', '.join(repr(a) for a in bad)}."
            )
        recipients = list(dict.fromkeys(to))
        refused = [a for a in recipients if not self._allowed(a)]
        if refused:
            raise Forbidden(
                f"This server does not allow releases to {', '.join(refused)} (INBOXD_RELAY_ALLOW).",
                code="recipient_not_allowed",
            )
        return recipients

    def _allowed(self, address: str) -> bool:
        lowered = address.lower()
        return lowered in self._allowed_addresses or lowered.rpartition("@")[2] in self._allowed_domains

    async def release(self, user: User, mailbox: Mailbox, message_id: str, to: Sequence[str]) -> Release:
        if self.enabled and not self.may_release(user):
            raise Forbidden(
                "Release sends mail through this server's relay: it needs a Pro account (or an admin).",
                code="pro_required",
            )
        recipients = self.check_recipients(to)
        raw = await self._messages.source(mailbox, message_id)
        await self._admission.admit_release(user)
        now = self._clock()
        release_id = str(uuid.uuid4())
        sender = self._settings.relay_sender
        failure: RelayError | None = None
        try:
            stamped = self._stamp(raw, release_id, now, recipients)
            answers = await self._relay.send(sender=sender, recipients=recipients, raw=stamped)
        except RelayError as exc:
            failure = exc
            answers = [RelayAnswer(a, False, 0, exc.message) for a in recipients]
        release = Release(
            id=release_id,
            user_id=user.id,
            mailbox_id=mailbox.id,
            message_id=message_id,
            created_at=now,
            answers=tuple(answers),
        )
        await self._db.write(partial(store.insert, release=release))
        if failure is not None:
            raise failure
        return release

    async def history(self, mailbox: Mailbox, message_id: str) -> list[Release]:
        """The message's releases, newest first (at most `HISTORY`); kept after the message is gone."""
        read = partial(store.of_message, mailbox_id=mailbox.id, message_id=message_id, limit=HISTORY)
        return await self._db.read(read)

    def _stamp(self, raw: bytes, release_id: str, now: float, recipients: Sequence[str]) -> bytes:
        """The trace and resent block in front of the stored bytes (RFC 5322 §3.6.6, §3.6.7: the
        `Received:` first, then the resent fields of this release). Every value is ours or checked
        (`to` is plain ASCII addresses, the sender a setting), so nothing the message says goes in."""
        when = format_datetime(datetime.fromtimestamp(now, UTC))
        host = self._settings.resolved_smtp_hostname
        to = _folded(recipients)
        block = (
            f"Received: by {host} (inboxd release) id {release_id}; {when}\r\n"
            f"Resent-Date: {when}\r\n"
            f"Resent-From: <{self._settings.relay_sender}>\r\n"
            f"Resent-To: {to}\r\n"
            f"Resent-Message-ID: <{release_id}@{host}>\r\n"
        )
        return block.encode("ascii") + raw


def _folded(addresses: Sequence[str]) -> str:
    """The addresses as one header value, one a line past the first (lines stay under 998)."""
    return ",\r\n\t".join(addresses)
