"""The typed report of a message's checks: five parts, each with a verdict and findings.

This is the contract the API, the dashboard, the pytest plugin, the MCP tool and ``inboxd check``
share (issue 24's "Report shape"). A finding's severity is ``error``, ``warning`` or ``info``; a part's
verdict is its worst finding (``info`` counts as ``ok``), and the report's verdict is its worst judged
part. A part that was not computed (not configured, needs reception data, not checked yet, nothing to
judge) says so: its verdict is ``skipped`` with a ``reason``, and it carries no figures, never a
made-up result; skipped parts do not count towards the report's verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

__all__ = [
    "ArcResult",
    "AuthPart",
    "CheckReport",
    "ClientResult",
    "ClientSupport",
    "ContentPart",
    "DkimSignature",
    "DmarcResult",
    "Finding",
    "HtmlFeature",
    "HtmlPart",
    "LinkItem",
    "LinksPart",
    "Severity",
    "SpamPart",
    "SpamSymbol",
    "SpfResult",
    "Verdict",
    "combine",
    "verdict_of",
]

Severity = Literal["error", "warning", "info"]
Verdict = Literal["error", "warning", "ok", "skipped"]
Support = Literal["supported", "partial", "unsupported"]
LinkKind = Literal["link", "image"]
LinkSource = Literal["html", "text", "list-unsubscribe"]

_RANK: dict[str, int] = {"skipped": -1, "ok": 0, "info": 0, "warning": 1, "error": 2}
_BY_RANK: dict[int, Verdict] = {0: "ok", 1: "warning", 2: "error"}


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a check found: ``code`` is stable (tests and CI match on it), ``message`` a plain
    sentence, ``where`` the element, header or URL it applies to ("" when the whole message)."""

    severity: Severity
    code: str
    message: str
    where: str = ""


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """A part's verdict: its worst finding, ``ok`` when it has none but ``info`` ones."""
    worst = max((_RANK[f.severity] for f in findings), default=0)
    return _BY_RANK[worst]


# --- HTML compatibility ---------------------------------------------------------------------------


class ClientSupport(msgspec.Struct, frozen=True, kw_only=True):
    """How well one email client on one platform renders the message: the mean of its support of
    each counted feature of the message it was tested on (supported 1, partial 0.5, unsupported 0),
    in percent. Only judged clients are listed (docs/checks.md, "Which clients")."""

    client: str  # caniemail's family slug: "outlook", "gmail", "apple-mail"...
    platform: str  # caniemail's platform slug: "windows", "ios", "desktop-webmail"...
    name: str  # "Outlook Windows"
    support: float
    tested: int  # how many of the message's features caniemail tested it on (the figure's base)
    unsupported: int  # how many of them it does not support at all
    partial: int


class ClientResult(msgspec.Struct, frozen=True, kw_only=True):
    """One client's result for one feature, with caniemail's notes on it."""

    client: str
    platform: str
    version: str  # the latest version caniemail tested
    support: Support
    notes: list[str] = msgspec.field(default_factory=list)


class HtmlFeature(msgspec.Struct, frozen=True, kw_only=True):
    """A counted caniemail feature the message uses. ``results`` lists the judged clients that do not
    fully support it as the message uses it (every judged client caniemail tested and that is not
    listed supports it; a partial result whose notes the message does not meet is not listed)."""

    slug: str  # caniemail's slug: "css-display-flex", "html-video"...
    title: str
    url: str
    category: str  # "html", "css", "image", "others"
    count: int  # occurrences in the message
    where: list[str]  # up to three places it was seen: "<video>", "display: flex", "@media"
    support: float  # percent of the judged clients caniemail tested on it, partial counting half
    results: list[ClientResult]


class HtmlPart(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    support: float | None = None  # mean of the judged clients' support, each equal; None when skipped
    clients: list[ClientSupport] = msgspec.field(default_factory=list)  # worst first
    features: list[HtmlFeature] = msgspec.field(default_factory=list)  # least supported first
    findings: list[Finding] = msgspec.field(default_factory=list)
    data_version: str = ""  # caniemail's last_update_date
    reason: str = ""  # why the part was skipped


# --- links ----------------------------------------------------------------------------------------


class LinkItem(msgspec.Struct, frozen=True, kw_only=True):
    """A link or image URL of the message; the status fields stay None until the URL is checked."""

    url: str
    kind: LinkKind
    source: LinkSource  # where it was found: the HTML body, the text body or List-Unsubscribe
    status: int | None = None
    final_url: str | None = None
    ms: int | None = None
    error: str | None = None


class LinksPart(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    items: list[LinkItem] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)
    reason: str = ""


# --- spam -----------------------------------------------------------------------------------------


class SpamSymbol(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    score: float
    description: str = ""


class SpamPart(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    configured: bool
    score: float | None = None
    required: float | None = None
    action: str | None = None
    symbols: list[SpamSymbol] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)
    reason: str = ""


# --- authentication -------------------------------------------------------------------------------


class SpfResult(msgspec.Struct, frozen=True, kw_only=True):
    result: str  # pass|fail|softfail|neutral|none|temperror|permerror
    domain: str = ""
    client_ip: str | None = None
    helo: str | None = None
    mail_from: str | None = None
    explanation: str = ""


class DkimSignature(msgspec.Struct, frozen=True, kw_only=True):
    domain: str
    selector: str
    result: str  # pass|fail|neutral|temperror|permerror
    algorithm: str = ""
    body_hash: str = ""  # pass|fail: whether the body still matches the signed hash
    error: str | None = None


class DmarcResult(msgspec.Struct, frozen=True, kw_only=True):
    result: str  # pass|fail|none|temperror|permerror
    domain: str = ""
    policy: str | None = None  # none|quarantine|reject
    spf_aligned: bool | None = None
    dkim_aligned: bool | None = None


class ArcResult(msgspec.Struct, frozen=True, kw_only=True):
    result: str  # pass|fail|none
    instances: int = 0


class AuthPart(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    spf: SpfResult | None = None
    dkim: list[DkimSignature] = msgspec.field(default_factory=list)
    dmarc: DmarcResult | None = None
    arc: ArcResult | None = None
    authentication_results: str = ""
    findings: list[Finding] = msgspec.field(default_factory=list)
    reason: str = ""


# --- content and the whole report ------------------------------------------------------------------


class ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    size: int  # the raw message, bytes
    html_size: int  # the decoded HTML body, UTF-8 bytes (what Gmail's 102 KB clipping counts)
    findings: list[Finding] = msgspec.field(default_factory=list)


class CheckReport(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    html: HtmlPart
    links: LinksPart
    spam: SpamPart
    auth: AuthPart
    content: ContentPart

    def findings(self) -> list[tuple[str, Finding]]:
        """Every finding with the name of its part, in the parts' order."""
        parts = (("html", self.html), ("links", self.links), ("spam", self.spam), ("auth", self.auth))
        out = [(name, f) for name, part in parts for f in part.findings]
        return out + [("content", f) for f in self.content.findings]


def combine(html: HtmlPart, links: LinksPart, spam: SpamPart, auth: AuthPart, content: ContentPart) -> CheckReport:
    """The whole report: its verdict is the worst of the judged parts."""
    worst = max((_RANK[p.verdict] for p in (html, links, spam, auth, content)), default=0)
    return CheckReport(verdict=_BY_RANK[max(worst, 0)], html=html, links=links, spam=spam, auth=auth, content=content)
