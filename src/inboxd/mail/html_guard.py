"""A nesting-depth guard run on a message's HTML before an HTML parser sees it: pure, linear, no I/O.

HTML5 parsers (Lexbor for the checks, html5ever inside nh3 for the view, ``html.parser`` for the
text finders) spend time per element in proportion to the depth of the open elements, so 200 KB of
``<div>`` costs seconds to tens of seconds. Browsers do not keep such depth either: Chromium's tree
builder stops nesting at 512 open elements (``kMaximumHTMLParserDOMTreeDepth``) and adds what comes
deeper as siblings. The guard does the same in markup: before a start tag that would open an element
deeper than ``MAX_DEPTH``, it closes the deepest open element (and drops that element's own end tag
when it comes), so the new element and its content are kept, one level up. It also cuts the markup
at a size cap, so a caller gets both bounds in one pass.

The scan follows the HTML tokenizer where it matters for depth (quoted attribute values may hold
``>``, comments, raw text elements such as ``<style>`` whose content is not markup, an unterminated
tag swallowing the rest) with regular expressions that cannot backtrack (possessive quantifiers), and
tracks the open elements with the tree builder's main rules: void elements open nothing, an element
whose end tag is optional (``p``, ``li``, ``td``...) is closed by the start tag of its sibling, an end
tag closes the nearest open element of its name unless a table or similar boundary lies in between,
and a stray end tag closes nothing. It is a bound, not a parser: where it and a browser
disagree on hostile markup, the depth a parser meets stays within a small multiple of ``MAX_DEPTH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_DEPTH", "GuardedHtml", "guard_html"]


# Chromium's cap on the depth of the DOM its HTML parser builds.
MAX_DEPTH = 512

_WS = "\t\n\f\r "
# An attribute: a name (which may begin with "="), then "=" and a value when an "=" follows; a quoted
# value must be closed, else the tag runs to the end of the input as the tokenizer has it.
_ATTRIBUTE = (
    rf"[^{_WS}/>][^{_WS}/>=]*+"
    rf"(?:[{_WS}]*+=[{_WS}]*+(?:\"[^\"]*+\"|'[^']*+'|[^{_WS}>\"'][^{_WS}>]*+|(?=>))|(?![{_WS}]*+=))"
)
_TAG = re.compile(rf"<(/?)([A-Za-z][^{_WS}/>]*+)((?:[{_WS}/]++|{_ATTRIBUTE})*+)>")
# Elements whose content is text in HTML (not in SVG or MathML, where "/>" closes an element too).
# <noscript> is not one: parsers without scripting, as ours, read its content as markup.
_RAW_TEXT = frozenset(("script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes"))
_RAW_END = {name: re.compile(rf"</{name}[{_WS}/>]", re.IGNORECASE) for name in _RAW_TEXT}
_VOID = frozenset(
    (
        "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image", "img", "input",
        "keygen", "link", "meta", "param", "source", "track", "wbr",
    )
)  # fmt: skip
# Elements whose end tag is optional, closed by the start tag of a sibling when they are the
# innermost open element (the tree builder closes them in more cases; the guard then counts more).
_CELL = frozenset(("td", "th"))
_ROW = _CELL | {"tr"}
_SECTION = _ROW | {"tbody", "thead", "tfoot"}
_RUBY = frozenset(("rb", "rt", "rtc", "rp"))
_P_CLOSERS = (
    "address", "article", "aside", "blockquote", "center", "details", "dialog", "dir", "div", "dl",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "main", "menu", "nav", "ol", "p", "pre", "section", "summary", "table", "ul",
)  # fmt: skip
_CLOSES: dict[str, frozenset[str]] = {
    **{name: frozenset(("p",)) for name in _P_CLOSERS},
    "li": frozenset(("li", "p")),
    "dt": frozenset(("dt", "dd", "p")),
    "dd": frozenset(("dt", "dd", "p")),
    "option": frozenset(("option",)),
    "optgroup": frozenset(("option", "optgroup")),
    "td": _CELL,
    "th": _CELL,
    "tr": _ROW,
    "tbody": _SECTION,
    "thead": _SECTION,
    "tfoot": _SECTION,
    "colgroup": frozenset(("colgroup",)),
    **{name: _RUBY for name in _RUBY},
}
# An end tag does not close elements through these (the tree builder's scope boundaries).
_BOUNDARIES = frozenset(("table", "template", "object", "applet", "marquee", "html", "svg", "math"))
_COMMENT_END = re.compile(r"--!?>")


@dataclass(frozen=True, slots=True)
class GuardedHtml:
    """The markup a parser may be given, and what the guard changed (for a finding)."""

    html: str
    flattened: int  # elements that would have opened deeper than max_depth, made siblings instead
    cut: bool  # the input was longer than max_chars and only its start is kept

    @property
    def changed(self) -> bool:
        return self.cut or self.flattened > 0


@dataclass(slots=True)
class _Open:
    """The elements the guard counts as open: a stack, with the positions of each name and of the
    boundaries, so that an end tag is matched in constant time (amortised)."""

    names: list[str]
    positions: dict[str, list[int]]
    boundaries: list[int]

    def push(self, name: str) -> None:
        self.positions.setdefault(name, []).append(len(self.names))
        if name in _BOUNDARIES:
            self.boundaries.append(len(self.names))
        self.names.append(name)

    def close(self, name: str) -> bool:
        """Close the nearest open ``name`` and what is open inside it; False when none can be closed."""
        where = self.positions.get(name)
        if not where:
            return False
        top = where[-1]
        if self.boundaries and self.boundaries[-1] > top:
            return False
        while len(self.names) > top:
            self.pop()
        return True

    def pop(self) -> str:
        popped = self.names.pop()
        self.positions[popped].pop()
        if self.boundaries and self.boundaries[-1] == len(self.names):
            self.boundaries.pop()
        return popped


def guard_html(html: str, *, max_chars: int, max_depth: int = MAX_DEPTH) -> GuardedHtml:
    """``html`` cut to ``max_chars`` with the elements that would open deeper than ``max_depth``
    flattened. Linear in the length of the input; never raises."""
    cut = len(html) > max_chars
    if cut:
        html = html[:max_chars]
    if html.count("<") <= max_depth:
        return GuardedHtml(html=html, flattened=0, cut=cut)  # too few tags to nest that deep
    out: list[str] = []
    kept_from = 0  # start of the markup not yet copied to out
    flattened = 0
    dropped: dict[str, int] = {}  # per name: end tags still to drop for start tags dropped
    opened = _Open(names=[], positions={}, boundaries=[])
    pos = 0
    end = len(html)
    while pos < end:
        lt = html.find("<", pos)
        if lt < 0 or lt + 1 >= end:
            break
        following = html[lt + 1]
        if following == "!":
            if html.startswith("<!--", lt):
                if html.startswith(("<!-->", "<!--->"), lt):
                    pos = html.index(">", lt + 4) + 1
                    continue
                close = _COMMENT_END.search(html, lt + 4)
                if close is None:
                    break
                pos = close.end()
                continue
            close_at = html.find(">", lt + 2)
            if close_at < 0:
                break
            pos = close_at + 1
            continue
        if following == "?" or (following == "/" and not html[lt + 2 : lt + 3].isalpha()):
            close_at = html.find(">", lt + 2)  # a bogus comment ("</>" and "</ x>" among them)
            if close_at < 0:
                break
            pos = close_at + 1
            continue
        if following != "/" and not (following.isascii() and following.isalpha()):
            pos = lt + 1  # a "<" that starts no tag is text
            continue
        tag = _TAG.match(html, lt)
        if tag is None:
            break  # an unterminated tag runs to the end of the input, where the tokenizer drops it
        pos = tag.end()
        name = tag.group(2).lower()
        if tag.group(1):
            if name in _VOID:
                continue
            if opened.names and opened.names[-1] == name:
                opened.pop()
            elif dropped.get(name):
                # The end tag of an element closed early to make room: it was closed already.
                dropped[name] -= 1
                out.append(html[kept_from:lt])
                kept_from = pos
            else:
                opened.close(name)
            continue
        if name in _VOID:
            continue
        closes = _CLOSES.get(name)
        while closes and opened.names and opened.names[-1] in closes:
            opened.pop()
        foreign = bool(opened.positions.get("svg") or opened.positions.get("math"))
        if not foreign and name == "plaintext":
            break  # the rest of the input is text
        if not foreign and name in _RAW_TEXT:
            close = _RAW_END[name].search(html, pos)  # its content is text: no element opens there
            if close is None:
                break
            pos = close.start()
            continue
        if foreign and tag.group(3).rstrip(_WS).endswith("/"):
            continue  # self-closing in SVG and MathML
        if len(opened.names) >= max_depth:
            # As Chromium does, the element comes as a sibling of the deepest one: that one is
            # closed first (and its own end tag, when it comes, dropped).
            deepest = opened.pop()
            flattened += 1
            dropped[deepest] = dropped.get(deepest, 0) + 1
            out.append(html[kept_from:lt])
            out.append(f"</{deepest}>")
            kept_from = lt
        opened.push(name)
    if not flattened:
        return GuardedHtml(html=html, flattened=0, cut=cut)
    out.append(html[kept_from:])
    return GuardedHtml(html="".join(out), flattened=flattened, cut=cut)
