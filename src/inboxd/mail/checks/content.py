"""Content checks: what a receiver or a reader would object to in the headers and bodies.

Codes (severity): ``missing_list_unsubscribe`` and ``missing_one_click_unsubscribe`` (RFC 8058: an https
URL in ``List-Unsubscribe`` and ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``; warnings for bulk
mail, which carries ``List-Id``, ``Precedence: bulk`` or ``list``, or an unsubscribe link in a body, and
information otherwise: a password reset needs neither), ``color_without_background`` (info: text given a
colour with no background behind it, which a client in dark mode may leave unreadable), ``missing_message_id``
and ``malformed_message_id``, ``missing_date`` and ``malformed_date`` (errors), ``missing_text_part``,
``html_clipped`` (Gmail clips HTML over 102 KB), ``missing_alt``, ``broken_cid`` (error),
``reply_to_domain_differs`` (From, Reply-To and Return-Path in different organisational domains),
``unencoded_8bit_header`` (error) and ``message_too_large`` (over 10 MiB, which many receivers refuse).
"""

from __future__ import annotations

import re
from email.utils import getaddresses, parsedate_to_datetime
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser, LexborNode

from inboxd.mail.checks.html import parse_html
from inboxd.mail.checks.links import header_values, list_unsubscribe_urls
from inboxd.mail.checks.report import ContentPart, Finding, Severity, verdict_of
from inboxd.mail.org_domain import organizational_domain
from inboxd.mail.parse import ParsedMessage

__all__ = ["GMAIL_CLIP_BYTES", "LARGE_MESSAGE_BYTES", "judge_content"]

GMAIL_CLIP_BYTES = 102 * 1024
LARGE_MESSAGE_BYTES = 10 * 1024 * 1024
_MAX_FINDINGS_PER_CODE = 20
_MAX_ADDRESS_HEADER = 4096
_MESSAGE_ID = re.compile(r"^\s*<[^<>@\s]+@[^<>@\s]+>\s*$")
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_UNSUBSCRIBE = re.compile(r"unsubscribe|opt[-_ ]?out", re.IGNORECASE)
_TEXT_UNSUBSCRIBE = re.compile(r"https?://[^\s<>\"']{0,300}(?:unsubscribe|opt[-_]?out)", re.IGNORECASE)
_BULK_PRECEDENCE = frozenset(("bulk", "list"))
# Dark mode: a colour is read from inline styles and <font color>; a background from inline styles and
# the bgcolor and background attributes. A <style> sheet that gives html, body or every element a
# background covers the whole message (rules on classes are not matched to elements: not checked).
_SHEET_BACKGROUND = re.compile(r"(?:^|[},\s])(?:html|body|\*)[^{}]{0,100}\{[^}]{0,500}background", re.IGNORECASE)
_MAX_SHEET = 128 * 1024  # characters of <style> read for a background, as the HTML check reads CSS
_NO_BACKGROUND = frozenset(("none", "transparent", "inherit", "initial", "unset", "revert"))
_MAX_COLOUR_CANDIDATES = 200  # coloured elements looked at for text
_TEXT_LOOKUP_NODES = 64  # nodes of a coloured element's subtree looked at for text before assuming it has some


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


def _bulk(parsed: ParsedMessage, tree: LexborHTMLParser | None) -> str:
    """Why the message is bulk mail ("" when nothing says so): List-Id, Precedence: bulk or list, or an
    unsubscribe link in a body. Only bulk mail needs List-Unsubscribe (Gmail's and Yahoo's rules)."""
    if header_values(parsed, "List-Id"):
        return "it has a List-Id"
    if any(v.strip().lower() in _BULK_PRECEDENCE for v in header_values(parsed, "Precedence")):
        return "its Precedence says bulk mail"
    for node in tree.css("a[href]") if tree is not None else ():
        if _UNSUBSCRIBE.search(node.attributes.get("href") or "") or _UNSUBSCRIBE.search(node.text()[:200]):
            return "its body has an unsubscribe link"
    if _TEXT_UNSUBSCRIBE.search(parsed.text_body):
        return "its body has an unsubscribe link"
    return ""


