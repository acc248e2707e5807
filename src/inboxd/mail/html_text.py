"""HTML rendered to one line of text, and the body preview of a message taken from its text or HTML.

Never raises: ``html.parser`` gives up on some malformed markup, and then a linear tag stripper that
skips what the parser skips renders it instead.
"""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

__all__ = ["BLOCK_TAGS", "html_to_text"]


_PREVIEW_LENGTH = 100


# The HTML preview renders at most this much markup: hostile markup costs html.parser around a
# microsecond per character, while senders keep HTML under Gmail's 102 KB clipping limit and have text
# well within it, even behind large inline styles.
_MAX_PREVIEW_HTML = 256 * 1024


def html_to_text(html: str) -> str:
    """Render HTML to one line of text: tags stripped, script/style/title content skipped, entities
    unescaped, whitespace collapsed. Never raises."""
    extractor = _TextExtractor()
    try:
        extractor.feed(html)
        extractor.finish()
    except Exception:
        # html.parser raises AssertionError on some malformed declarations ("<![foo[").
        return collapse(_strip_tags(html))
    return collapse("".join(extractor.parts))


def collapse(text: str) -> str:
    return " ".join(text.split())


def is_blank(text: str) -> bool:
    return not text or text.isspace()


def preview(text_body: str, html_body: str) -> str:
    if not is_blank(text_body):
        return _collapsed_prefix(text_body)
    if html_body:
        return _html_preview(html_body)
    return ""


def _collapsed_prefix(text: str) -> str:
    """``collapse(text)[:_PREVIEW_LENGTH]`` without collapsing all of a long body.

    Collapsing a prefix of ``text`` gives a prefix of collapsing all of it, so a prefix that already
    yields enough characters gives the same answer.
    """
    # Ordinary text collapses its first 128 characters to at least 100; the cost is that of the prefix.
    size = _PREVIEW_LENGTH + 28
    while True:
        collapsed = collapse(text[:size])
        if len(collapsed) >= _PREVIEW_LENGTH or size >= len(text):
            return collapsed[:_PREVIEW_LENGTH]
        size *= 8


def _html_preview(html: str) -> str:
    """``html_to_text(html)[:_PREVIEW_LENGTH]``, feeding the parser only as much HTML as it takes."""
    extractor = _TextExtractor()
    limit = min(len(html), _MAX_PREVIEW_HTML)
    try:
        pos, step = 0, 256
        while pos < limit:
            extractor.feed(html[pos : min(pos + step, limit)])
            pos += step
            step *= 2
            collapsed = collapse("".join(extractor.parts))
            if len(collapsed) >= _PREVIEW_LENGTH:
                return collapsed[:_PREVIEW_LENGTH]
        if limit == len(html):
            extractor.finish()
    except Exception:
        return collapse(_strip_tags(html[:limit]))[:_PREVIEW_LENGTH]
    return collapse("".join(extractor.parts))[:_PREVIEW_LENGTH]


# Elements whose boundaries separate words when rendered.
BLOCK_TAGS = frozenset(
    (
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "div",
        "dl",
        "dt",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
        "center",
    )
)


# Content that is not rendered. The title is shown in no mail client and would otherwise open every
# preview of a templated newsletter.
_SKIPPED_TAGS = frozenset(("script", "style", "title"))


_UNTERMINATED = re.compile(r"<[a-zA-Z/!?]")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            if self._skipping is None:
                self._skipping = tag
        elif tag == "body" and self._skipping == "title":
            self._skipping = None  # an unclosed <title> must not hide the whole body
        if tag in BLOCK_TAGS:
            self.parts.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # "<script/>" has no content to skip, so only the word separation of "<br/>" matters.
        if tag in BLOCK_TAGS:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._skipping or (tag == "head" and self._skipping == "title"):
            self._skipping = None
        if tag in BLOCK_TAGS:
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if self._skipping is None:
            self.parts.append(data)

    def finish(self) -> None:
        """End the input; used instead of close().

        After feed() the parser holds back only what it could not complete: an unterminated tag,
        comment, declaration or script/style element, which HTML5 drops at end of file, or trailing
        text ending in a possible character reference. close() (before Python 3.11.13) instead retries
        every later "<" against the rest of the input, which is quadratic: 200 KB of "<!--" took minutes.
        """
        tail, self.rawdata = self.rawdata, ""
        if tail and self.cdata_elem is None and not _UNTERMINATED.match(tail):
            self.handle_data(unescape(tail))


# One token at a time, so that unterminated comments, elements and tags cost linear time: the first
# alternative that matches wins, and a tag may not span a "<" (else every "<" would scan to the end).
_FALLBACK_TOKEN = re.compile(r"<!--|<(script|style|title)\b|<[a-zA-Z/!?][^<>]*>", re.IGNORECASE)


_FALLBACK_CLOSE = {name: re.compile(rf"</{name}", re.IGNORECASE) for name in _SKIPPED_TAGS}


def _strip_tags(html: str) -> str:
    """Fallback rendering for markup html.parser gives up on, skipping what _TextExtractor skips."""
    out: list[str] = []
    pos = 0
    while True:
        match = _FALLBACK_TOKEN.search(html, pos)
        if match is None:
            out.append(html[pos:])
            break
        out.append(html[pos : match.start()])
        out.append(" ")
        skipped = match.group(1)
        if skipped:
            close = _FALLBACK_CLOSE[skipped.lower()].search(html, match.end())
            end = -1 if close is None else html.find(">", close.end())
            if end < 0 and skipped.lower() == "title":
                end = html.find(">", match.end())  # an unclosed title hides only itself
        elif match.group(0) == "<!--":
            end = html.find("-->", match.end())
            end = end if end < 0 else end + 2
        else:
            end = match.end() - 1
        if end < 0:
            break  # unterminated: the rest is not text
        pos = end + 1
    return unescape("".join(out))
