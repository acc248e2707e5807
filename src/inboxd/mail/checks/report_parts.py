"""From the checkers' results to the report's parts (mail/checks/report.py): pure, no I/O.

The checkers that do the I/O (services/checks: links, rspamd, SPF/DKIM/DMARC/ARC) hand over plain
results; this module words them as findings and verdicts, so the mapping lives beside the report's
shape and can be tested without a network. It names the results' shape as protocols (what it reads
of them), since `mail` never imports `services`.

It also builds the parts a time budget cut (`cut_parts`): a part that did not finish within
INBOXD_ANALYSIS_BUDGET answers what it has, with an `analysis_cut` finding that says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from inboxd.mail.checks.report import (
    ArcResult,
    AuthPart,
    ContentPart,
    DkimSignature,
    DmarcResult,
    Finding,
    HtmlPart,
    LinkItem,
    LinksPart,
    Severity,
    SpamPart,
    SpamSymbol,
    SpfResult,
    verdict_of,
)

__all__ = [
    "ANALYSIS_CUT",
    "auth_part",
    "cut_auth",
    "cut_content",
    "cut_finding",
    "cut_html",
    "cut_links",
    "cut_spam",
    "links_part",
    "signatures_part",
    "spam_part",
]

# The finding's code of a part cut by the analysis budget.
ANALYSIS_CUT = "analysis_cut"

RawFinding = tuple[Severity, str, str, str]  # (severity, code, message, where) as the checkers give them


# --- what this module reads of the checkers' results ----------------------------------------------


class LinkStatusLike(Protocol):
    @property
    def outcome(self) -> str: ...
    @property
    def status(self) -> int | None: ...
    @property
    def final_url(self) -> str | None: ...
    @property
    def ms(self) -> int: ...
    @property
    def error(self) -> str | None: ...


class SymbolLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def description(self) -> str: ...


class SpamResultLike(Protocol):
    @property
    def score(self) -> float | None: ...
    @property
    def required(self) -> float | None: ...
    @property
    def action(self) -> str | None: ...
    @property
    def symbols(self) -> Sequence[SymbolLike]: ...
    @property
    def error(self) -> str | None: ...


class SpfLike(Protocol):
    @property
    def result(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def client_ip(self) -> str | None: ...
    @property
    def helo(self) -> str | None: ...
    @property
    def mail_from(self) -> str | None: ...
    @property
    def explanation(self) -> str: ...


class DkimLike(Protocol):
    @property
    def domain(self) -> str: ...
    @property
    def selector(self) -> str: ...
    @property
    def result(self) -> str: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def body_hash(self) -> str: ...
    @property
    def error(self) -> str | None: ...


class DmarcLike(Protocol):
    @property
    def result(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def policy(self) -> str | None: ...
    @property
    def spf_aligned(self) -> bool | None: ...
    @property
    def dkim_aligned(self) -> bool | None: ...


class ArcLike(Protocol):
    @property
    def result(self) -> str: ...
    @property
    def instances(self) -> int: ...


class SignaturesLike(Protocol):
    """DKIM and ARC alone (a message file's `inboxd check`)."""

    @property
    def dkim(self) -> Sequence[DkimLike]: ...
    @property
    def arc(self) -> ArcLike: ...
    @property
    def authentication_results(self) -> str: ...
    @property
    def findings(self) -> Sequence[RawFinding]: ...


class AuthOutcomeLike(SignaturesLike, Protocol):
    @property
    def spf(self) -> SpfLike | None: ...
    @property
    def dmarc(self) -> DmarcLike: ...


# --- the mapping ----------------------------------------------------------------------------------


def links_part(items: Sequence[LinkItem], statuses: Sequence[LinkStatusLike]) -> LinksPart:
    checked: list[LinkItem] = []
    findings: list[Finding] = []
    for item, status in zip(items, statuses, strict=True):
        checked.append(
            msgspec.structs.replace(
                item, status=status.status, final_url=status.final_url, ms=status.ms, error=status.error
            )
        )
        finding = _link_finding(item, status)
        if finding is not None:
            findings.append(finding)
    return LinksPart(verdict=verdict_of(findings), items=checked, findings=findings)


def _link_finding(item: LinkItem, status: LinkStatusLike) -> Finding | None:
    what = "image" if item.kind == "image" else "link"
    if status.outcome == "broken":
        return Finding(
            severity="error", code="link_broken", message=f"The {what} is broken: {status.error}.", where=item.url
        )
    if status.outcome == "redirect_loop":
        return Finding(
            severity="error",
            code="link_redirect_loop",
            message=f"The {what}'s redirects do not end: {status.error}.",
            where=item.url,
        )
    if status.outcome == "private_refused":
        return Finding(
            severity="warning",
            code="link_private_refused",
            message=f"The {what} points at a private, loopback or link-local address; it was not "
            "fetched (INBOXD_LINK_CHECK_ALLOW_PRIVATE=true lifts this on a laptop).",
            where=item.url,
        )
    if status.outcome == "skipped" and status.error and "rate" in status.error:
        return Finding(severity="info", code="link_not_checked", message=f"{status.error}.", where=item.url)
    return None


def spam_part(result: SpamResultLike | None) -> SpamPart:
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


def auth_part(result: AuthOutcomeLike) -> AuthPart:
    findings = [Finding(severity=s, code=c, message=m, where=w) for s, c, m, w in result.findings]
    spf, dmarc = result.spf, result.dmarc
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
            result=dmarc.result,
            domain=dmarc.domain,
            policy=dmarc.policy,
            spf_aligned=dmarc.spf_aligned,
            dkim_aligned=dmarc.dkim_aligned,
        ),
        arc=ArcResult(result=result.arc.result, instances=result.arc.instances),
        authentication_results=result.authentication_results,
        findings=findings,
    )