def _unsubscribe(parsed: ParsedMessage, tree: LexborHTMLParser | None) -> list[Finding]:
    bulk = _bulk(parsed, tree)
    severity: Severity = "warning" if bulk else "info"
    why = (
        f" The message is bulk mail ({bulk})."
        if bulk
        else " Nothing marks this message as bulk mail (no List-Id, Precedence or unsubscribe link), so it may "
        "do without."
    )
    if not header_values(parsed, "List-Unsubscribe"):
        return [
            Finding(
                severity=severity,
                code="missing_list_unsubscribe",
                message="There is no List-Unsubscribe header: Gmail and Yahoo require one of bulk senders." + why,
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
            severity=severity,
            code="missing_one_click_unsubscribe",
            message="One-click unsubscribe (RFC 8058) needs " + " and ".join(missing) + "." + why,
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
    home = {organizational_domain(d) for d in from_domains}
    findings = []
    return_path = [mail_from] if mail_from else header_values(parsed, "Return-Path")
    for header, values in (("Reply-To", header_values(parsed, "Reply-To")), ("Return-Path", return_path)):
        others = sorted({d for d in _domains(values) if organizational_domain(d) not in home})
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


def _declarations(style: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for declaration in style[:4096].split(";"):
        name, colon, value = declaration.partition(":")
        if colon:
            out[name.strip().lower()] = value.strip().lower().removesuffix("!important").strip()
    return out


def _has_text(node: LexborNode) -> bool:
    """Whether text shows under ``node``: its first few descendants are read, and past them it is
    assumed (a coloured element is almost always there for its text), so the cost stays bounded."""
    pending = [node.child] if node.child is not None else []
    for _ in range(_TEXT_LOOKUP_NODES):
        if not pending:
            return False
        current = pending.pop()
        if current.next is not None:
            pending.append(current.next)
        if current.tag == "-text":
            if (current.text_content or "").strip():
                return True
        elif current.child is not None:
            pending.append(current.child)
    return True


def _colour_without_background(tree: LexborHTMLParser) -> list[Finding]:
    """Text given a colour with nothing behind it but the client's own background: in dark mode a
    client that darkens the background and keeps the colour (or lightens it and keeps a light one)
    leaves it unreadable. Only styled elements are read (selected by the parser, in C); whether an
    ancestor has a background is found once per element walked, so the cost stays linear."""
    sheets = "\n".join(node.text(deep=True) for node in tree.css("style"))[:_MAX_SHEET]
    if _SHEET_BACKGROUND.search(sheets):
        return []
    backgrounds: set[int] = set()
    candidates: list[tuple[LexborNode, str]] = []
    styled = '[style*="color" i], [style*="background" i], [bgcolor], [background], font[color]'
    for node in tree.css(styled):
        attributes = node.attributes
        style = _declarations(attributes.get("style") or "")
        background = style.get("background-color") or style.get("background") or style.get("background-image")
        if attributes.get("bgcolor") or attributes.get("background") or (background or "none") not in _NO_BACKGROUND:
            backgrounds.add(node.mem_id)
            continue  # a colour on its own background is the author's pair, kept or changed together
        colour = style.get("color") or (attributes.get("color") if node.tag == "font" else None)
        if colour and colour not in _NO_BACKGROUND and len(candidates) < _MAX_COLOUR_CANDIDATES:
            candidates.append((node, colour[:40]))
    covered: dict[int, bool] = {}  # element → whether it or an ancestor has a background

    def behind(node: LexborNode) -> bool:
        walked: list[int] = []
        current: LexborNode | None = node
        result = False
        while current is not None:
            key = current.mem_id
            if key in covered:
                result = covered[key]
                break
            walked.append(key)
            if key in backgrounds:
                result = True
                break
            current = current.parent
        for key in walked:
            covered[key] = result
        return result

    found = [(node.tag or "", colour) for node, colour in candidates if not behind(node) and _has_text(node)]
    return [
        Finding(
            severity="info",
            code="color_without_background",
            message=f"Text colour {colour} is set on <{tag}> with no background behind it: in dark mode a client "
            "that darkens the background may keep the colour and leave the text unreadable. Give it, or an element "
            "around it, a background colour (bgcolor on a table cell works everywhere).",
            where=f"<{tag}> color: {colour}",
        )
        for tag, colour in found[:_MAX_FINDINGS_PER_CODE]
    ]


def judge_content(
    raw: bytes, parsed: ParsedMessage, tree: LexborHTMLParser | None = None, *, mail_from: str | None = None
) -> ContentPart:
    """The content part. ``parsed`` is ``parse_message(raw)``, ``tree`` the parsed HTML body when the
    caller has it, ``mail_from`` the envelope sender when known (else the Return-Path header is read)."""
    if tree is None and parsed.html_body.strip():
        tree = parse_html(parsed.html_body)
    findings = _unsubscribe(parsed, tree) + _identity(parsed)
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
        if tree is not None:
            findings += _images(tree, parsed)
            findings += _colour_without_background(tree)
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
