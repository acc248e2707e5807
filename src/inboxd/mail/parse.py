"""Pure MIME parsing of received messages: the summary taken at SMTP ingest and the full parse on first open.

``parse_summary`` gives the From, Subject and body preview of a raw message, ``parse_message`` adds the
decoded text and HTML bodies and the attachments (header words and charsets: ``mail/decoding.py``; HTML to
text and previews: ``mail/html_text.py``).
Everything works on the raw bytes alone (stdlib ``email``, no I/O) and nothing here raises: malformed,
truncated or hostile input yields best-effort fields.

How a message is taken apart:

* The MIME tree is walked over the raw bytes by offsets. Each entity's header block is located with one
  regular expression (the header-line rule of ``email.feedparser``), its fields are split out with another
  and stored in a ``compat32`` ``Message``, whose parameter handling (RFC 2231 included) then reads
  content types, charsets, boundaries and filenames; multipart bodies are cut at their delimiters with
  ``bytes.find``. ``BytesParser`` is several times slower on a small multipart message (its
  ``FeedParser`` runs per header block; figures in docs/performance.md), it keeps no original bytes
  for a nested message/rfc822, and deep nesting makes it raise RecursionError; the walk costs a fraction of that,
  stops as soon as the summary has what it needs, caps depth, and hands a nested message on byte for
  byte.
* Header blocks are decoded as UTF-8 with replacement before parsing, so raw 8-bit (SMTPUTF8) headers
  read correctly and no header value ever carries the surrogates ``compat32`` would wrap in ``Header``.
* RFC 2047 encoded words are decoded by ``mail/decoding.py``, not ``email.header``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from email.policy import compat32

from inboxd.mail.decoding import (
    address_header,
    address_value,
    decode_body,
    decode_words,
    decoded_headers,
    from_header,
    subject_header,
    undo_transfer_encoding,
    without_surrogates,
)
from inboxd.mail.html_text import is_blank, preview

__all__ = [
    "AttachmentPart",
    "Bodies",
    "MessageWalk",
    "ParsedAttachment",
    "ParsedMessage",
    "Summary",
    "attachment_parts",
    "body_prefixes",
    "parse_message",
    "parse_summary",
]


@dataclass(frozen=True, slots=True)
class Summary:
    """What the ingest path records for a message."""

    from_: str  # "Display Name <addr@x>", or "addr@x" when there is no name; "" when absent
    subject: str  # RFC 2047 decoded, whitespace collapsed; "" when absent
    preview_text: str  # first 100 characters of the body text, whitespace collapsed
    # The X-Tags header(s) as sent, joined by commas ("" when absent); services/tags.py cleans them.
    x_tags: str = ""


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
class Bodies:
    """The beginnings of a message's text and HTML bodies, whether it has attachments, and its To
    and Cc headers rendered as the detail renders From (one string per header)."""

    text_body: str
    html_body: str
    has_attachments: bool
    recipients: tuple[str, ...] = ()


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


# Deeper multiparts are kept whole as one opaque attachment: real mail nests a handful of levels, and
# the cap bounds the work a hostile message can ask for.
_MAX_DEPTH = 50
# Every entity costs one header parse; beyond this many the walk stops rather than let one message
# occupy the ingest path (a 25 MB message could otherwise hold about a million empty parts).
_MAX_ENTITIES = 10_000
# Header blocks are parsed up to this size (Postfix refuses more than 100 KB by default), which bounds
# the work and memory a hostile block of millions of tiny fields costs; the body still starts after
# the whole block.
_MAX_HEADER_BYTES = 1024 * 1024
# The summary decodes at most this much of a body (whole lines): the preview needs its first 100
# characters, and decoding all of a 25 MiB body would copy it twice more on the ingest path. A text
# body blank for its first MiB and not after counts as blank (the HTML body then gives the preview).
_SUMMARY_BODY_BYTES = 1024 * 1024

# The header block: the longest run of lines that email.feedparser accepts as header lines (a field
# name and colon, a continuation, or a leading "From " line). Every repetition consumes at least one
# character, and no line can backtrack into the next, so matching is linear.
_HEADER_BLOCK = re.compile(rb"(?:(?:From |[\x21-\x39\x3b-\x7e]*:|[\t ])[^\n]*(?:\n|\Z))*")
# One field of a header block with its continuation lines. A leading "From " line (mbox) and
# continuation lines before the first field match nothing, and are dropped as the feedparser drops them.
_HEADER_FIELD = re.compile(r"^([\x21-\x39\x3b-\x7e]*):[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)", re.MULTILINE)
_NON_SPACE = re.compile(rb"\S")
# A Content-Type of a type and at most a charset parameter, which nearly every text body has: its
# charset is read without compat32's general parameter parser, a tenth of the summary's cost.
_PLAIN_CONTENT_TYPE = re.compile(
    r'\s*[\w.+-]+/[\w.+-]+\s*(?:;\s*charset\s*=\s*("?)([\w.:+-]+)\1\s*)?', re.ASCII | re.IGNORECASE
)
_LINE_BREAKS = re.compile(r"[\r\n]")


def parse_summary(raw: bytes | bytearray) -> Summary:
    """Return From, Subject and the body preview of ``raw``; never raises.

    Only the top-level headers are parsed in full; the walk over the MIME tree stops at the first text
    body, and decodes an HTML body only when the message has no usable text body.
    """
    return MessageWalk(raw).summary()


class MessageWalk:
    """One walk over a received message's MIME tree, shared by ingest's summary and the search
    index's bodies: ingest takes the summary before its 250 and hands the walk to the indexer,
    which goes on from the leaf where the summary stopped, so no message is parsed twice.

    The walk holds the raw bytes (a bytearray from the SMTP server is read as it is, not copied)
    and is not thread-safe: one thread at a time may use it. Nothing here raises.
    """

    __slots__ = ("_bodies", "_headers", "_html", "_html_leaf", "_leaves", "_others", "_text", "_text_leaf", "size")

    def __init__(self, raw: bytes | bytearray) -> None:
        self.size = len(raw)
        self._headers: Message | None = None
        self._leaves: Iterator[_Leaf] = iter(())
        self._text_leaf: _Leaf | None = None
        self._html_leaf: _Leaf | None = None
        # Whether a leaf other than the chosen text and HTML bodies was passed (an attachment).
        self._others = False
        # The chosen bodies as decoded so far: (the payload limit they were decoded under, text).
        self._text: tuple[int, str] | None = None
        self._html: tuple[int, str] | None = None
        self._bodies: tuple[int, Bodies] | None = None
        try:
            # The SMTP server hands over a bytearray, which the walk reads as it reads bytes (find,
            # slices, regular expressions, decode); a copy would hold a 25 MiB message twice.
            buf = raw if isinstance(raw, bytearray) else bytes(raw)
            headers, body_start = _split_entity(buf, 0, len(buf))
            self._leaves = _leaves(buf, headers, body_start)
            self._headers = headers
        except Exception:
            pass

    def _advance(self) -> bool:
        """Take the next leaf: the first text/plain and the first text/html leaf not marked as
        attachments are the bodies, any other is an attachment; False once there are no more."""
        leaf = next(self._leaves, None)
        if leaf is None:
            return False
        if leaf.ctype == "text/plain" and self._text_leaf is None and not leaf.is_attachment():
            self._text_leaf = leaf
        elif leaf.ctype == "text/html" and self._html_leaf is None and not leaf.is_attachment():
            self._html_leaf = leaf
        else:
            self._others = True
        return True

    def _stop(self) -> None:
        """The walk failed part way (it never should): it keeps what it found, and takes no more."""
        self._leaves = iter(())

    @staticmethod
    def _decoded(leaf: _Leaf, limit: int, done: tuple[int, str] | None) -> tuple[int, str]:
        # A payload no longer than both limits decoded whole under either: the same text.
        if done is not None and (done[0] == limit or leaf.end - leaf.start <= min(done[0], limit)):
            return done
        return limit, leaf.text(limit)

    def summary(self) -> Summary:
        """From, Subject, X-Tags and the body preview (``parse_summary``)."""
        from_ = subject = text = html = x_tags = ""
        headers = self._headers
        if headers is None:
            return Summary(from_="", subject="", preview_text="")
        try:
            from_ = from_header(headers)
            subject = subject_header(headers)
            x_tags = ",".join(str(v) for v in headers.get_all("x-tags", ()))
            while self._text_leaf is None or self._html_leaf is None:
                had_text = self._text_leaf is not None
                if not self._advance():
                    break
                if not had_text and self._text_leaf is not None:
                    self._text = self._decoded(self._text_leaf, _SUMMARY_BODY_BYTES, self._text)
                    if not is_blank(self._text[1]):
                        break
            if self._text_leaf is not None:
                self._text = self._decoded(self._text_leaf, _SUMMARY_BODY_BYTES, self._text)
                text = self._text[1]
            if is_blank(text) and self._html_leaf is not None:
                self._html = self._decoded(self._html_leaf, _SUMMARY_BODY_BYTES, self._html)
                html = self._html[1]
        except Exception:
            # Never raise on the ingest path: keep whatever was decoded before the failure.
            self._stop()
        return Summary(from_=from_, subject=subject, preview_text=preview(text, html), x_tags=x_tags)

    def bodies(self, limit: int) -> Bodies:
        """The text and HTML bodies, each decoded from at most ``limit`` bytes of its payload,
        whether an attachment exists, and To and Cc (``body_prefixes``); the walk goes on from
        where ``summary`` stopped."""
        if self._bodies is not None and self._bodies[0] == limit:
            return self._bodies[1]
        headers = self._headers
        if headers is None:
            return Bodies(text_body="", html_body="", has_attachments=False)
        text = html = ""
        recipients: tuple[str, ...] = ()
        try:
            recipients = tuple(address_value(str(v)) for name in ("to", "cc") for v in headers.get_all(name, ()))
            # Past both bodies and one attachment, no further leaf changes the answer.
            while self._text_leaf is None or self._html_leaf is None or not self._others:
                if not self._advance():
                    break
        except Exception:
            self._stop()
        try:
            if self._text_leaf is not None:
                self._text = self._decoded(self._text_leaf, limit, self._text)
                text = self._text[1]
            if self._html_leaf is not None:
                self._html = self._decoded(self._html_leaf, limit, self._html)
                html = self._html[1]
        except Exception:
            pass
        bodies = Bodies(text_body=text, html_body=html, has_attachments=self._others, recipients=recipients)
        self._bodies = (limit, bodies)
        return bodies


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
        headers, body_start = _split_entity(raw, 0, len(raw))
        from_ = from_header(headers)
        subject = subject_header(headers)
        to = address_header(headers, "to")
        cc = address_header(headers, "cc")
        header_list = decoded_headers(headers)
        have_text = have_html = False
        for leaf in _leaves(raw, headers, body_start):
            if leaf.ctype == "text/plain" and not have_text and not leaf.is_attachment():
                have_text = True
                text_body = leaf.text()
            elif leaf.ctype == "text/html" and not have_html and not leaf.is_attachment():
                have_html = True
                html_body = leaf.text()
            else:
                attachments.append(leaf.attachment())
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
        headers, body_start = _split_entity(raw, 0, len(raw))
        have_text = have_html = False
        for leaf in _leaves(raw, headers, body_start):
            if leaf.ctype == "text/plain" and not have_text and not leaf.is_attachment():
                have_text = True
            elif leaf.ctype == "text/html" and not have_html and not leaf.is_attachment():
                have_html = True
            else:
                parts.append(leaf.located())
    except Exception:
        # Never raise: keep the attachments found before the failure.
        pass
    return tuple(parts)


def body_prefixes(raw: bytes | bytearray, limit: int) -> Bodies:
    """The bodies ``parse_message`` chooses, each decoded from at most ``limit`` bytes of its encoded
    payload (whole lines), and whether any attachment exists, none of them decoded; never raises.

    For the search index, which keeps the beginning of the body: a full parse of a 25 MiB message
    decodes every byte of it, holding the GIL (and so the event loop) for tens of milliseconds.
    """
    return MessageWalk(raw).bodies(limit)


# --- the MIME walk -------------------------------------------------------------------------------------


class _Leaf:
    """A MIME leaf: its parsed headers and the span of its still-encoded body within the raw message."""

    __slots__ = ("buf", "ctype", "end", "headers", "start")

    def __init__(self, headers: Message, ctype: str, buf: bytes | bytearray, start: int, end: int) -> None:
        self.headers = headers
        self.ctype = ctype
        self.buf = buf
        self.start = start
        self.end = end

    def is_attachment(self) -> bool:
        value = self.headers.get("content-disposition")
        return value is not None and str(value).split(";", 1)[0].strip().lower() == "attachment"

    def payload(self, limit: int | None = None) -> bytes | bytearray:
        end = self.end
        if limit is not None and end - self.start > limit:
            # Whole lines only: a prefix cut at a line end decodes to a prefix of the whole text.
            cut = self.buf.rfind(b"\n", self.start, self.start + limit)
            end = cut + 1 if cut >= 0 else self.start + limit
        return undo_transfer_encoding(self.buf[self.start : end], self.transfer_encoding())

    def transfer_encoding(self) -> str:
        return str(self.headers.get("content-transfer-encoding", "")).split(";", 1)[0].strip().lower()

    def text(self, limit: int | None = None) -> str:
        try:
            charset = _charset(self.headers)
        except Exception:
            charset = None
        return decode_body(self.payload(limit), charset)

    def attachment(self) -> ParsedAttachment:
        try:
            data = self.payload()
        except Exception:
            data = self.buf[self.start : self.end]
        return ParsedAttachment(
            filename=_filename(self.headers),
            content_type=self.ctype,
            data=bytes(data),
            declared_type=_declared_type(self.headers, self.ctype),
            content_id=_content_id(self.headers),
        )

    def located(self) -> AttachmentPart:
        try:
            encoding = self.transfer_encoding()
        except Exception:
            encoding = ""
        return AttachmentPart(
            filename=_filename(self.headers),
            content_type=_declared_type(self.headers, self.ctype) or self.ctype,
            start=self.start,
            end=self.end,
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


def _leaves(buf: bytes | bytearray, root: Message, root_body: int) -> Iterator[_Leaf]:
    """Yield the MIME leaves of ``buf`` in document order, parsing each entity's headers only when reached.

    Message/* parts are leaves (a nested message is never descended into); a multipart that is too deep
    or has no usable boundary is yielded whole as a leaf, so its bytes stay available as an attachment.
    """
    # Spans still to visit, last one first: (start, end, default content type, depth).
    pending: list[tuple[int, int, str, int]] = []
    headers, body_start, end, depth = root, root_body, len(buf), 0
    entities = 1
    while True:
        ctype = _content_type(headers)
        if ctype.startswith("multipart/") and depth < _MAX_DEPTH:
            spans = _multipart_spans(buf, body_start, end, _boundary(headers))
            if spans:
                # RFC 2046 5.1.5: the parts of a digest default to message/rfc822.
                child_type = "message/rfc822" if ctype == "multipart/digest" else "text/plain"
                pending.extend((start, stop, child_type, depth + 1) for start, stop in reversed(spans))
            elif _NON_SPACE.search(buf, body_start, end):
                yield _Leaf(headers, ctype, buf, body_start, end)
        else:
            yield _Leaf(headers, ctype, buf, body_start, end)
        if not pending or entities >= _MAX_ENTITIES:
            return
        start, end, default_type, depth = pending.pop()
        headers, body_start = _split_entity(buf, start, end)
        headers.set_default_type(default_type)
        entities += 1


def _split_entity(buf: bytes | bytearray, start: int, end: int) -> tuple[Message, int]:
    """Parse the headers of the entity at ``buf[start:end]``; return them and where its body starts."""
    match = _HEADER_BLOCK.match(buf, start, end)
    header_end = match.end() if match else start
    # Headers end at an empty line, which is dropped, or (malformed) at the first line that is not a
    # header line, which already belongs to the body.
    if buf.startswith(b"\n", header_end, end):
        body_start = header_end + 1
    elif buf.startswith(b"\r\n", header_end, end):
        body_start = header_end + 2
    else:
        body_start = header_end
    headers: Message = Message(policy=compat32)
    if header_end > start:
        block = buf[start : min(header_end, start + _MAX_HEADER_BYTES)].decode("utf-8", "replace")
        # Stored as compat32's header_source_parse would: folds kept, line ending stripped.
        for name, value in _HEADER_FIELD.findall(block):
            headers.set_raw(name, value.rstrip("\r\n"))
    return headers, body_start


def _multipart_spans(buf: bytes | bytearray, start: int, end: int, boundary: str) -> list[tuple[int, int]]:
    """Cut the multipart body ``buf[start:end]`` into its parts' spans (RFC 2046 5.1.1).

    The line break before a delimiter belongs to the delimiter. Without a closing delimiter (a truncated
    message) the last part runs to the end. Returns [] when no delimiter is found.
    """
    if not boundary:
        return []
    delimiter = b"--" + boundary.encode("utf-8", "replace")
    spans: list[tuple[int, int]] = []
    part_start = -1
    pos = start
    while True:
        found = buf.find(delimiter, pos, end)
        if found < 0:
            break
        pos = found + 1
        if found > start and buf[found - 1] not in b"\r\n":
            continue  # not at the start of a line
        after = found + len(delimiter)
        closing = buf.startswith(b"--", after, end)
        if not closing:
            # Only transport padding may follow; anything else means a longer boundary ("--b" in "--bx").
            rest = after
            while rest < end and buf[rest] in b" \t":
                rest += 1
            if rest < end and buf[rest] not in b"\r\n":
                continue
        if part_start >= 0:
            stop = found
            if stop > part_start and buf[stop - 1] == 0x0A:
                stop -= 1
            if stop > part_start and buf[stop - 1] == 0x0D:
                stop -= 1
            spans.append((part_start, stop))
        if closing:
            return spans
        newline = buf.find(b"\n", after, end)
        part_start = pos = end if newline < 0 else newline + 1
    if part_start >= 0:
        spans.append((part_start, end))
    return spans


def _charset(headers: Message) -> str | None:
    """What ``headers.get_content_charset()`` answers, without its parameter parser when the
    Content-Type is plain."""
    value = headers.get("content-type")
    if value is None:
        return None
    plain = _PLAIN_CONTENT_TYPE.fullmatch(value) if isinstance(value, str) else None
    if plain is None:
        return headers.get_content_charset()
    charset = plain[2]
    return None if charset is None else charset.lower()


def _content_type(headers: Message) -> str:
    try:
        return headers.get_content_type()
    except Exception:
        return "application/octet-stream"


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


def _boundary(headers: Message) -> str:
    try:
        return headers.get_boundary() or ""
    except Exception:
        return ""


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