def signatures_part(result: SignaturesLike) -> AuthPart:
    """The authentication part of a message file (`inboxd check`): DKIM and ARC; SPF and DMARC
    absent (not run, as its findings say)."""
    findings = [Finding(severity=s, code=c, message=m, where=w) for s, c, m, w in result.findings]
    return AuthPart(
        verdict=verdict_of(findings),
        dkim=_signatures(result.dkim),
        arc=ArcResult(result=result.arc.result, instances=result.arc.instances),
        authentication_results=result.authentication_results,
        findings=findings,
    )


def _signatures(found: Sequence[DkimLike]) -> list[DkimSignature]:
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


# --- parts cut by the analysis budget -------------------------------------------------------------


def cut_finding(what: str, budget: float) -> Finding:
    """The finding of a part that did not finish within `budget` seconds: `what` says what is missing."""
    return Finding(
        severity="warning",
        code=ANALYSIS_CUT,
        message=f"{what} did not finish within the analysis budget of {budget:g} s "
        "(INBOXD_ANALYSIS_BUDGET); ask again later for the whole part.",
    )


def cut_html(budget: float) -> HtmlPart:
    finding = cut_finding("The HTML compatibility check", budget)
    return HtmlPart(verdict="warning", findings=[finding], reason=finding.message)


def cut_content(size: int, budget: float) -> ContentPart:
    return ContentPart(verdict="warning", size=size, html_size=0, findings=[cut_finding("The content check", budget)])


def cut_links(items: Sequence[LinkItem], budget: float) -> LinksPart:
    """The links part when the URLs were not all checked in time: `items` unchecked, listed as found
    (none when the message's URLs were not even extracted in time)."""
    what = "The link check" if items else "Finding the message's links"
    finding = cut_finding(what, budget)
    return LinksPart(verdict="warning", items=list(items), findings=[finding], reason=finding.message)


def cut_spam(budget: float) -> SpamPart:
    finding = cut_finding("rspamd's score", budget)
    return SpamPart(verdict="warning", configured=True, findings=[finding], reason=finding.message)


def cut_auth(budget: float) -> AuthPart:
    finding = cut_finding("The SPF, DKIM and DMARC checks", budget)
    return AuthPart(verdict="warning", findings=[finding], reason=finding.message)
