"""Release: send a stored message on to a real inbox through the configured relay, and record it.

The rules, in the order they are checked (nothing is sent unless all pass):
- releases are off unless both `INBOXD_RELAY_HOST` and `INBOXD_RELAY_ALLOW` are set (403
  `release_disabled`);
- `to` holds 1 to `MAX_RECIPIENTS` plain ASCII addresses (`local@domain`, no display name, no
  whitespace, CR or LF: they go into the SMTP envelope), else 400 `invalid_request`;
- every recipient is allowed by `INBOXD_RELAY_ALLOW`, which lists domains (exactly that domain)
  and addresses; else 403 `recipient_not_allowed` naming the refused ones;
- the message is the caller's and not expired (404, 410);
- the user has a release left this hour (429 `release_limit_reached`).
The message goes out byte for byte as stored, with one `Received:` header added in front that
names the release; the relay's answer per recipient is recorded with who released it and when,
also when the relay cannot be reached (then 502 `relay_error`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import format_datetime, getaddresses
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
        recipients = self.check_recipients(to)
        raw = await self._messages.source(mailbox, message_id)
        await self._admission.admit_release(user)
        now = self._clock()
        release_id = str(uuid.uuid4())
        sender = self._settings.relay_sender or _from_address(raw)
        failure: RelayError | None = None
        try:
            stamped = self._stamp(raw, release_id, now)
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

    def _stamp(self, raw: bytes, release_id: str, now: float) -> bytes:
        when = format_datetime(datetime.fromtimestamp(now, UTC))
        host = self._settings.resolved_smtp_hostname
        return f"Received: by {host} (inboxd release) id {release_id}; {when}\r\n".encode("ascii") + raw


def _from_address(raw: bytes) -> str:
    """The From header's address when it is a plain one, else the null reverse-path."""
    headers = BytesHeaderParser(policy=compat32).parsebytes(raw, headersonly=True)
    found = getaddresses([str(headers.get("From", ""))])
    address = found[0][1] if found else ""
    return address if valid_address(address) else ""
