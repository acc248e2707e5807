"""The pure half of a message's report: HTML compatibility and content, judged from the raw bytes.

The parts that need I/O or reception data (links, spam, authentication) are computed by
services/checks; ``judge_message`` marks them skipped with the reason, and ``report`` puts the
parts together when the caller has them.
"""

from __future__ import annotations

from inboxd.mail.checks.content import judge_content
from inboxd.mail.checks.html import judge_html, parse_html
from inboxd.mail.checks.links import extract_links
from inboxd.mail.checks.report import (
    AuthPart,
    CheckReport,
    ContentPart,
    HtmlPart,
    LinkItem,
    LinksPart,
    SpamPart,
    combine,
)
from inboxd.mail.parse import ParsedMessage, parse_message

__all__ = ["PureParts", "judge_message", "pure_parts"]


class PureParts:
    """What the raw bytes alone tell: the HTML and content parts and the message's URLs."""

    __slots__ = ("content", "html", "links")

    def __init__(self, html: HtmlPart, content: ContentPart, links: list[LinkItem]) -> None:
        self.html = html
        self.content = content
        self.links = links


def pure_parts(raw: bytes, parsed: ParsedMessage | None = None, *, mail_from: str | None = None) -> PureParts:
    """Judge ``raw`` without I/O; ``parsed`` is ``parse_message(raw)`` when the caller has it already.
    The HTML body is parsed once for the three of them."""
    if parsed is None:
        parsed = parse_message(raw)
    tree = parse_html(parsed.html_body) if parsed.html_body.strip() else None
    html = judge_html(parsed.html_body, tree)
    content = judge_content(raw, parsed, tree, mail_from=mail_from)
    return PureParts(html=html, content=content, links=extract_links(parsed, tree))


def judge_message(
    raw: bytes,
    parsed: ParsedMessage | None = None,
    *,
    links_reason: str = "links are checked on request by the server (GET …/checks/links)",
    spam_reason: str = "no spam filter is configured here (the server asks rspamd at INBOXD_RSPAMD_URL)",
    auth_reason: str = "SPF, DKIM and DMARC need the reception data and DNS (computed by the server)",
    mail_from: str | None = None,
) -> CheckReport:
    """The report of what needs no I/O: HTML and content judged; links listed but not checked, spam
    and authentication skipped, each with its reason (never a made-up result). ``mail_from`` is the
    envelope sender when known (inboxd writes no Return-Path header at reception)."""
    parts = pure_parts(raw, parsed, mail_from=mail_from)
    return combine(
        parts.html,
        LinksPart(verdict="skipped", items=parts.links, reason=links_reason),
        SpamPart(verdict="skipped", configured=False, reason=spam_reason),
        AuthPart(verdict="skipped", reason=auth_reason),
        parts.content,
    )
