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
from inboxd.model import Mailbox
from inboxd.services.messages import MessageService
from inboxd.store import messages as store
from inboxd.store.db import Database, Tx

if TYPE_CHECKING:
    from inboxd.mail.checks.report import AuthPart, CheckReport, DkimSignature, LinkItem, LinksPart, SpamPart
    from inboxd.services.checks.auth import AuthChecker, AuthOutcome, DkimOutcome, SignaturesOutcome
    from inboxd.services.checks.links import LinkChecker, LinkStatus
    from inboxd.services.checks.spam import SpamChecker, SpamResult

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


# --- from the checkers' results to the report's parts ---------------------------------------------


def links_part(items: list[LinkItem], statuses: list[LinkStatus]) -> LinksPart:
    from inboxd.mail.checks.report import Finding, LinksPart, verdict_of

    checked: list[LinkItem] = []
    findings: list[Finding] = []
    for item, status in zip(items, statuses, strict=True):
        checked.append(
            msgspec.structs.replace(
                item, status=status.status, final_url=status.final_url, ms=status.ms, error=status.error
            )
        )
        what = "image" if item.kind == "image" else "link"
        if status.outcome == "broken":
            findings.append(
                Finding(
                    severity="error",
                    code="link_broken",
                    message=f"The {what} is broken: {status.error}.",
                    where=item.url,
                )
            )
        elif status.outcome == "redirect_loop":
            findings.append(
                Finding(
                    severity="error",
                    code="link_redirect_loop",
                    message=f"The {what}'s redirects do not end: {status.error}.",
                    where=item.url,
                )
            )
        elif status.outcome == "private_refused":
            findings.append(
                Finding(
                    severity="warning",
                    code="link_private_refused",
                    message=f"The {what} points at a private, loopback or link-local address; it was not "
                    "fetched (INBOXD_LINK_CHECK_ALLOW_PRIVATE=true lifts this on a laptop).",
                    where=item.url,
                )
            )
        elif status.outcome == "skipped" and status.error and "rate" in status.error:
            findings.append(
                Finding(severity="info", code="link_not_checked", message=f"{status.error}.", where=item.url)
            )
    return LinksPart(verdict=verdict_of(findings), items=checked, findings=findings)


def spam_part(result: SpamResult | None) -> SpamPart:
    from inboxd.mail.checks.report import Finding, SpamPart, SpamSymbol, verdict_of

    if result is None:
        return SpamPart(verdict="skipped", configured=False, reason="no spam filter is configured (INBOXD_RSPAMD_URL)")
    if result.error is not None:
        finding = Finding(severity="warning", code="spam_check_failed", message=f"{result.error}.")
        return SpamPart(verdict="warning", configured=True, findings=[finding], reason=result.error)
    findings = []
    if result.action == "reject":
        findings.append(
            Finding(
                severity="error",
                code="spam_rejected",
                message=f"rspamd would reject this message (score {result.score} of {result.required}).",
            )
        )
    elif result.action not in (None, "no action"):
        findings.append(
            Finding(
                severity="warning",
                code="spam_flagged",
                message=f"rspamd's action is '{result.action}' (score {result.score} of {result.required}).",
            )
        )
    return SpamPart(
        verdict=verdict_of(findings),
        configured=True,
        score=result.score,
        required=result.required,
        action=result.action,
        symbols=[SpamSymbol(name=s.name, score=s.score, description=s.description) for s in result.symbols],
        findings=findings,
    )


def auth_part(result: AuthOutcome) -> AuthPart:
    from inboxd.mail.checks.report import (
        ArcResult,
        AuthPart,
        DmarcResult,
        Finding,
        SpfResult,
        verdict_of,
    )

    findings = [Finding(severity=s, code=c, message=m, where=w) for s, c, m, w in result.findings]
    spf = result.spf
    return AuthPart(
        verdict=verdict_of(findings),
        spf=None
        if spf is None
        else SpfResult(
            result=spf.result,
            domain=spf.domain,
            client_ip=spf.client_ip,
            helo=spf.helo,
            mail_from=spf.mail_from,
            explanation=spf.explanation,
        ),
        dkim=_signatures(result.dkim),
        dmarc=DmarcResult(
            result=result.dmarc.result,
            domain=result.dmarc.domain,
            policy=result.dmarc.policy,
            spf_aligned=result.dmarc.spf_aligned,
            dkim_aligned=result.dmarc.dkim_aligned,
        ),
        arc=ArcResult(result=result.arc.result, instances=result.arc.instances),
        authentication_results=result.authentication_results,
        findings=findings,
    )


def signatures_part(result: SignaturesOutcome) -> AuthPart:
    """The authentication part of a message file (`inboxd check`): DKIM and ARC; SPF and DMARC
    absent (not run, as its findings say)."""
    from inboxd.mail.checks.report import ArcResult, AuthPart, Finding, verdict_of

    findings = [Finding(severity=s, code=c, message=m, where=w) for s, c, m, w in result.findings]
    return AuthPart(
        verdict=verdict_of(findings),
        dkim=_signatures(result.dkim),
        arc=ArcResult(result=result.arc.result, instances=result.arc.instances),
        authentication_results=result.authentication_results,
        findings=findings,
    )


def _signatures(found: list[DkimOutcome]) -> list[DkimSignature]:
    from inboxd.mail.checks.report import DkimSignature

    return [
        DkimSignature(
            domain=d.domain,
            selector=d.selector,
            result=d.result,
            algorithm=d.algorithm,
            body_hash=d.body_hash,
            error=d.error,
        )
        for d in found
    ]
