"""The full parse of a received message, on its first open: the summary, the decoded text and
HTML bodies, the attachments, every top-level header, To and Cc (header words and charsets:
``mail/decoding.py``; HTML to text and previews: ``mail/html_text.py``). It walks the MIME tree as
``mail/mime_tree.py`` describes; the summary taken at ingest is ``mail/message_walk.py``'s.
Everything works on the raw bytes alone (stdlib ``email``, no I/O) and nothing here raises:
malformed, truncated or hostile input yields best-effort fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.message import Message

from inboxd.mail.decoding import (
    address_header,
    decode_words,
    decoded_headers,
    from_header,
    subject_header,
    undo_transfer_encoding,
    without_surrogates,
)
from inboxd.mail.html_text import preview
from inboxd.mail.message_walk import Summary
from inboxd.mail.mime_tree import Leaf, leaves, split_entity

__all__ = ["AttachmentPart", "ParsedAttachment", "ParsedMessage", "attachment_parts", "parse_message"]

_LINE_BREAKS = re.compile(r"[\r\n]")


@dataclass(frozen=True, slots=True)
class ParsedAttachment:
    """One MIME leaf that is not the chosen text or HTML body."""

    filename: str  # RFC 2231 / RFC 2047 decoded; "" when none
    content_type: str  # lowercase "maintype/subtype", no parameters
    data: bytes  # payload with the content transfer encoding undone
    # The part's own Content-Type header, parameters kept (charset, method, name...), unfolded;
    # "" when absent or not fit to send back as an HTTP header. Downloads serve this.
    declared_type: str = field(default="", compare=False)
    # The Content-ID without its angle brackets ("" when none): what `cid:` URLs in the HTML body name.
    content_id: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class AttachmentPart:
    """Where an attachment lies in the raw message, so it can be decoded without walking the MIME
    tree again: the attachments of one message are downloaded one request at a time."""

    filename: str
    content_type: str  # the declared Content-Type when fit to serve, else "maintype/subtype"
    start: int  # the still-encoded payload is raw[start:end]
    end: int
    transfer_encoding: str  # lowercase Content-Transfer-Encoding, "" when absent

    def data(self, raw: bytes) -> bytes:
        """The payload with its content transfer encoding undone."""
        chunk = raw[self.start : self.end]
        try:
            return bytes(undo_transfer_encoding(chunk, self.transfer_encoding))
        except Exception:
            return chunk


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """The full parse of a message."""

    summary: Summary
    text_body: str
    html_body: str
    attachments: tuple[ParsedAttachment, ...]
    # Every top-level header in order, RFC 2047 decoded and unfolded: (name as written, value).
    headers: tuple[tuple[str, str], ...] = ()
    to: str = ""  # rendered as `from` is: "Name <addr>, addr2"
    cc: str = ""


def parse_message(raw: bytes) -> ParsedMessage:
    """Fully parse ``raw`` into summary, text and HTML bodies and attachments; never raises.

    The text body is the first text/plain leaf not marked ``Content-Disposition: attachment``, the HTML
    body likewise the first such text/html leaf; every other leaf, in document order, is an attachment.
    A message/rfc822 part is one attachment holding the nested message's bytes.
    """
    from_ = subject = text_body = html_body = to = cc = ""
    attachments: list[ParsedAttachment] = []
    header_list: tuple[tuple[str, str], ...] = ()
    try:
        raw = bytes(raw)
        headers, body_start = split_entity(raw, 0, len(raw))
        from_ = from_header(headers)
        subject = subject_header(headers)
        to = address_header(headers, "to")
        cc = address_header(headers, "cc")
        header_list = decoded_headers(headers)
        have_text = have_html = False
        for leaf in leaves(raw, headers, body_start):
            if leaf.ctype == "text/plain" and not have_text and not leaf.is_attachment():
                have_text = True
                text_body = leaf.text()
            elif leaf.ctype == "text/html" and not have_html and not leaf.is_attachment():
                have_html = True
                html_body = leaf.text()
            else:
                attachments.append(_attachment(leaf))
    except Exception:
        # Never raise: keep the fields and the attachments found before the failure.
        pass
    summary = Summary(from_=from_, subject=subject, preview_text=preview(text_body, html_body))
    return ParsedMessage(
        summary=summary,
        text_body=text_body,
        html_body=html_body,
        attachments=tuple(attachments),
        headers=header_list,
        to=to,
        cc=cc,
    )


def attachment_parts(raw: bytes) -> tuple[AttachmentPart, ...]:
    """The attachments ``parse_message`` lists, in the same order, located rather than decoded;
    never raises."""
    parts: list[AttachmentPart] = []
    try:
        raw = bytes(raw)
        headers, body_start = split_entity(raw, 0, len(raw))
        have_text = have_html = False
        for leaf in leaves(raw, headers, body_start):
            if leaf.ctype == "text/plain" and not have_text and not leaf.is_attachment():
                have_text = True
            elif leaf.ctype == "text/html" and not have_html and not leaf.is_attachment():
                have_html = True
            else:
                parts.append(_located(leaf))
    except Exception:
        # Never raise: keep the attachments found before the failure.
        pass
    return tuple(parts)


def _attachment(leaf: Leaf) -> ParsedAttachment:
    """A leaf as `parse_message` lists it, its payload decoded."""
    try:
        data = leaf.payload()
    except Exception:
        data = leaf.buf[leaf.start : leaf.end]
    return ParsedAttachment(
        filename=_filename(leaf.headers),
        content_type=leaf.ctype,
        data=bytes(data),
        declared_type=_declared_type(leaf.headers, leaf.ctype),
        content_id=_content_id(leaf.headers),
    )


def _located(leaf: Leaf) -> AttachmentPart:
    """A leaf as `attachment_parts` lists it, located rather than decoded."""
    try:
        encoding = leaf.transfer_encoding()
    except Exception:
        encoding = ""
    return AttachmentPart(
        filename=_filename(leaf.headers),
        content_type=_declared_type(leaf.headers, leaf.ctype) or leaf.ctype,
        start=leaf.start,
        end=leaf.end,
        transfer_encoding=encoding,
    )


def _content_id(headers: Message) -> str:
    try:
        value = str(headers.get("content-id", "")).strip()
    except Exception:
        return ""
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1]
    return value.strip()


def _declared_type(headers: Message, ctype: str) -> str:
    """The Content-Type header as written, when its type is the one the parse settled on (not a
    fallback for a malformed value) and it is plain printable ASCII on one line."""
    raw = headers.get("content-type")
    if raw is None:
        return ""
    value = " ".join(str(raw).split())
    if not value.isascii() or not value.isprintable() or len(value) > 1000:
        return ""
    if value.split(";", 1)[0].strip().lower() != ctype:
        return ""
    return value


def _filename(headers: Message) -> str:
    try:
        name = headers.get_filename()
    except Exception:
        return ""
    if not name:
        return ""
    # Unfold (a long quoted filename may be folded), then decode encoded words, which many mailers use
    # in filename parameters although RFC 2047 forbids them there.
    return without_surrogates(decode_words(_LINE_BREAKS.sub("", name)).strip())
