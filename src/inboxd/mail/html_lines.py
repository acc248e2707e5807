"""HTML rendered to lines of text for the code and link finders (``mail/codes.py``): block elements
break lines, the texts of emphasised or large elements are noted, and anchors and bare URLs are
collected as links in document order. Never raises."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from inboxd.mail.html_text import BLOCK_TAGS

__all__ = ["TEXT_URL", "Rendered", "render_html", "trim_url"]


# A URL in running text ends at whitespace or at characters that cannot be part of one in practice;
# trailing punctuation of the sentence is trimmed afterwards.
TEXT_URL = re.compile(r"""https?://[^\s<>"'`\]\[{}|\\^]+""", re.IGNORECASE)
_TRAILING = ".,;:!?)'\"»”’>*"
_HREF_SCHEME = re.compile(r"^https?://\S", re.IGNORECASE)


def trim_url(url: str) -> str:
    while url and url[-1] in _TRAILING:
        # A closing parenthesis belongs to the URL when it balances one inside it (Wikipedia links).
        if url[-1] == ")" and url.count("(") >= url.count(")"):
            break
        url = url[:-1]
    return url


_SKIPPED_TAGS = frozenset(("script", "style", "title", "head"))
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
        # Open elements: (tag, emphasised, start index in parts).
        self._stack: list[tuple[str, bool, int]] = []
        self._anchor: tuple[str, int] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping is not None:
            return
        if tag in _SKIPPED_TAGS:
            self._skipping = tag
            return
        if tag in BLOCK_TAGS:
            self.parts.append("\n")
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

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping is None and tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping is not None:
            if tag == self._skipping:
                self._skipping = None
            return
        if tag == "a":
            self._close_anchor()
        for depth in range(len(self._stack) - 1, -1, -1):
            if self._stack[depth][0] == tag:
                for _, emphasis, start in self._stack[depth:]:
                    if emphasis:
                        text = " ".join("".join(self.parts[start:]).split())
                        if 0 < len(text) <= 40:
                            self.emphasised.add(text)
                del self._stack[depth:]
                break
        if tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skipping is None:
            self.parts.append(data)

    def _close_anchor(self) -> None:
        if self._anchor is not None:
            href, start = self._anchor
            self.links.append((href, "".join(self.parts[start:])))
            self._anchor = None


_MAX_HTML = 512 * 1024


def render_html(html: str) -> Rendered:
    renderer = _Renderer()
    try:
        renderer.feed(html[:_MAX_HTML])
        renderer.goahead(True)
    except Exception:
        # html.parser raises AssertionError on some malformed declarations: keep what was read.
        pass
    renderer._close_anchor()
    text = "".join(renderer.parts)
    links = list(renderer.links)
    # Bare URLs in the rendered text are links too, after the anchors that precede them.
    anchored = {url for url, _ in links}
    for match in TEXT_URL.finditer(text):
        url = trim_url(match.group(0))
        if url not in anchored:
            anchored.add(url)
            links.append((url, url))
    return Rendered(text=text, emphasised=renderer.emphasised, links=links)
