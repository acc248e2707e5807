"""One walk over a received message for ingest's summary and the search index's bodies.

``parse_summary`` gives the From, Subject and body preview of a raw message (taken at SMTP ingest,
before its 250), ``body_prefixes`` the beginnings of its bodies for the index; ``MessageWalk``
does both on one walk of the MIME tree (``mail/mime_tree.py``), and stops as soon as it has what
it needs. The full parse, on first open, is ``mail/parse.py``. Nothing here raises: malformed,
truncated or hostile input yields best-effort fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message

from inboxd.mail.decoding import address_value, from_header, subject_header
from inboxd.mail.html_text import is_blank, preview
from inboxd.mail.mime_tree import Leaf, leaves, split_entity

__all__ = ["Bodies", "MessageWalk", "Summary", "body_prefixes", "parse_summary"]

# The summary decodes at most this much of a body (whole lines): the preview needs its first 100
# characters, and decoding all of a 25 MiB body would copy it twice more on the ingest path. A text
# body blank for its first MiB and not after counts as blank (the HTML body then gives the preview).
_SUMMARY_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Summary:
    """What the ingest path records for a message."""

    from_: str  # "Display Name <addr@x>", or "addr@x" when there is no name; "" when absent
    subject: str  # RFC 2047 decoded, whitespace collapsed; "" when absent
    preview_text: str  # first 100 characters of the body text, whitespace collapsed
    # The X-Tags header(s) as sent, joined by commas ("" when absent); services/tags.py cleans them.
    x_tags: str = ""


@dataclass(frozen=True, slots=True)
class Bodies:
    """The beginnings of a message's text and HTML bodies, whether it has attachments, and its To
    and Cc headers rendered as the detail renders From (one string per header)."""

    text_body: str
    html_body: str
    has_attachments: bool
    recipients: tuple[str, ...] = ()


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
        self._leaves: Iterator[Leaf] = iter(())
        self._text_leaf: Leaf | None = None
        self._html_leaf: Leaf | None = None
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
            headers, body_start = split_entity(buf, 0, len(buf))
            self._leaves = leaves(buf, headers, body_start)
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
    def _decoded(leaf: Leaf, limit: int, done: tuple[int, str] | None) -> tuple[int, str]:
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
            tags = headers.get_all("x-tags")
            x_tags = ",".join(str(v) for v in tags) if tags else ""
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


def body_prefixes(raw: bytes | bytearray, limit: int) -> Bodies:
    """The bodies ``parse_message`` chooses, each decoded from at most ``limit`` bytes of its encoded
    payload (whole lines), and whether any attachment exists, none of them decoded; never raises.

    For the search index, which keeps the beginning of the body: a full parse of a 25 MiB message
    decodes every byte of it, holding the GIL (and so the event loop) for tens of milliseconds.
    """
    return MessageWalk(raw).bodies(limit)
