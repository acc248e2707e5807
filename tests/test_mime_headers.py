"""The fast paths of the MIME walk against the slow paths they replace, on generated input: the
indexed ``Headers`` against ``Message``'s scan, the header-field expression against the one that kept
line endings for ``rstrip``, the preview's short prefix against collapsing the whole text,
address_value's fast path against the general one, and the boundary's against get_boundary."""

from __future__ import annotations

import re
from email.message import Message
from email.policy import compat32
from email.utils import getaddresses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inboxd.mail.decoding import _QUOTED_PAIR, _SIMPLE_ADDRESS, address_value, decode_words
from inboxd.mail.html_text import _collapsed_prefix, collapse
from inboxd.mail.mime_tree import _HEADER_BLOCK, Headers, _boundary, split_entity

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The expression split_entity used before its values ended before trailing carriage returns.
_OLD_FIELD = re.compile(r"^([\x21-\x39\x3b-\x7e]*):[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)", re.MULTILINE)

_NAMES = ["From", "from", "FROM", "To", "Cc", "Subject", "X-Tags", "x-tags", "Content-Type", "", "From x"]
_PIECES = st.sampled_from(
    [
        *(n + ":" for n in _NAMES),
        " ",
        "\t",
        "\r",
        "\n",
        "\r\n",
        "\r\r\n",
        "\n ",
        "\r\n\t",
        "a",
        "=?",
        "ö",
        "\x00",
        "\xa0",
    ]
)
_BLOCKS = st.lists(_PIECES, max_size=40).map("".join)


def _scanning(block: str) -> Message:
    """The headers as split_entity stored them before: a plain compat32 Message."""
    headers = Message(policy=compat32)
    for name, value in _OLD_FIELD.findall(block):
        headers.set_raw(name, value.rstrip("\r\n"))
    return headers


@FAST
@given(_BLOCKS)
def test_indexed_headers_answer_as_the_scan(block: str) -> None:
    raw = block.encode()
    fast, _ = split_entity(raw, 0, len(raw))
    match = _HEADER_BLOCK.match(raw)
    slow = _scanning(raw[: match.end() if match else 0].decode("utf-8", "replace"))
    assert isinstance(fast, Headers)
    assert list(fast.raw_items()) == list(slow.raw_items())
    for name in {*_NAMES, "content-type", "missing"}:
        assert fast.get(name) == slow.get(name)
        assert fast.get(name, "x") == slow.get(name, "x")
        assert fast.get_all(name) == slow.get_all(name)
        assert fast.get_all(name, ()) == slow.get_all(name, ())
    assert fast.get_content_type() == slow.get_content_type()


@FAST
@given(_BLOCKS, st.sampled_from(_NAMES), st.text(max_size=5))
def test_indexed_headers_follow_changes(block: str, name: str, value: str) -> None:
    raw = block.encode()
    headers, _ = split_entity(raw, 0, len(raw))
    headers[name or "X"] = value
    if headers.get_all("to"):
        headers.replace_header("to", value)
    del headers["subject"]
    for key in {*_NAMES, "missing"}:
        assert headers.get(key) == Message.get(headers, key)
        assert headers.get_all(key) == Message.get_all(headers, key)


@FAST
@given(st.lists(st.sampled_from(["word", "a", " ", "  ", "\r\n", "\t", "\xa0", "\u3000", "x" * 40]), max_size=200))
def test_preview_prefix_is_the_collapsed_text(parts: list[str]) -> None:
    text = "".join(parts)
    assert _collapsed_prefix(text) == collapse(text)[:100]


def _slow_address_value(value: str) -> str:
    """address_value as it was before its fast path for plain simple addresses."""
    try:
        decoded = collapse(decode_words(value))
    except Exception:
        return collapse(value)
    if not value or len(value) > 4096:
        return decoded
    simple = _SIMPLE_ADDRESS.fullmatch(value.strip())
    if simple:
        name = _QUOTED_PAIR.sub(r"\1", simple[1]) if simple[1] is not None else simple[2] or ""
        pairs = [(name, simple[3] or simple[4])]
    else:
        try:
            pairs = getaddresses([value])
        except Exception:
            return decoded
    if not pairs or any("@" not in address for _, address in pairs):
        return decoded
    rendered = []
    for name, address in pairs:
        display = collapse(decode_words(name))
        rendered.append(f"{display} <{address}>" if display else address)
    return ", ".join(rendered)


_ADDRESS_PIECES = st.sampled_from(
    ["a", "b.c", "@", "<", ">", '"', "\\", " ", "\t", "\r\n ", ",", ";", ":", "(", ")", "=?", "?=", "[", "]"]
)
_ADDRESS_WORDS = st.sampled_from(
    ["=?utf-8?q?J=C3=B6rg?=", "Name", "x@y.test", "<x@y.test>", '"N, M"', "\\=?", "ö", "\xa0"]
)


@FAST
@given(st.lists(st.one_of(_ADDRESS_PIECES, _ADDRESS_WORDS), max_size=16).map("".join))
def test_address_fast_path_renders_as_the_slow_path(value: str) -> None:
    assert address_value(value) == _slow_address_value(value)


_CONTENT_TYPE_PIECES = st.sampled_from(
    [
        "multipart/mixed",
        "text/plain",
        "a/b/c",
        ";",
        " ",
        "\t",
        "\r\n ",
        "=",
        '"',
        "\\",
        "<",
        ">",
        "'",
        "*",
        "0",
        "?",
        "-",
        "boundary",
        "BOUNDARY",
        "boundary*",
        "charset",
        "abc",
        "=_Part_1",
        "\xa0",
        "ö",
        "()",
        ",",
        ":",
        ".",
    ]
)


_WS = st.sampled_from(["", " ", "\t", "\r\n ", "\xa0"])
# Shaped as the fast path's expression reads: type, one parameter named as a boundary, a value.
_SHAPED_CONTENT_TYPES = st.tuples(
    _WS,
    st.sampled_from(["multipart/mixed", "a/b", "x"]),
    _WS,
    st.sampled_from(["boundary", "BoUnDaRy", "boundary*", "boundary*0"]),
    _WS,
    st.sampled_from(["", '"']),
    st.text(st.characters(max_codepoint=0xFF), max_size=10),
    _WS,
).map(lambda p: f"{p[0]}{p[1]}{p[2]};{p[2]}{p[3]}{p[4]}={p[4]}{p[5]}{p[6]}{p[5]}{p[7]}")


@FAST
@given(st.one_of(st.lists(_CONTENT_TYPE_PIECES, max_size=16).map("".join), _SHAPED_CONTENT_TYPES))
def test_boundary_fast_path_answers_as_get_boundary(value: str) -> None:
    headers = Headers([("Content-Type", value)])
    assert _boundary(headers) == (Message.get_boundary(headers) or "")
