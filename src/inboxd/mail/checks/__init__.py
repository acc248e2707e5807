"""Judging a message, the pure half (issue 24): the report's types, HTML compatibility from caniemail's
data, content checks and the list of its URLs. The I/O half (link checks, rspamd, SPF/DKIM/DMARC/ARC)
lives in services/checks and fills the same report types."""

from inboxd.mail.checks.content import judge_content
from inboxd.mail.checks.html import judge_html, parse_html
from inboxd.mail.checks.judge import PureParts, judge_message, pure_parts
from inboxd.mail.checks.links import extract_links
from inboxd.mail.checks.report import (
    ArcResult,
    AuthPart,
    CheckReport,
    ClientResult,
    ClientSupport,
    ContentPart,
    DkimSignature,
    DmarcResult,
    Finding,
    HtmlFeature,
    HtmlPart,
    LinkItem,
    LinksPart,
    Severity,
    SpamPart,
    SpamSymbol,
    SpfResult,
    Verdict,
    combine,
    verdict_of,
)

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
    "PureParts",
    "Severity",
    "SpamPart",
    "SpamSymbol",
    "SpfResult",
    "Verdict",
    "combine",
    "extract_links",
    "judge_content",
    "judge_html",
    "judge_message",
    "parse_html",
    "pure_parts",
    "verdict_of",
]
