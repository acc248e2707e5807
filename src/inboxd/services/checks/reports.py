"""A stored message's check report: computed on first request, kept, and served from the store after.

The pure parts (HTML compatibility, content, the list of URLs) come from `mail/checks`; this service
adds what needs I/O: each URL fetched (`links.LinkChecker`), rspamd's score (`spam.SpamChecker`) and
SPF/DKIM/DMARC/ARC (`auth.AuthChecker`), the last two with the reception data kept at ingest. The
three run concurrently. `refresh="links"` fetches the URLs again (past the link cache) and keeps
the other parts; `refresh="all"` computes everything again.

The checkers, and the libraries they need (aiohttp, dnspython, dkimpy, pyspf, the HTML parser),
are built at the first report: most servers never judge a message, and each module stays resident.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

import msgspec

from inboxd.config import Settings
from inboxd.mail.checks.report_parts import auth_part, links_part, signatures_part, spam_part
from inboxd.model import Mailbox
from inboxd.services.messages import MessageService
from inboxd.store import messages as store
from inboxd.store.db import Database, Tx

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport
    from inboxd.services.checks.auth import AuthChecker
    from inboxd.services.checks.links import LinkChecker
    from inboxd.services.checks.spam import SpamChecker

# The checker-to-report mapping lives beside the report (mail/checks/report_parts.py); named here
# too for the callers that import it from the service (`inboxd check`, tests).
__all__ = ["CheckService", "Refresh", "auth_part", "links_part", "signatures_part", "spam_part"]

Refresh = Literal["links", "all"] | None

# Bumped when a report's shape or rules change, so kept reports are computed again.
REPORT_VERSION = 2


@dataclass(frozen=True, slots=True)
class _Kept:
    report: str | None
    reception: store.ReceptionData | None


class _Stored(msgspec.Struct):
    v: int
    report: msgspec.Raw


class CheckService:
    def __init__(
        self, db: Database, *, settings: Settings, messages: MessageService, clock: Callable[[], float]
    ) -> None:
        self._db = db
        self._settings = settings
        self._messages = messages
        self._clock = clock
        self._checkers: tuple[LinkChecker, SpamChecker, AuthChecker] | None = None

    def _open(self) -> tuple[LinkChecker, SpamChecker, AuthChecker]:
        if self._checkers is None:
            from inboxd.services.checks.auth import AuthChecker
            from inboxd.services.checks.links import LinkChecker
            from inboxd.services.checks.spam import SpamChecker

            s = self._settings
            self._checkers = (
                LinkChecker(s, clock=self._clock),
                SpamChecker(s),
                AuthChecker(
                    nameservers=s.dns_nameservers, timeout=s.dns_timeout, authserv_id=s.smtp_hostname or "inboxd"
                ),
            )
        return self._checkers

    async def close(self) -> None:
        if self._checkers is not None:
            await self._checkers[0].close()

    async def report(self, mailbox: Mailbox, message_id: str, *, refresh: Refresh = None) -> CheckReport:
        """The report of a live message of `mailbox` (404/410 as for the message itself)."""
        from inboxd.mail.checks.report import CheckReport

        summary = await self._messages.live(mailbox, message_id)
        kept = await self._db.read(partial(_read_kept, message_id=summary.id))
        previous = None if kept.report is None else _decode(kept.report, CheckReport)
        if previous is not None and refresh is None:
            return previous  # the bytes are not even read
        raw = await self._messages.raw_of(summary)
        report = await self._compute(
            raw, mailbox, kept.reception, previous=previous if refresh == "links" else None, refresh=refresh
        )
        stored = msgspec.json.encode(_Stored(v=REPORT_VERSION, report=msgspec.Raw(msgspec.json.encode(report))))
        await self._db.write(
            partial(store.save_checks, message_id=summary.id, report=stored.decode(), now=self._clock())
        )
        return report

    async def _compute(
        self,
        raw: bytes,
        mailbox: Mailbox,
        reception: store.ReceptionData | None,
        *,
        previous: CheckReport | None,
        refresh: Refresh,
    ) -> CheckReport:
        from inboxd.mail.checks.judge import pure_parts
        from inboxd.mail.checks.report import combine
        from inboxd.services.checks.auth import Reception
        from inboxd.services.checks.spam import Envelope

        links, spam, auth = self._open()
        if previous is not None:  # the links again, past the cache; the other parts as kept
            items = previous.links.items
            statuses = await links.check_all([i.url for i in items], user_key=mailbox.user_id, refresh=True)
            return combine(previous.html, links_part(items, statuses), previous.spam, previous.auth, previous.content)
        mail_from = None if reception is None else reception.mail_from
        pure = await asyncio.to_thread(pure_parts, raw, mail_from=mail_from)
        urls = [item.url for item in pure.links]
        checking = links.check_all(urls, user_key=mailbox.user_id, refresh=refresh is not None)
        envelope = Envelope(
            client_ip=None if reception is None else reception.client_ip,
            helo=None if reception is None else reception.helo,
            mail_from=mail_from,
            recipients=[mailbox.address],
        )
        received = None if reception is None else Reception(reception.client_ip, reception.helo, reception.mail_from)
        spam_result = spam.check(raw, envelope) if spam.configured else _nothing()
        checked, scored, authenticated = await asyncio.gather(checking, spam_result, auth.check(raw, received))
        return combine(
            pure.html,
            links_part(pure.links, checked),
            spam_part(scored),
            auth_part(authenticated),
            pure.content,
        )


async def _nothing() -> None:
    return None


async def _read_kept(tx: Tx, *, message_id: str) -> _Kept:
    return _Kept(await store.checks_json(tx, message_id), await store.reception(tx, message_id))


def _decode(text: str, kind: type[CheckReport]) -> CheckReport | None:
    """A kept report, or None when it was kept by an older version (then computed again)."""
    try:
        stored = msgspec.json.decode(text, type=_Stored)
        if stored.v != REPORT_VERSION:
            return None
        return msgspec.json.decode(stored.report, type=kind)
    except msgspec.DecodeError:
        return None
