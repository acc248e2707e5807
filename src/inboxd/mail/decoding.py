"""Decoding what a message encodes: RFC 2047 header words, address headers, declared charsets and the
transfer encodings (base64, uuencode) of bodies.

RFC 2047 encoded words are decoded here rather than with ``email.header.decode_header`` and
``make_header``: those raise on bad base64 and unknown charsets and pass unencoded non-Latin-1 text
through ``raw-unicode-escape``. Nothing here raises on hostile input.
"""

from __future__ import annotations

import binascii
import contextlib
import re
from email.message import Message
from email.utils import getaddresses

from inboxd.mail.html_text import collapse

__all__ = ["MAX_SUBJECT", "without_surrogates"]


# getaddresses walks its input character by character in Python; no genuine From header comes near this.
_MAX_ADDRESS_HEADER = 4096


# The encoded text is allowed spaces: some mailers leave them unencoded and every reader copes.
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?\r\n]*)\?=")


_SURROGATES = re.compile("[\ud800-\udfff]")


# The From header forms nearly all mail uses: `addr`, `Name <addr>` and `"Name" <addr>`, read here without
# getaddresses, which is slow for the hot path; whatever else (comments, groups, lists, odd spacing) goes to it.
_ADDR_SPEC = r'[^\s"<>@,;:()\\\[\]]+@[^\s"<>@,;:()\\\[\]]+'


# Each part is deterministic (the unquoted name runs greedily up to "<"), so no input backtracks.
_SIMPLE_ADDRESS = re.compile(rf'(?:"((?:[^"\\]|\\.)*)"\s*|([^"<>@,;:()\\\[\]]*))<({_ADDR_SPEC})>|({_ADDR_SPEC})')


_QUOTED_PAIR = re.compile(r"\\(.)")


# Decode declared charsets by a strict superset where one exists: mail labelled us-ascii regularly
# carries UTF-8, and GB2312 / EUC-KR labels regularly cover GBK / UHC characters. Text that really is
# in the declared charset decodes the same either way, and UTF-8's byte order mark is dropped.
_CHARSET_SUPERSETS = {
    "us-ascii": "utf-8-sig",
    "ascii": "utf-8-sig",
    "utf-8": "utf-8-sig",
    "utf8": "utf-8-sig",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
}


def _header(headers: Message, name: str) -> str:
    value = headers.get(name)
    return "" if value is None else str(value)


# The Subject kept of a message, decoded and collapsed: Outlook caps a Subject at 255 characters and
# no mail program shows more than a line of it; 200 KB of Subject cost the code finder and the list
# seconds. Of the header, at most _MAX_SUBJECT_SOURCE characters are decoded (encoded words take
# about four times the space of their text).
MAX_SUBJECT = 2048
_MAX_SUBJECT_SOURCE = 4 * MAX_SUBJECT + 1024


def subject_header(headers: Message) -> str:
    """The decoded Subject, collapsed, cut to MAX_SUBJECT characters; "" when absent or unreadable."""
    try:
        return collapse(decode_words(_header(headers, "subject")[:_MAX_SUBJECT_SOURCE]))[:MAX_SUBJECT]
    except Exception:
        return ""


def decoded_headers(headers: Message) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in headers.raw_items():
        try:
            decoded = collapse(without_surrogates(decode_words(str(value))))
        except Exception:
            decoded = collapse(str(value))
        out.append((name, decoded))
    return tuple(out)


def from_header(headers: Message) -> str:
    return address_header(headers, "from")


def address_header(headers: Message, header: str) -> str:
    """An address header rendered as "Name <addr>, addr2", decoded; its decoded text when it is not
    a list of addresses; "" when absent."""
    try:
        value = _header(headers, header)
    except Exception:
        return ""
    return address_value(value)


def address_value(value: str) -> str:
    """One address header's value rendered as `address_header` renders it."""
    if value and len(value) <= _MAX_ADDRESS_HEADER:
        # One simple address (it has an "@"), rendered from its display name alone: the whole value's
        # decoded text is the answer only when the value is no list of addresses.
        simple = _SIMPLE_ADDRESS.fullmatch(value.strip())
        if simple:
            name = _QUOTED_PAIR.sub(r"\1", simple[1]) if simple[1] is not None else simple[2]
            display = collapse(decode_words(name)) if name else ""
            address = simple[3] or simple[4]
            return f"{display} <{address}>" if display else address
    try:
        decoded = collapse(decode_words(value))
    except Exception:
        return collapse(value)
    if not value or len(value) > _MAX_ADDRESS_HEADER:
        return decoded
    try:
        # Parse the undecoded value: a decoded display name may hold commas, quotes or angle brackets.
        pairs = getaddresses([value])
    except Exception:
        return decoded
    # Anything that is not a list of addresses (no "@", or an unquoted comma splitting a display name)
    # reads best as the header text itself.
    if not pairs or any("@" not in address for _, address in pairs):
        return decoded
    rendered = []
    for name, address in pairs:
        display = collapse(decode_words(name))
        rendered.append(f"{display} <{address}>" if display else address)
    return ", ".join(rendered)


