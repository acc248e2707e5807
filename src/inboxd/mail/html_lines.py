"""HTML rendered to lines of text for the code and link finders (``mail/codes.py``): block elements
break lines, the texts of emphasised or large elements are noted, and anchors and bare URLs are
collected as links in document order. Never raises."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from inboxd.mail.html_guard import guard_html
from inboxd.mail.html_text import BLOCK_TAGS

__all__ = ["MAX_URL_CHARS", "TEXT_URL", "Rendered", "render_html", "text_urls", "trim_url"]


# A URL in running text ends at whitespace or at characters that cannot be part of one in practice;
# trailing punctuation of the sentence is trimmed afterwards.
TEXT_URL = re.compile(r"""https?://[^\s<>"'`\]\[{}|\\^]+""", re.IGNORECASE)
# A URL longer than this is no link a finder returns: browsers and servers stop near 8 KB (Apache's
# and nginx's default request line), and tracking links in real mail stay under 2 KB. The cap also
# bounds what a run of one character in a text body costs.
MAX_URL_CHARS = 8192
_TRAILING = frozenset(".,;:!?)'\"»”’>*")
_HREF_SCHEME = re.compile(r"^https?://\S", re.IGNORECASE)


def trim_url(url: str) -> str:
    """``url`` without the sentence's punctuation after it, in one pass: a closing parenthesis stays
    when it balances one inside the URL (Wikipedia links)."""
    opened = url.count("(")
    closed = url.count(")")
    end = len(url)
    while end and url[end - 1] in _TRAILING:
        if url[end - 1] == ")":
            if opened >= closed:
                break
            closed -= 1
        end -= 1
    return url[:end]


def text_urls(text: str) -> list[str]:
    """The bare http(s) URLs of ``text``, trimmed, in order; those over MAX_URL_CHARS are left out."""
    urls = []
    for match in TEXT_URL.finditer(text):
        if match.end() - match.start() <= MAX_URL_CHARS:
            url = trim_url(match.group(0))
            if url:
                urls.append(url)
    return urls


_SKIPPED_TAGS = frozenset(("script", "style", "title", "head"))
_PREFORMATTED = frozenset(("pre", "textarea", "listing", "plaintext", "xmp"))
_EMPHASIS_TAGS = frozenset(("b", "strong", "h1", "h2", "h3", "h4", "code", "kbd", "tt", "big", "samp", "mark"))
_VOID_TAGS = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"]
)
_FONT_SIZE = re.compile(r"font-size\s*:\s*([\d.]+)\s*(px|pt|em|rem)?", re.IGNORECASE)
_EMPHASIS_STYLE = re.compile(r"letter-spacing|font-weight\s*:\s*(?:bold|[6-9]00)|monospace", re.IGNORECASE)
_EMPHASIS_CLASS = re.compile(r"code|otp|pin|token", re.IGNORECASE)


def _large(style: str) -> bool:
    match = _FONT_SIZE.search(style)
    if match is None:
        return False
    try:
        size = float(match.group(1))
    except ValueError:
        return False
    unit = (match.group(2) or "px").lower()
    return size >= (1.3 if unit in ("em", "rem") else 18 if unit == "px" else 14)


@dataclass(slots=True)
class Rendered:
    text: str
    emphasised: set[str]
    links: list[tuple[str, str]]


class _Renderer(HTMLParser):
    """HTML to lines of text, plus the texts of emphasised elements and the anchors' URLs and texts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.emphasised: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self._skipping: str | None = None
        # Open elements: (tag, emphasised, start index in parts), and how many of each tag are open,
        # so that a stray end tag costs no search.
        self._stack: list[tuple[str, bool, int]] = []
        self._count: dict[str, int] = {}
        self._preformatted = 0  # open <pre>, <textarea> and <listing> elements
        # Characters in parts[:i] for each i, so an element's text length is known without joining.
        self._offsets: list[int] = [0]
        self._anchor: tuple[str, int] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping is not None:
            return
        if tag in _SKIPPED_TAGS:
            self._skipping = tag
            return
        if tag in BLOCK_TAGS:
            self._append("\n")
        values = {name: value or "" for name, value in attrs}
        if tag in ("a", "area"):
            href = values.get("href", "").strip()
            if _HREF_SCHEME.match(href):
                if tag == "area":
                    self.links.append((href, values.get("alt", "")))
                else:
                    self._close_anchor()
                    self._anchor = (href, len(self.parts))
        if tag in _VOID_TAGS:
            return
        style = values.get("style", "")
        emphasis = (
            tag in _EMPHASIS_TAGS
            or _large(style)
            or bool(_EMPHASIS_STYLE.search(style))
            or bool(_EMPHASIS_CLASS.search(values.get("class", "")))
        )
        self._stack.append((tag, emphasis, len(self.parts)))
        self._count[tag] = self._count.get(tag, 0) + 1
        if tag in _PREFORMATTED:
            self._preformatted += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping is None and tag in BLOCK_TAGS:
            self._append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping is not None:
            if tag == self._skipping:
                self._skipping = None
            return
        if tag == "a":
            self._close_anchor()
        # The end tag closes its element and what is open inside it; each element is popped once.
        if self._count.get(tag):
            while self._stack:
                name, emphasis, start = self._stack.pop()
                self._count[name] -= 1
                if name in _PREFORMATTED:
                    self._preformatted -= 1
                # Only a short element can be an emphasised code: a long one is not joined (nested
                # emphasis would otherwise join the same text again for each level).
                if emphasis and self._offsets[-1] - self._offsets[start] <= _MAX_EMPHASIS_SOURCE:
                    text = " ".join("".join(self.parts[start:]).split())
                    if 0 < len(text) <= 40:
                        self.emphasised.add(text)
                if name == tag:
                    break
        if tag in BLOCK_TAGS:
            self._append("\n")

    def handle_data(self, data: str) -> None:
        if self._skipping is None:
            # A line break in the source is a space on the page (a code split over two source lines
            # is one), except in preformatted text.
            self._append(data if self._preformatted else data.replace("\r", " ").replace("\n", " "))

    def _append(self, text: str) -> None:
        self.parts.append(text)
        self._offsets.append(self._offsets[-1] + len(text))

    def _close_anchor(self) -> None:
        if self._anchor is not None:
            href, start = self._anchor
            self.links.append((href, "".join(self.parts[start:])))
            self._anchor = None


_MAX_HTML = 512 * 1024
# An emphasised element whose text (before whitespace is collapsed) is longer than this is no code.
_MAX_EMPHASIS_SOURCE = 400


def render_html(html: str) -> Rendered:
    renderer = _Renderer()
    try:
        renderer.feed(guard_html(html, max_chars=_MAX_HTML).html)
        renderer.goahead(True)
    except Exception:
        # html.parser raises AssertionError on some malformed declarations: keep what was read.
        pass
    renderer._close_anchor()
    text = "".join(renderer.parts)
    links = list(renderer.links)
    # Bare URLs in the rendered text are links too, after the anchors that precede them.
    anchored = {url for url, _ in links}
    for url in text_urls(text):
        if url not in anchored:
            anchored.add(url)
            links.append((url, url))
    return Rendered(text=text, emphasised=renderer.emphasised, links=links)
