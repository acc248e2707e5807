"""A message's HTML body made inert for the browser: pure, no I/O.

Two layers, so that a gap in one is closed by the other:
- the markup is cleaned with nh3 (the Rust `ammonia` sanitizer): scripts, event handlers, forms,
  `<meta>`, `<base>`, frames and `javascript:` URLs are dropped; links open in a new tab with
  `rel="noopener noreferrer"`; `cid:` images become `data:` URLs of the message's own parts; remote
  images are dropped unless the reader asked for remote content;
- the answer carries `content_security_policy(...)`, a CSP that sandboxes the document (no scripts, an
  opaque origin) and allows no network fetch at all unless remote content is asked for, so a remote URL
  hidden in CSS (`background:url(...)`, `@import`) loads nothing either; such CSS is also taken out of
  style sheets and `style` attributes (``mail/remote_css.py``, read with tinycss2, escapes decoded).

The markup is cut to MAX_HTML_CHARS and its nesting flattened past the depth browsers keep
(``mail/html_guard.py``) before any parser sees it, so every step here is linear in its size.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from urllib.parse import unquote

import nh3

from inboxd.mail.html_guard import guard_html
from inboxd.mail.remote_css import strip_remote_css

# Email HTML is table layout with presentational attributes; all of it is harmless once scripts,
# forms and network fetches are gone.
_TAGS = frozenset(nh3.ALLOWED_TAGS) | {"style", "font", "center", "u", "s", "strike", "big", "small", "tt"}
_GLOBAL_ATTRIBUTES = frozenset(
    {
        "style", "class", "id", "align", "valign", "width", "height", "bgcolor", "color", "dir", "lang",
        "title", "border", "cellpadding", "cellspacing", "colspan", "rowspan", "face", "size", "role",
    }
)  # fmt: skip
_ATTRIBUTES = {
    "*": set(_GLOBAL_ATTRIBUTES),
    "a": {"href", "name"},
    "img": {"src", "alt"},
}
_URL_SCHEMES = frozenset({"http", "https", "mailto", "tel", "cid", "data"})
# `cid:` parts inlined as data: URLs, in all: a newsletter's images are a few hundred KB.
MAX_INLINE_BYTES = 8 * 1024 * 1024
# Markup beyond this is not shown (the page links the full source): Gmail clips at 102 KB, and a
# 25 MB body would cost the sanitizer and the browser seconds.
MAX_HTML_CHARS = 2 * 1024 * 1024
_REMOTE = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
# A <style> element of nh3's output: its serializer escapes "<" and ">" in text and attribute values,
# so every "<style" there opens the element, and its content runs to the first "</style".
_STYLE_OPEN = re.compile(r"<style(?=[\s/>])[^>]*+>", re.IGNORECASE)
_STYLE_CLOSE = re.compile(r"</style", re.IGNORECASE)
_LINK = re.compile(r"^\s*(?:https?:|mailto:|tel:|#)", re.IGNORECASE)
_DATA_IMAGE = re.compile(r"^\s*data:image/(?:png|gif|jpe?g|webp|bmp);", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SafeHtml:
    document: str
    remote_blocked: int  # remote images and CSS fetches dropped because remote content was not asked for
    truncated: bool  # the body was longer than MAX_HTML_CHARS and only its start is shown
    flattened: int = 0  # elements opened deeper than html_guard.MAX_DEPTH, shown as siblings


def content_security_policy(*, allow_remote: bool) -> str:
    """The CSP served with `render(...)`'s document: sandboxed, no scripts, no fetches unless allowed."""
    remote = " https: http:" if allow_remote else ""
    return (
        "sandbox allow-popups allow-popups-to-escape-sandbox; default-src 'none'; "
        f"img-src data:{remote}; style-src 'unsafe-inline'{remote}; font-src data:{remote}; "
        "form-action 'none'; base-uri 'none'; frame-ancestors 'self'"
    )


def render(
    html_body: str,
    inline_parts: Mapping[str, tuple[str, bytes]],
    *,
    allow_remote: bool,
) -> SafeHtml:
    """Clean `html_body`; `inline_parts` maps a Content-ID to its (content type, bytes)."""
    blocked = 0
    budget = MAX_INLINE_BYTES

    def keep(tag: str, attribute: str, value: str) -> str | None:
        nonlocal blocked, budget
        if attribute == "style":
            if allow_remote:
                return value
            value, removed = strip_remote_css(value)
            blocked += removed
            return value
        if attribute == "href":
            # Links leave for the web or a mail program; a data: or cid: page would open in our origin's tab.
            return value if _LINK.match(value) else None
        if tag != "img" or attribute != "src":
            return value
        if value[:4].lower() == "cid:":
            part = inline_parts.get(_unquote_cid(value[4:]))
            if part is None or not part[0].startswith("image/") or len(part[1]) > budget:
                return None
            budget -= len(part[1])
            return f"data:{part[0]};base64,{base64.b64encode(part[1]).decode()}"
        if _REMOTE.match(value):
            if allow_remote:
                return value
            blocked += 1
            return None
        return value if _DATA_IMAGE.match(value) else None

    # Cut and flattened first: html5ever's time grows with depth times size (200 KB of nested <div>
    # took 26 s), and browsers keep no deeper a tree than the guard does.
    guarded = guard_html(html_body, max_chars=MAX_HTML_CHARS)
    cleaned = nh3.clean(
        guarded.html,
        tags=set(_TAGS),
        clean_content_tags={"script", "title"},
        attributes=_ATTRIBUTES,
        attribute_filter=keep,
        url_schemes=set(_URL_SCHEMES),
        link_rel="noopener noreferrer",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )
    if not allow_remote:
        cleaned, removed = _strip_style_elements(cleaned)
        blocked += removed
    document = (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta name="referrer" content="no-referrer"></head>'
        f"<body>{cleaned}</body></html>"
    )
    return SafeHtml(document=document, remote_blocked=blocked, truncated=guarded.cut, flattened=guarded.flattened)


