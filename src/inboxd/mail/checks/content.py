"""Content checks: what a receiver or a reader would object to in the headers and bodies.

Codes (severity): ``missing_list_unsubscribe`` and ``missing_one_click_unsubscribe`` (RFC 8058: an https
URL in ``List-Unsubscribe`` and ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``), ``missing_message_id``
and ``malformed_message_id``, ``missing_date`` and ``malformed_date`` (errors), ``missing_text_part``,
``html_clipped`` (Gmail clips HTML over 102 KB), ``missing_alt``, ``broken_cid`` (error),
``reply_to_domain_differs`` (From, Reply-To and Return-Path in different organisational domains),
``unencoded_8bit_header`` (error) and ``message_too_large`` (over 10 MiB, which many receivers refuse).
"""

from __future__ import annotations

import re
from email.utils import getaddresses, parsedate_to_datetime
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks.links import header_values, list_unsubscribe_urls
from inboxd.mail.checks.report import ContentPart, Finding, verdict_of
from inboxd.mail.parse import ParsedMessage

__all__ = ["GMAIL_CLIP_BYTES", "LARGE_MESSAGE_BYTES", "judge_content", "organisational_domain"]

GMAIL_CLIP_BYTES = 102 * 1024
LARGE_MESSAGE_BYTES = 10 * 1024 * 1024
_MAX_FINDINGS_PER_CODE = 20
_MAX_ADDRESS_HEADER = 4096
_MESSAGE_ID = re.compile(r"^\s*<[^<>@\s]+@[^<>@\s]+>\s*$")
_HEADER_END = re.compile(rb"\r?\n\r?\n")
# Second-level labels under which a country code top-level domain registers names (example.co.uk):
# the organisational domain then has three labels. A public suffix list would be exact; this covers
# the common cases without one.
_SECOND_LEVEL = frozenset(("co", "com", "net", "org", "gov", "ac", "edu", "ne", "or", "go", "gob", "mil"))


def organisational_domain(domain: str) -> str:
    labels = domain.lower().strip(".").split(".")
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def _domains(values: list[str]) -> list[str]:
    out = []
    # getaddresses walks its input character by character in Python: no genuine header comes near the cap.
    for _, address in getaddresses([value[:_MAX_ADDRESS_HEADER] for value in values[:10]]):
        if "@" in address:
            out.append(address.rsplit("@", 1)[1].strip().lower())
    return out


def _eight_bit_headers(raw: bytes) -> list[str]:
    """The top-level header fields (by name, each once) whose raw bytes are not ASCII."""
    end = _HEADER_END.search(raw)
    block = raw[: end.start() if end else len(raw)]
    if block.isascii():
        return []
    names: list[str] = []
    name = ""
    for line in block.split(b"\n"):
        if line[:1] not in (b" ", b"\t"):
            # A field starts here; a continuation line belongs to the field above it.
            name = line.split(b":", 1)[0].decode("ascii", "replace").strip() if b":" in line else ""
        if name and not line.isascii() and name not in names:
            names.append(name)
    return names


