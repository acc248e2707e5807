"""Property tests of the MIME parser: whatever bytes or MIME tree it is fed, it never raises and
always answers well-formed fields (hypothesis; the examples are bounded to keep the suite quick)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inboxd.mail.message_walk import parse_summary
from inboxd.mail.parse import ParsedMessage, parse_message

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_TOKENS = [
    b"\r\n",
    b"\r\n\r\n",
    b"--",
    b"--b",
    b"--b--",
    b"=?",
    b"?=",
    b"=?utf-8?b?",
    b"=?x-unknown?q?",
    b"Content-Type: multipart/mixed; boundary=b\r\n",
    b"Content-Type: text/plain; charset=utf-7\r\n",
    b"Content-Transfer-Encoding: base64\r\n",
    b"Content-Transfer-Encoding: quoted-printable\r\n",
    b"Content-Disposition: attachment; filename*=utf-8''%ff\r\n",
    b"Subject: ",
    b"From: ",
    b"\x00",
    b"\xff",
    b"=\r\n",
    b"=ZZ",
    b";",
    b'"',
]


def _check(parsed: ParsedMessage) -> None:
    for text in (parsed.summary.subject, parsed.summary.from_, parsed.text_body, parsed.html_body, parsed.to):
        assert isinstance(text, str)
        text.encode("utf-8")  # no lone surrogates: every field can be sent as JSON
    assert len(parsed.summary.preview_text) <= 100
    for attachment in parsed.attachments:
        assert isinstance(attachment.data, bytes)
        attachment.filename.encode("utf-8")


@FAST
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(raw: bytes) -> None:
    _check(parse_message(raw))
    parse_summary(raw)


@FAST
@given(st.lists(st.one_of(st.sampled_from(_TOKENS), st.binary(max_size=40)), max_size=80))
def test_mime_like_token_soup_never_raises(tokens: list[bytes]) -> None:
    raw = b"".join(tokens)
    _check(parse_message(raw))
    parse_summary(raw)


_CHARSETS = st.sampled_from(["utf-8", "iso-8859-1", "koi8-r", "x-unknown", "utf-7", "", "gb18030"])
_ENCODINGS = st.sampled_from(["7bit", "8bit", "base64", "quoted-printable", "x-uuencode", "bogus"])
_TYPES = st.sampled_from(["text/plain", "text/html", "application/octet-stream", "message/rfc822", "image/png"])


def _leaf() -> st.SearchStrategy[bytes]:
    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        ctype, charset, cte = draw(_TYPES), draw(_CHARSETS), draw(_ENCODINGS)
        name = draw(st.text(max_size=12))
        header = f"Content-Type: {ctype}; charset={charset}\r\nContent-Transfer-Encoding: {cte}\r\n"
        if draw(st.booleans()):
            header += f'Content-Disposition: attachment; filename="{name}"\r\n'
        body = draw(st.binary(max_size=200))
        return header.encode("utf-8", "surrogatepass") + b"\r\n" + body

    return build()


@st.composite
def _multipart(draw: st.DrawFn, children: st.SearchStrategy[bytes]) -> bytes:
    boundary = draw(st.sampled_from(["b", "=_x", "a b", "", "--", "z" * 80]))
    parts = draw(st.lists(children, max_size=5))
    closed = draw(st.booleans())
    out = f"Content-Type: multipart/{draw(st.sampled_from(['mixed', 'alternative', 'related', 'digest']))}"
    out += f'; boundary="{boundary}"\r\n\r\n'
    raw = out.encode()
    for part in parts:
        raw += f"--{boundary}\r\n".encode() + part + b"\r\n"
    if closed:
        raw += f"--{boundary}--\r\n".encode()
    return raw


_TREES = st.recursive(_leaf(), lambda children: _multipart(children), max_leaves=20)


@FAST
@given(_TREES, st.text(max_size=60), st.text(max_size=60))
def test_random_mime_trees_never_raise(tree: bytes, subject: str, sender: str) -> None:
    head = f"From: {sender}\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\n".encode("utf-8", "surrogatepass")
    _check(parse_message(head + tree))
    parse_summary(head + tree)
