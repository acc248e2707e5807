"""The MIME tree of a raw message, walked by offsets: its leaves in document order, each entity's
headers and where its body lies. ``mail/message_walk.py`` (the summary and the index's bodies) and
``mail/parse.py`` (the full parse) read messages through it, and catch what it raises on hostile
input, so that they never raise.

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
from email.message import Message
from email.policy import compat32
from typing import Any

from inboxd.mail.decoding import decode_body, undo_transfer_encoding

__all__ = ["Headers", "Leaf", "leaves", "split_entity"]

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
# The header block: the longest run of lines that email.feedparser accepts as header lines (a field
# name and colon, a continuation, or a leading "From " line). Every repetition consumes at least one
# character, and no line can backtrack into the next, so matching is linear.
_HEADER_BLOCK = re.compile(rb"(?:(?:From |[\x21-\x39\x3b-\x7e]*:|[\t ])[^\n]*(?:\n|\Z))*")
# One field of a header block with its continuation lines. A leading "From " line (mbox) and
# continuation lines before the first field match nothing, and are dropped as the feedparser drops them.
# The value ends before any trailing carriage returns (a line ending's "\r" is not part of it), as
# compat32's header_source_parse strips them; matching that saves a pass over every value.
_HEADER_FIELD = re.compile(r"^([\x21-\x39\x3b-\x7e]*):[ \t]*([^\n]*(?:\n[ \t][^\n]*)*(?<!\r))", re.MULTILINE)
_NON_SPACE = re.compile(rb"\S")
# A Content-Type of a type and at most a charset parameter, which nearly every text body has: its
# charset is read without compat32's general parameter parser, a tenth of the summary's cost.
_PLAIN_CONTENT_TYPE = re.compile(
    r'\s*[\w.+-]+/[\w.+-]+\s*(?:;\s*charset\s*=\s*("?)([\w.:+-]+)\1\s*)?', re.ASCII | re.IGNORECASE
)

# A Content-Type of a type and only a boundary parameter whose value needs no unquoting (no quotes,
# backslashes or angle brackets), which nearly every multipart has: its boundary is read without
# compat32's general parameter parser, a fifth of a multipart message's summary.
_BOUNDARY_CONTENT_TYPE = re.compile(
    r'\s*[\w.+-]+/[\w.+-]+\s*;\s*boundary\s*=\s*(?:"([\w\'()+,./:=? -]*)"|([\w\'()+,./:=?-]+))\s*',
    re.ASCII | re.IGNORECASE,
)


class Headers(Message):
    """One entity's header fields as ``split_entity`` stores them in a ``compat32`` ``Message``, which
    answers ``get`` and ``get_all`` from an index of lowercase names instead of scanning every field
    and lowercasing its name per call (six lookups per summary: a fifth of its cost).

    The answers are the scan's: the index holds the first value of each name as stored, and values
    come from text decoded with replacement, so the policy's fetch returns them unchanged. The index
    is used only while the fields are still the ones it was built from (compared item by item, the
    same tuples at once) and the policy is still ``compat32``; otherwise ``Message`` scans.
    """

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__(policy=compat32)
        self._headers = fields
        self._indexed = list(fields)
        # Reversed, so that the first field of a name is the one kept.
        self._first = {name.lower(): value for name, value in reversed(fields)}

    def get(self, name: str, failobj: Any = None) -> Any:
        if self._headers != self._indexed or self.policy is not compat32:
            return super().get(name, failobj)
        return self._first.get(name.lower(), failobj)

    def get_all(self, name: str, failobj: Any = None) -> Any:
        if self._headers != self._indexed or self.policy is not compat32:
            return super().get_all(name, failobj)
        name = name.lower()
        if name not in self._first:
            return failobj
        return [value for key, value in self._headers if key.lower() == name]


class Leaf:
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


def leaves(buf: bytes | bytearray, root: Message, root_body: int) -> Iterator[Leaf]:
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
                yield Leaf(headers, ctype, buf, body_start, end)
        else:
            yield Leaf(headers, ctype, buf, body_start, end)
        if not pending or entities >= _MAX_ENTITIES:
            return
        start, end, default_type, depth = pending.pop()
        headers, body_start = split_entity(buf, start, end)
        headers.set_default_type(default_type)
        entities += 1


def split_entity(buf: bytes | bytearray, start: int, end: int) -> tuple[Message, int]:
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
    fields: list[tuple[str, str]] = []
    if header_end > start:
        block = buf[start : min(header_end, start + _MAX_HEADER_BYTES)].decode("utf-8", "replace")
        # Stored as compat32's header_source_parse would: folds kept, line ending stripped.
        fields = _HEADER_FIELD.findall(block)
    return Headers(fields), body_start


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


def _boundary(headers: Message) -> str:
    """What ``headers.get_boundary() or ""`` answers, without its parameter parser when the
    Content-Type is plain."""
    try:
        value = headers.get("content-type")
        plain = _BOUNDARY_CONTENT_TYPE.fullmatch(value) if isinstance(value, str) else None
        if plain is not None:
            # get_boundary strips trailing whitespace (RFC 2046: a boundary may not end in one).
            return (plain[1] if plain[1] is not None else plain[2]).rstrip()
        return headers.get_boundary() or ""
    except Exception:
        return ""