# A dark reading surface, as mail programs in dark mode give a message that sets no colours of its
# own; a message that does (or asks with `prefers-color-scheme`) keeps them.
_DARK_HEAD = (
    '<meta name="color-scheme" content="dark"><style>:root{color-scheme:dark;background:#121212;color:#e6e6e6}</style>'
)


def with_color_scheme(document: str, *, dark: bool) -> str:
    """`render(...)`'s document on a dark background when `dark`, as it is otherwise."""
    return document.replace("</head>", f"{_DARK_HEAD}</head>", 1) if dark else document


def _strip_style_elements(markup: str) -> tuple[str, int]:
    """nh3's output with the fetches taken out of its <style> elements (``mail/remote_css.py``); the
    ``style`` attributes were taken care of as nh3 kept them."""
    out: list[str] = []
    removed = 0
    pos = 0
    while (opening := _STYLE_OPEN.search(markup, pos)) is not None:
        closing = _STYLE_CLOSE.search(markup, opening.end())
        end = len(markup) if closing is None else closing.start()
        css, count = strip_remote_css(markup[opening.end() : end])
        removed += count
        out.append(markup[pos : opening.end()])
        out.append(css)
        pos = end
    out.append(markup[pos:])
    return "".join(out), removed


def _unquote_cid(value: str) -> str:
    return unquote(value).strip().strip("<>")


# Elements whose content a reader never sees, and elements without an end tag (which must not open
# a level, or the hidden-ness of what follows would be misjudged).
_INVISIBLE_TAGS = frozenset({"head", "script", "style", "template", "title"})
_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_LINE_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
        "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre",
        "section", "table", "tr", "ul",
    }
)  # fmt: skip
# A zero: "0", "00", ".0", "0.00". Possessive, so a long run of zeros is read once ("0*\.?0+" tried
# every split of it: 10,000 zeros in an opacity took 3 s).
_ZERO = r"(?:0*+\.)?0++"
_HIDING_STYLE = re.compile(
    rf"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse)|opacity\s*:\s*{_ZERO}\s*(?:;|$|!)"
    rf"|font-size\s*:\s*{_ZERO}[a-z%]*\s*(?:;|$|!)|mso-hide\s*:\s*all)",
    re.IGNORECASE,
)
_ZERO_BOX = re.compile(r"(?:^|;)\s*(?:max-)?(?:height|width)\s*:\s*0+[a-z%]*\s*(?:;|$|!)", re.IGNORECASE)
_OVERFLOW_HIDDEN = re.compile(r"(?:^|;)\s*overflow\s*:\s*hidden", re.IGNORECASE)


def _hides(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether this element hides its content from a reader: by its kind, the `hidden` attribute,
    or an inline style (display, visibility, opacity, a zero font size, a zero box that clips)."""
    if tag in _INVISIBLE_TAGS:
        return True
    for name, value in attrs:
        if name == "hidden":
            return True
        if name == "style" and value:
            if _HIDING_STYLE.search(value):
                return True
            if _ZERO_BOX.search(value) and _OVERFLOW_HIDDEN.search(value):
                return True
    return False


class _VisibleText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._open: list[tuple[str, bool]] = []  # (tag, hides) of each open element
        self._count: dict[str, int] = {}  # open elements by tag, so a stray end tag costs no search
        self._hidden = 0  # how many open elements hide their content

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _LINE_TAGS:
            self.parts.append("\n")
        if tag in _VOID_TAGS:
            return
        hides = _hides(tag, attrs)
        self._open.append((tag, hides))
        self._count[tag] = self._count.get(tag, 0) + 1
        self._hidden += hides

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _LINE_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _LINE_TAGS:
            self.parts.append("\n")
        # An end tag closes its element and whatever was left open inside it; a stray one is ignored.
        # Each open element is popped once, so the walk is linear over the document.
        if not self._count.get(tag):
            return
        while self._open:
            name, hides = self._open.pop()
            self._count[name] -= 1
            self._hidden -= hides
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


_UNFINISHED_TAG = re.compile(r"<[a-zA-Z/!?]")
_SPACES = re.compile(r"[^\S\n]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


def visible_text(html_body: str) -> str:
    """What a reader of the HTML sees, as plain text: hidden elements (by kind, `hidden` or inline
    style) and their content are dropped, blocks become lines. For readers that must not be steered
    by text a person would never see, such as an AI agent. Never raises."""
    parser = _VisibleText()
    try:
        parser.feed(guard_html(html_body, max_chars=MAX_HTML_CHARS).html)
        # Not close(): on some inputs it is quadratic (see mail/html_text.py). What feed() holds back is
        # an unfinished tag, dropped as HTML5 does, or trailing text, kept.
        tail = parser.rawdata
        if tail and parser.cdata_elem is None and not _UNFINISHED_TAG.match(tail):
            parser.handle_data(unescape(tail))
    except Exception:
        pass  # html.parser gives up on some malformed declarations: keep what was read before
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
