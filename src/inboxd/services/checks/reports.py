"""A stored message's check report: computed on first request, kept, and served from the store after.

The pure parts (HTML compatibility, content, the list of URLs) come from `mail/checks`; this service
adds what needs I/O: each URL fetched (`links.LinkChecker`), rspamd's score (`spam.SpamChecker`) and
SPF/DKIM/DMARC/ARC (`auth.AuthChecker`), the last two with the reception data kept at ingest. Spam
and authentication run while the pure parts are computed on the analysis executor
(services/analysis.py: its own threads, a share per user, single-flight), then the links they
found; each part within INBOXD_ANALYSIS_BUDGET, after which it answers an `analysis_cut` finding.
`refresh="links"` fetches the URLs again (past the link cache) and keeps the other parts;
`refresh="spam"` asks rspamd again (as a kept report from before rspamd was configured is, by
itself); `refresh="all"` computes everything again.

The checkers, and the libraries they need (aiohttp, dnspython, dkimpy, pyspf, the HTML parser),
are built at the first report: most servers never judge a message, and each module stays resident.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeVar

import msgspec

from inboxd.config import Settings
from inboxd.mail.checks.report_parts import auth_part, links_part, signatures_part, spam_part
from inboxd.model import Mailbox, MessageSummary
from inboxd.services.analysis import Analysis
from inboxd.services.messages import MessageService
from inboxd.store import messages as store
from inboxd.store.db import Database, Tx

if TYPE_CHECKING:
    from inboxd.mail.checks.report import AuthPart, CheckReport, LinkItem, LinksPart, SpamPart
    from inboxd.services.checks.auth import AuthChecker
    from inboxd.services.checks.links import LinkChecker
    from inboxd.services.checks.spam import SpamChecker

# The checker-to-report mapping lives beside the report (mail/checks/report_parts.py); named here
# too for the callers that import it from the service (`inboxd check`, tests).
__all__ = ["Admit", "CheckService", "Refresh", "auth_part", "links_part", "signatures_part", "spam_part"]

T = TypeVar("T")

# What `refresh` may name: `links` fetches the URLs again past the link cache, `spam` asks rspamd
# again, `all` computes everything again; the other parts stay as kept.
Refresh = Literal["links", "spam", "all"] | None
# The limits and the monthly count of a computed report, for a face that has not counted it yet.
Admit = Callable[[], Awaitable[object]]

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
        self,
        db: Database,
        *,
        settings: Settings,
        messages: MessageService,
        clock: Callable[[], float],
        analysis: Analysis,
    ) -> None:
        self._db = db
        self._settings = settings
        self._messages = messages
        self._clock = clock
        # The executor of mail analysis (app.py builds it; MessageService shares it).
        self.analysis = analysis
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
            await self._checkers[2].close()  # the auth checker's threads

    async def report(
        self, mailbox: Mailbox, message_id: str, *, refresh: Refresh = None, admit: Admit | None = None
    ) -> CheckReport:
        """The report of a live message of `mailbox` (404/410 as for the message itself).

        A report computed now (none kept, `refresh`, or a kept spam part from before rspamd was
        configured) is one operation of the caller: `admit` (the limits and the monthly count) is
        awaited first. A face whose request was admitted as one operation already (every API call,
        a dashboard form with `operation=True`) passes none. Concurrent requests of one message
        share one computation; a report with a part cut by the analysis budget is answered but not
        kept, so a later request computes it again (and finds the work that went on)."""
        from inboxd.mail.checks.report import CheckReport

        summary = await self._messages.live(mailbox, message_id)
        kept = await self._db.read(partial(_read_kept, message_id=summary.id))
        previous = None if kept.report is None else _decode(kept.report, CheckReport)
        if previous is not None and refresh is None:
            if previous.spam.configured or not self._settings.rspamd_url:
                return previous  # the bytes are not even read
            refresh = "spam"  # scored again now that rspamd is there
        if refresh in ("links", "spam") and previous is None:
            refresh = "all"  # nothing kept to keep: the whole report
        if admit is not None:
            await admit()
        compute = partial(self._compute_and_keep, mailbox, summary, kept.reception, previous=previous, refresh=refresh)
        return await self.analysis.shared((summary.id, "checks" if refresh is None else f"checks:{refresh}"), compute)

    async def _compute_and_keep(
        self,
        mailbox: Mailbox,
        summary: MessageSummary,
        reception: store.ReceptionData | None,
        *,
        previous: CheckReport | None,
        refresh: Refresh,
    ) -> CheckReport:
        raw = await self._messages.raw_of(summary)
        if refresh in ("links", "spam") and previous is not None:
            report = await self._again(raw, summary, mailbox, reception, previous=previous, part=refresh)
        else:
            report = await self._compute(raw, summary, mailbox, reception, refresh=refresh)
        if not _was_cut(report):
            stored = msgspec.json.encode(_Stored(v=REPORT_VERSION, report=msgspec.Raw(msgspec.json.encode(report))))
            await self._db.write(
                partial(store.save_checks, message_id=summary.id, report=stored.decode(), now=self._clock())
            )
        return report

    async def _again(
        self,
        raw: bytes,
        summary: MessageSummary,
        mailbox: Mailbox,
        reception: store.ReceptionData | None,
        *,
        previous: CheckReport,
        part: Literal["links", "spam"],
    ) -> CheckReport:
        """One part computed again, the others as kept: the links past the link cache, or the spam score."""
        from inboxd.mail.checks.report import combine

        links, spam, auth = previous.links, previous.spam, previous.auth
        if part == "links":
            links = await self._links(previous.links.items, mailbox, refresh=True)
        else:
            spam = await self._spam(raw, mailbox, reception)
        return combine(previous.html, links, spam, auth, previous.content)

    async def _compute(
        self,
        raw: bytes,
        summary: MessageSummary,
        mailbox: Mailbox,
        reception: store.ReceptionData | None,
        *,
        refresh: Refresh,
    ) -> CheckReport:
        """Every part: spam and authentication (I/O) while the pure parts run on the analysis
        executor, then the links those found. Each part within the analysis budget."""
        from inboxd.mail.checks.judge import pure_parts
        from inboxd.mail.checks.report import combine
        from inboxd.mail.checks.report_parts import cut_content, cut_html, cut_links

        mail_from = None if reception is None else reception.mail_from
        spam = asyncio.ensure_future(self._spam(raw, mailbox, reception))
        auth = asyncio.ensure_future(self._auth(raw, mailbox, reception))
        try:
            budget = self.analysis.budget
            work = partial(pure_parts, raw, mail_from=mail_from)
            pure = await self.analysis.within((summary.id, "pure"), user=mailbox.user_id, work=work)
            if pure is None:
                html, content, links = cut_html(budget), cut_content(len(raw), budget), cut_links([], budget)
            else:
                html, content = pure.html, pure.content
                links = await self._links(pure.links, mailbox, refresh=refresh is not None)
            return combine(html, links, await spam, await auth, content)
        finally:
            spam.cancel()  # when the pure parts failed: nobody waits for these any more
            auth.cancel()

    async def _links(self, items: Sequence[LinkItem], mailbox: Mailbox, *, refresh: bool) -> LinksPart:
        from inboxd.mail.checks.report_parts import cut_links

        checker = self._open()[0]
        checking = checker.check_all([i.url for i in items], user_key=mailbox.user_id, refresh=refresh)
        statuses = await self._budgeted("links", checking)
        return cut_links(items, self.analysis.budget) if statuses is None else links_part(items, statuses)

    async def _spam(self, raw: bytes, mailbox: Mailbox, reception: store.ReceptionData | None) -> SpamPart:
        from inboxd.mail.checks.report_parts import cut_spam
        from inboxd.services.checks.spam import Envelope

        checker = self._open()[1]
        if not checker.configured:
            return spam_part(None)
        envelope = Envelope(
            client_ip=None if reception is None else reception.client_ip,
            helo=None if reception is None else reception.helo,
            mail_from=None if reception is None else reception.mail_from,
            recipients=[mailbox.address],
        )
        scored = await self._budgeted("spam", checker.check(raw, envelope, user_key=mailbox.user_id))
        return cut_spam(self.analysis.budget) if scored is None else spam_part(scored)

    async def _auth(self, raw: bytes, mailbox: Mailbox, reception: store.ReceptionData | None) -> AuthPart:
        from inboxd.mail.checks.report_parts import cut_auth
        from inboxd.services.checks.auth import Reception

        checker = self._open()[2]
        received = None if reception is None else Reception(reception.client_ip, reception.helo, reception.mail_from)
        authenticated = await self._budgeted("auth", checker.check(raw, received, user_key=mailbox.user_id))
        return cut_auth(self.analysis.budget) if authenticated is None else auth_part(authenticated)

    async def _budgeted(self, part: str, work: Awaitable[T]) -> T | None:
        """`work`'s outcome, or None after the analysis budget (the part is then cut; its I/O is
        cancelled, so nothing it half did is kept)."""
        try:
            return await asyncio.wait_for(work, self.analysis.budget)
        except TimeoutError:
            self.analysis.cuts[part] += 1
            return None


def _was_cut(report: CheckReport) -> bool:
    from inboxd.mail.checks.report_parts import ANALYSIS_CUT

    return any(f.code == ANALYSIS_CUT for _, f in report.findings())


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