def _unsubscribe(parsed: ParsedMessage) -> list[Finding]:
    if not header_values(parsed, "List-Unsubscribe"):
        return [
            Finding(
                severity="warning",
                code="missing_list_unsubscribe",
                message="There is no List-Unsubscribe header: Gmail and Yahoo require one of bulk senders.",
                where="List-Unsubscribe",
            )
        ]
    https = [url for url in list_unsubscribe_urls(parsed) if url.lower().startswith("https://")]
    post = [v.strip().lower() for v in header_values(parsed, "List-Unsubscribe-Post")]
    missing = []
    if not https:
        missing.append("an https URL in List-Unsubscribe")
    if "list-unsubscribe=one-click" not in post:
        missing.append("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
    if not missing:
        return []
    return [
        Finding(
            severity="warning",
            code="missing_one_click_unsubscribe",
            message="One-click unsubscribe (RFC 8058) needs " + " and ".join(missing) + ".",
            where="List-Unsubscribe-Post" if https else "List-Unsubscribe",
        )
    ]


def _identity(parsed: ParsedMessage) -> list[Finding]:
    findings = []
    message_ids = header_values(parsed, "Message-ID")
    if not message_ids:
        findings.append(
            Finding(
                severity="warning",
                code="missing_message_id",
                message="There is no Message-ID header: receivers and threads need one.",
                where="Message-ID",
            )
        )
    elif not _MESSAGE_ID.match(message_ids[0]):
        findings.append(
            Finding(
                severity="warning",
                code="malformed_message_id",
                message=f"The Message-ID {message_ids[0][:100]!r} is not of the form <id@domain> (RFC 5322).",
                where="Message-ID",
            )
        )
    dates = header_values(parsed, "Date")
    if not dates:
        findings.append(
            Finding(
                severity="error",
                code="missing_date",
                message="There is no Date header, which RFC 5322 requires.",
                where="Date",
            )
        )
    else:
        try:
            valid = parsedate_to_datetime(dates[0]) is not None
        except (TypeError, ValueError, IndexError):
            valid = False
        if not valid:
            findings.append(
                Finding(
                    severity="error",
                    code="malformed_date",
                    message=f"The Date {dates[0][:100]!r} is not an RFC 5322 date.",
                    where="Date",
                )
            )
    return findings


def _domains_differ(parsed: ParsedMessage, mail_from: str | None) -> list[Finding]:
    from_domains = _domains(header_values(parsed, "From"))
    if not from_domains:
        return []
    home = {organisational_domain(d) for d in from_domains}
    findings = []
    return_path = [mail_from] if mail_from else header_values(parsed, "Return-Path")
    for header, values in (("Reply-To", header_values(parsed, "Reply-To")), ("Return-Path", return_path)):
        others = sorted({d for d in _domains(values) if organisational_domain(d) not in home})
        if others:
            findings.append(
                Finding(
                    severity="warning",
                    code="reply_to_domain_differs",
                    message=f"{header} is in {', '.join(others)}, not the From domain {from_domains[0]}: "
                    "filters and readers distrust the mismatch.",
                    where=header,
                )
            )
    return findings


def _images(tree: LexborHTMLParser, parsed: ParsedMessage) -> list[Finding]:
    content_ids = {a.content_id.strip().lower() for a in parsed.attachments if a.content_id}
    missing_alt: list[str] = []
    broken: list[str] = []
    root = tree.root
    for node in root.traverse(include_text=False) if root is not None else ():
        tag = node.tag or ""
        attributes = node.attributes
        if tag == "img" and "alt" not in attributes:
            missing_alt.append((attributes.get("src") or "").strip()[:200])
        for name in ("src", "background", "href"):
            value = (attributes.get(name) or "").strip()
            if value[:4].lower() == "cid:":
                cid = unquote(value[4:]).strip().strip("<>").lower()
                if cid not in content_ids and value not in broken:
                    broken.append(value[:200])
    findings = [
        Finding(
            severity="warning",
            code="missing_alt",
            message="An image has no alt text: screen readers and clients that block images show nothing.",
            where=src,
        )
        for src in missing_alt[:_MAX_FINDINGS_PER_CODE]
    ]
    if len(missing_alt) > _MAX_FINDINGS_PER_CODE:
        findings.append(
            Finding(
                severity="warning",
                code="missing_alt",
                message=f"{len(missing_alt) - _MAX_FINDINGS_PER_CODE} more images have no alt text.",
            )
        )
    findings += [
        Finding(
            severity="error",
            code="broken_cid",
            message="This cid: reference names no part of the message: the image will not show.",
            where=url,
        )
        for url in broken[:_MAX_FINDINGS_PER_CODE]
    ]
    return findings


def judge_content(
    raw: bytes, parsed: ParsedMessage, tree: LexborHTMLParser | None = None, *, mail_from: str | None = None
) -> ContentPart:
    """The content part. ``parsed`` is ``parse_message(raw)``, ``tree`` the parsed HTML body when the
    caller has it, ``mail_from`` the envelope sender when known (else the Return-Path header is read)."""
    findings = _unsubscribe(parsed) + _identity(parsed)
    html_size = len(parsed.html_body.encode("utf-8", "replace"))
    if parsed.html_body.strip():
        if not parsed.text_body.strip():
            findings.append(
                Finding(
                    severity="warning",
                    code="missing_text_part",
                    message="The HTML has no plain-text alternative: text-only readers see nothing and "
                    "filters score it as spam.",
                    where="text/plain",
                )
            )
        if html_size > GMAIL_CLIP_BYTES:
            findings.append(
                Finding(
                    severity="warning",
                    code="html_clipped",
                    message=f"The HTML is {html_size / 1024:.0f} KB: Gmail clips it after 102 KB and hides the rest "
                    "(and the unsubscribe link) behind 'View entire message'.",
                    where="text/html",
                )
            )
        findings += _images(tree if tree is not None else LexborHTMLParser(parsed.html_body), parsed)
    findings += _domains_differ(parsed, mail_from)
    findings += [
        Finding(
            severity="error",
            code="unencoded_8bit_header",
            message=f"The {name} header has raw 8-bit bytes without RFC 2047 encoding: receivers without "
            "SMTPUTF8 may reject the message or garble the header.",
            where=name,
        )
        for name in _eight_bit_headers(raw)
    ]
    if len(raw) > LARGE_MESSAGE_BYTES:
        findings.append(
            Finding(
                severity="warning",
                code="message_too_large",
                message=f"The message is {len(raw) / 1048576:.1f} MiB: many receivers refuse more than 10 MiB.",
            )
        )
    return ContentPart(verdict=verdict_of(findings), size=len(raw), html_size=html_size, findings=findings)