def decode_words(value: str) -> str:
    """Decode the RFC 2047 encoded words in ``value``, leaving undecodable ones as written."""
    if "=?" not in value:
        return value
    out: list[str] = []
    # Adjacent words of one charset are collected, then joined: a flood of words must not copy a
    # growing buffer once per word.
    pending: list[bytes] = []
    pending_charset = ""
    after_word = False
    pos = 0
    for match in _ENCODED_WORD.finditer(value):
        gap = value[pos : match.start()]
        # RFC 2047 6.2: whitespace between adjacent encoded words is not part of the text.
        if gap and not (after_word and gap.isspace()):
            if pending:
                out.append(_decode_declared(b"".join(pending), pending_charset))
                pending = []
            out.append(gap)
        # The charset may carry an RFC 2231 language suffix: "utf-8*en".
        charset = match.group(1).split("*", 1)[0].lower()
        data = _word_bytes(match.group(2), match.group(3))
        if data is None:
            if pending:
                out.append(_decode_declared(b"".join(pending), pending_charset))
                pending = []
            out.append(match.group(0))
            after_word = False
        elif pending and charset == pending_charset:
            # Joined before decoding: mailers split multibyte characters across adjacent words.
            pending.append(data)
            after_word = True
        else:
            if pending:
                out.append(_decode_declared(b"".join(pending), pending_charset))
            pending, pending_charset = [data], charset
            after_word = True
        pos = match.end()
    if pending:
        out.append(_decode_declared(b"".join(pending), pending_charset))
    out.append(value[pos:])
    return "".join(out)


def _word_bytes(encoding: str, text: str) -> bytes | None:
    data = text.encode("utf-8", "replace")
    if encoding in "qQ":
        return binascii.a2b_qp(data, header=True)
    try:
        return binascii.a2b_base64(data + b"=" * (-len(data) % 4))
    except binascii.Error:
        return None


def decode_body(data: bytes | bytearray, charset: str | None) -> str:
    if not charset:
        try:
            return _utf8(data, "strict")
        except UnicodeDecodeError:
            return data.decode("latin-1")
    return _decode_declared(data, charset)


def _utf8(data: bytes | bytearray, errors: str) -> str:
    """`data.decode("utf-8-sig", errors)`: without a BOM, the C fast path of "utf-8" (the sig
    codec is a Python function, a tenth of a small message's summary)."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data.decode("utf-8-sig", errors)
    return data.decode("utf-8", errors)


def _decode_declared(data: bytes | bytearray, charset: str) -> str:
    try:
        charset = charset.strip()
        codec = _CHARSET_SUPERSETS.get(charset, charset)
        if codec == "utf-8-sig":
            return _utf8(data, "replace")  # UTF-8 decodes to no lone surrogate
        return without_surrogates(data.decode(codec, "replace"))
    except Exception:
        # Unknown names, bytes-to-bytes codecs ("base64") and codecs refusing "replace" ("idna").
        return data.decode("utf-8", "replace")


def without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD.

    Python's utf-7, unicode_escape and raw_unicode_escape codecs, which a message may declare, can
    decode to lone surrogates, and no encoder downstream accepts them (UTF-8 for the databases and
    JSON, URL quoting for a filename): one such message would fail every read, or every delivery.
    """
    return text if text.isascii() else _SURROGATES.sub("\ufffd", text)


_B64_NON_ALPHABET = re.compile(rb"[^A-Za-z0-9+/]")


def undo_transfer_encoding(data: bytes | bytearray, encoding: str) -> bytes | bytearray:
    if encoding == "base64":
        return _b64decode(data)
    if encoding == "quoted-printable":
        return binascii.a2b_qp(data)
    if encoding in ("x-uuencode", "uuencode", "x-uue", "uue"):
        return _uudecode(data)
    return data


def _b64decode(data: bytes | bytearray) -> bytes | bytearray:
    try:
        return binascii.a2b_base64(data)
    except binascii.Error:
        pass
    # Broken padding or a stray character count: keep the alphabet, pad it, and drop a dangling
    # character that cannot form a byte.
    cleaned = _B64_NON_ALPHABET.sub(b"", data)
    if len(cleaned) % 4 == 1:
        cleaned = cleaned[:-1]
    try:
        return binascii.a2b_base64(cleaned + b"=" * (-len(cleaned) % 4))
    except binascii.Error:
        return data


def _uudecode(data: bytes | bytearray) -> bytes | bytearray:
    out = bytearray()
    started = False
    for line in data.splitlines():
        if not started:
            started = line.startswith(b"begin ")
            continue
        if line.strip() == b"end":
            break
        if not line:
            continue
        try:
            out += binascii.a2b_uu(line)
        except binascii.Error:
            # Some encoders pad lines wrongly; decode just the length the line announces.
            with contextlib.suppress(binascii.Error):
                out += binascii.a2b_uu(line[: (((line[0] - 32) & 63) * 4 + 5) // 3])
    return bytes(out) if started else data
