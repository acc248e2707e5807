"""The hand-written MIME walker (mail/parse.py) against the stdlib `email` parser, field by field,
over a corpus of well-formed messages: where the input is valid, both must read the same thing.

The reference below applies parse.py's documented rules (first text/plain and text/html leaves not
marked as attachments are the bodies; every other leaf is an attachment; message/* parts are
leaves) to the tree `email.parser.BytesParser` builds.
"""

from __future__ import annotations

import email.header
import email.parser
import email.policy
import email.utils
from collections.abc import Iterator
from email.message import EmailMessage, Message
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import pytest

from inboxd.mail.parse import parse_message


def _smtp(message: Message) -> bytes:
    return message.as_bytes(policy=email.policy.SMTP)


def _base(subject: str = "Hello", sender: str = "Alice <alice@example.org>") -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "Bob <bob@example.com>, carol@example.com"
    message["Subject"] = subject
    return message


def corpus() -> Iterator[tuple[str, bytes]]:
    plain = _base()
    plain.set_content("Your code is 123456.\n")
    yield "plain", _smtp(plain)

    accents = _base("Grüße aus Köln — ünïcödé", "Jörg Müller <joerg@example.com>")
    accents.set_content("Größe: 5 €\nZeile zwei\n")
    yield "utf8-subject-and-body", _smtp(accents)

    latin = _base("Caf\u00e9")
    latin.set_content("Un caf\u00e9 cr\u00e8me, s'il vous pla\u00eet.\n", charset="iso-8859-1", cte="quoted-printable")
    yield "latin1-qp", _smtp(latin)

    b64 = _base("base64 body")
    b64.set_content("Line one\nLine two with ünïcode\n", cte="base64")
    yield "utf8-base64", _smtp(b64)

    alternative = _base("Alternative")
    alternative.set_content("Plain part.\n")
    alternative.add_alternative("<html><body><p>HTML <b>part</b></p></body></html>\n", subtype="html")
    yield "alternative", _smtp(alternative)

    attached = _base("With attachments")
    attached.set_content("See attached.\n")
    attached.add_attachment(b"%PDF-1.4 fake pdf \x00\x01\x02", maintype="application", subtype="pdf", filename="r.pdf")
    attached.add_attachment("a,b\n1,2\n", subtype="csv", filename="data.csv")
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    attached.add_attachment(png, maintype="image", subtype="png", filename="ä ö.png")
    yield "attachments", _smtp(attached)

    inline_html = _base("Related")
    inline_html.set_content("text\n")
    inline_html.add_alternative('<p><img src="cid:logo"></p>\n', subtype="html")
    html_part = inline_html.get_payload()[1]  # type: ignore[index]
    assert isinstance(html_part, EmailMessage)
    html_part.add_related(b"GIF89a....", maintype="image", subtype="gif", cid="<logo>")
    yield "related", _smtp(inline_html)

    nested = _base("Forwarded")
    nested.set_content("Forwarding this.\n")
    inner = _base("Inner message")
    inner.set_content("Inner body.\n")
    nested.add_attachment(inner)
    yield "rfc822", _smtp(nested)

    html_only = _base("HTML only")
    html_only.set_content("<html><body><h1>Only HTML</h1></body></html>\n", subtype="html")
    yield "html-only", _smtp(html_only)

    legacy = MIMEMultipart("mixed")
    legacy["From"] = '"Smith, John" <john@example.com>'
    legacy["To"] = "x@example.com"
    legacy["Subject"] = email.header.Header("日本語の件名", "iso-2022-jp").encode()
    legacy.attach(MIMEText("本文です。\n", "plain", "iso-2022-jp"))
    legacy.attach(MIMEApplication(b"\x00" * 64 + b"binary", "octet-stream", Name="blob.bin"))
    legacy.get_payload()[1]["Content-Disposition"] = 'attachment; filename="blob.bin"'  # type: ignore[index]
    yield "iso-2022-jp", _smtp(legacy)

    # Multiparts nested five deep, each level with a text part and a file.
    body = "level 5 text\r\n"
    for n in reversed(range(5)):
        body = (
            f"Content-Type: multipart/mixed; boundary=b{n}\r\n\r\n"
            f"--b{n}\r\nContent-Type: text/plain\r\n\r\nlevel {n}\r\n"
            f"--b{n}\r\nContent-Type: application/octet-stream\r\n"
            f'Content-Disposition: attachment; filename="f{n}"\r\n\r\nfile {n}\r\n'
            f"--b{n}\r\n{body}\r\n--b{n}--\r\n"
        )
    deep = "From: a@example.org\r\nTo: b@example.com\r\nSubject: Deep\r\nMIME-Version: 1.0\r\n" + body
    yield "nested-multiparts", deep.encode()


# --- The reference: the same rules over the stdlib's tree -----------------------------------------


def _leaves(part: Message) -> Iterator[Message]:
    if part.is_multipart() and part.get_content_maintype() == "multipart":
        for child in part.get_payload():
            assert isinstance(child, Message)
            yield from _leaves(child)
    else:
        yield part


def _is_attachment(part: Message) -> bool:
    return (part.get("content-disposition") or "").split(";", 1)[0].strip().lower() == "attachment"


def _text(part: Message) -> str:
    data = part.get_payload(decode=True)
    assert isinstance(data, bytes)
    return data.decode(part.get_content_charset() or "us-ascii", "replace")


def _decoded(value: str | None) -> str:
    return " ".join(str(email.header.make_header(email.header.decode_header(value or ""))).split())


def _rendered(value: str | None) -> str:
    """As parse.py renders an address header for display: "Name <addr>, addr2"."""
    pairs = email.utils.getaddresses([value or ""])
    return ", ".join(f"{_decoded(name)} <{addr}>" if name else addr for name, addr in pairs)


@pytest.mark.parametrize(("name", "raw"), list(corpus()), ids=[name for name, _ in corpus()])
def test_walker_agrees_with_the_stdlib(name: str, raw: bytes) -> None:
    ours = parse_message(raw)
    tree = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(raw)

    assert ours.summary.subject == _decoded(tree["subject"])
    assert ours.summary.from_ == _rendered(tree["from"])
    assert ours.to == _rendered(tree["to"])
    assert [name.lower() for name, _ in ours.headers] == [name.lower() for name in tree]

    text = html = None
    attachments: list[Message] = []
    for leaf in _leaves(tree):
        kind = leaf.get_content_type()
        if kind == "text/plain" and text is None and not _is_attachment(leaf):
            text = _text(leaf)
        elif kind == "text/html" and html is None and not _is_attachment(leaf):
            html = _text(leaf)
        else:
            attachments.append(leaf)
    assert ours.text_body == (text or "")
    assert ours.html_body == (html or "")
    assert [a.content_type for a in ours.attachments] == [a.get_content_type() for a in attachments]
    assert [a.filename for a in ours.attachments] == [_decoded(a.get_filename()) for a in attachments]
    for mine, theirs in zip(ours.attachments, attachments, strict=True):
        if theirs.get_content_maintype() == "message":
            inner = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(mine.data)
            assert inner["subject"] == theirs.get_payload(0)["subject"]  # type: ignore[index]
        else:
            assert mine.data == theirs.get_payload(decode=True)
