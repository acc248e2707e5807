"""CSS compatibility: which caniemail features the style sheets of an HTML body use.

Style sheets (``<style>`` elements) and ``style`` attributes are parsed with tinycss2; what is
detected is listed in ``mail/checks/html.py``. Each distinct sheet is analysed once per process (a
cache keyed by its text), which ``clear_caches`` empties.

tinycss2 tokenizes without recursion but hands back nested blocks, and walking them (or serializing
them with ``tinycss2.serialize``) recurses once per level: 1,000 nested ``calc(`` in a 5 KB mail
raised RecursionError. Every walk here carries its depth and stops at ``MAX_CSS_DEPTH`` (what lies
deeper is not analysed), and preludes and values are serialized only when they nest no deeper.
"""

from __future__ import annotations

import functools
import re

import tinycss2
import tinycss2.ast

from inboxd.mail.checks.caniemail import load
from inboxd.mail.remote_css import MAX_CSS_DEPTH

__all__ = ["clear_caches", "inline_style", "stylesheet"]


# Properties whose feature is not simply "css-<name>".
_PROPERTIES: dict[str, str] = {
    "top": "css-left-right-top-bottom",
    "right": "css-left-right-top-bottom",
    "bottom": "css-left-right-top-bottom",
    "left": "css-left-right-top-bottom",
    "margin-block": "css-margin-inline-block",
    "margin-inline": "css-margin-inline-block",
    "padding-block": "css-padding-inline-block",
    "padding-inline": "css-padding-inline-block",
    "border-inline": "css-border-inline-block",
    "border-block": "css-border-inline-block",
    "block-size": "css-block-inline-size",
    "columns": "css-column-count",
    "row-gap": "css-gap",
    "column-gap": "css-gap",
    "contain-intrinsic-size": "css-intrinsic-size",
    "-webkit-mask-image": "css-mask-image",
}


_PREFIX_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"margin-(?:top|right|bottom|left)$"), "css-margin"),
    (re.compile(r"padding-(?:top|right|bottom|left)$"), "css-padding"),
    (re.compile(r"margin-(?:block|inline)-(?:start|end)$"), "css-margin-{}-start-end"),
    (re.compile(r"padding-(?:block|inline)-(?:start|end)$"), "css-padding-{}-start-end"),
    (re.compile(r"border-(?:start|end)-(?:start|end)-radius$"), "css-border-radius-logical"),
    (re.compile(r"border-(?:top|bottom)-(?:left|right)-radius$"), "css-border-radius"),
    (re.compile(r"border-(?:inline|block)-(?:width|style|color)$"), "css-border-inline-block-longhand"),
    (re.compile(r"border-(?:inline|block)-(?:start|end)(?:-\w+)?$"), "css-border-inline-block-individual"),
    (re.compile(r"border-image-\w+$"), "css-border-image"),
    (re.compile(r"border-(?:top|right|bottom|left)(?:-\w+)?$|border-(?:width|style|color)$"), "css-border"),
    (re.compile(r"column-(?:rule|span|width|fill)(?:-\w+)?$"), "css-column-layout-properties"),
    (re.compile(r"grid-template-\w+$"), "css-grid-template"),
    (re.compile(r"scroll-snap-\w+$"), "css-scroll-snap"),
    (re.compile(r"(?:transition|animation|transform)-[\w-]+$"), "css-{}"),
    (re.compile(r"overflow-[xy]$"), "css-overflow"),
    (re.compile(r"inset-\w+$"), "css-inset"),
    (re.compile(r"text-emphasis-(?:style|color)$"), "css-text-emphasis"),
)


_FUNCTIONS = {
    "linear-gradient": "css-linear-gradient",
    "repeating-linear-gradient": "css-linear-gradient",
    "radial-gradient": "css-radial-gradient",
    "repeating-radial-gradient": "css-radial-gradient",
    "conic-gradient": "css-conic-gradient",
    "repeating-conic-gradient": "css-conic-gradient",
    "calc": "css-unit-calc",
    "clamp": "css-function-clamp",
    "min": "css-function-min",
    "max": "css-function-max",
    "light-dark": "css-function-light-dark",
    "rgb": "css-rgb",
    "rgba": "css-rgba",
    "var": "css-variables",
    "lab": "css-modern-color",
    "lch": "css-modern-color",
    "oklab": "css-modern-color",
    "oklch": "css-modern-color",
}


_UNITS = frozenset(["ch", "cm", "em", "ex", "in", "mm", "pc", "pt", "px", "rem", "vh", "vmax", "vmin", "vw"])


_KEYWORDS = {
    "initial": "css-unit-initial",
    "fit-content": "css-intrinsic-size",
    "min-content": "css-intrinsic-size",
    "max-content": "css-intrinsic-size",
    "system-ui": "css-sytem-ui",  # sic: caniemail's slug
    "ui-serif": "css-sytem-ui",
    "ui-sans-serif": "css-sytem-ui",
    "ui-rounded": "css-sytem-ui",
    "ui-monospace": "css-sytem-ui",
}


_DISPLAY = {
    "flex": "css-display-flex",
    "inline-flex": "css-display-flex",
    "grid": "css-display-grid",
    "inline-grid": "css-display-grid",
    "none": "css-display-none",
}


_MEDIA_FEATURES = {
    "prefers-color-scheme": "css-at-media-prefers-color-scheme",
    "prefers-reduced-motion": "css-at-media-prefers-reduced-motion",
    "orientation": "css-at-media-orientation",
    "hover": "css-at-media-hover",
    "resolution": "css-at-media-device-pixel-ratio",
    "min-resolution": "css-at-media-device-pixel-ratio",
    "max-resolution": "css-at-media-device-pixel-ratio",
}


_AT_RULES = {
    "media": "css-at-media",
    "font-face": "css-at-font-face",
    "import": "css-at-import",
    "keyframes": "css-at-keyframes",
    "supports": "css-at-supports",
}


_PSEUDO_ELEMENTS = frozenset(("before", "after", "first-letter", "first-line", "marker", "placeholder"))


_VENDOR = re.compile(r"^-(?:webkit|moz|ms|o)-")


def _property_slug(name: str, slugs: frozenset[str]) -> str | None:
    if name in _PROPERTIES:
        return _PROPERTIES[name]
    bare = _VENDOR.sub("", name)
    if f"css-{bare}" in slugs:
        return f"css-{bare}"
    for pattern, slug in _PREFIX_RULES:
        if pattern.match(bare):
            if "{}" in slug:
                axis = bare.split("-")[1] if bare.startswith(("margin-", "padding-")) else bare.split("-")[0]
                slug = slug.format(axis)
            return slug
    return None


def _nests_deeper(nodes: list[tinycss2.ast.Node], limit: int) -> bool:
    """Whether blocks in ``nodes`` nest more than ``limit`` levels (found without recursion)."""
    stack = [(nodes, 0)]
    while stack:
        level, depth = stack.pop()
        for node in level:
            if isinstance(node, tinycss2.ast.FunctionBlock):
                inner = node.arguments
            elif isinstance(
                node, tinycss2.ast.ParenthesesBlock | tinycss2.ast.SquareBracketsBlock | tinycss2.ast.CurlyBracketsBlock
            ):
                inner = node.content
            else:
                continue
            if inner:
                if depth + 1 > limit:
                    return True
                stack.append((inner, depth + 1))
    return False


def _serialize(nodes: list[tinycss2.ast.Node]) -> str:
    """``tinycss2.serialize(nodes)``, or "" when they nest too deep to serialize safely."""
    return "" if _nests_deeper(nodes, MAX_CSS_DEPTH) else tinycss2.serialize(nodes)


def _value_features(tokens: list[tinycss2.ast.Node], out: list[tuple[str, str]], depth: int = 0) -> None:
    if depth >= MAX_CSS_DEPTH:
        return
    for token in tokens:
        if isinstance(token, tinycss2.ast.FunctionBlock):
            name = token.lower_name
            if name in _FUNCTIONS:
                out.append((_FUNCTIONS[name], f"{name}()"))
            _value_features(token.arguments, out, depth + 1)
        elif isinstance(token, tinycss2.ast.URLToken):
            out.append(("@image", token.value))
        elif isinstance(token, tinycss2.ast.DimensionToken):
            if token.lower_unit in _UNITS:
                out.append((f"css-unit-{token.lower_unit}", token.lower_unit))
        elif isinstance(token, tinycss2.ast.PercentageToken):
            out.append(("css-unit-percent", "%"))
        elif isinstance(token, tinycss2.ast.IdentToken):
            if token.lower_value in _KEYWORDS:
                out.append((_KEYWORDS[token.lower_value], token.lower_value))
        elif isinstance(token, tinycss2.ast.ParenthesesBlock | tinycss2.ast.SquareBracketsBlock):
            _value_features(token.content, out, depth + 1)


def _declarations(
    nodes: list[tinycss2.ast.Node], slugs: frozenset[str], out: list[tuple[str, str]], depth: int = 0
) -> None:
    if depth >= MAX_CSS_DEPTH:
        return
    for node in nodes:
        if isinstance(node, tinycss2.ast.Declaration):
            name = node.lower_name
            if name.startswith("--"):
                out.append(("css-variables", name))
            else:
                slug = _property_slug(name, slugs)
                if slug:
                    out.append((slug, name))
            if node.important:
                out.append(("css-important", f"{name}: … !important"))
            if name == "display":
                value = _serialize(node.value).strip().lower()
                if value in _DISPLAY:
                    out.append((_DISPLAY[value], f"display: {value}"))
            _value_features(node.value, out)
        elif isinstance(node, tinycss2.ast.Comment):
            out.append(("css-comments", "/* */"))
        elif isinstance(node, tinycss2.ast.QualifiedRule):
            out.append(("css-nesting", _serialize(node.prelude).strip()[:60]))
            _selector(node.prelude, out)
            _declarations(_block(node.content), slugs, out, depth + 1)


def _block(content: list[tinycss2.ast.Node] | None) -> list[tinycss2.ast.Node]:
    if not content:
        return []
    return list(tinycss2.parse_blocks_contents(content, skip_comments=False, skip_whitespace=True))


def _selector(prelude: list[tinycss2.ast.Node], out: list[tuple[str, str]]) -> None:
    """Selector features, read from the prelude's tokens: combinators, simple selectors, pseudo-classes."""
    text = _serialize(prelude).strip()[:80]
    simple = 0  # simple selectors in the current compound selector
    previous: tinycss2.ast.Node | None = None
    tokens = list(prelude)
    i = 0

    def end_compound() -> None:
        nonlocal simple
        if simple > 1:
            out.append(("css-selector-chaining", text))
        simple = 0

    while i < len(tokens):
        token = tokens[i]
        if isinstance(token, tinycss2.ast.WhitespaceToken):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            is_combinator = isinstance(nxt, tinycss2.ast.LiteralToken) and nxt.value in ">+~,"
            after_combinator = isinstance(previous, tinycss2.ast.LiteralToken) and previous.value in ">+~,"
            if nxt is not None and previous is not None and not is_combinator and not after_combinator:
                out.append(("css-selector-descendant", text))
                end_compound()
            i += 1
            continue
        if isinstance(token, tinycss2.ast.LiteralToken):
            value = token.value
            if value == ",":
                out.append(("css-selector-grouping", text))
                end_compound()
            elif value in (">", "+", "~"):
                slug = {
                    ">": "css-selector-child",
                    "+": "css-selector-adjacent-sibling",
                    "~": "css-selector-general-sibling",
                }[value]
                out.append((slug, text))
                end_compound()
            elif value == "*":
                out.append(("css-selector-universal", text))
                simple += 1
            elif value == ".":
                out.append(("css-selector-class", text))
                simple += 1
                i += 1  # the class name
            elif value == "&":
                out.append(("css-nesting", text))
            elif value == ":":
                element = i + 1 < len(tokens) and isinstance(tokens[i + 1], tinycss2.ast.LiteralToken)
                if element:
                    i += 1  # "::"
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                name = ""
                if isinstance(nxt, tinycss2.ast.IdentToken):
                    name = nxt.lower_value
                elif isinstance(nxt, tinycss2.ast.FunctionBlock):
                    name = nxt.lower_name
                if name:
                    kind = "element" if element or name in _PSEUDO_ELEMENTS else "class"
                    out.append((f"css-pseudo-{kind}-{name}", f":{name}"))
                    simple += 1
                    i += 1
        elif isinstance(token, tinycss2.ast.HashToken):
            out.append(("css-selector-id", text))
            simple += 1
        elif isinstance(token, tinycss2.ast.IdentToken):
            out.append(("css-selector-type", text))
            simple += 1
        elif isinstance(token, tinycss2.ast.SquareBracketsBlock):
            out.append(("css-selector-attribute", text))
            simple += 1
        previous = token
        i += 1
    end_compound()


def _rules(nodes: list[tinycss2.ast.Node], slugs: frozenset[str], out: list[tuple[str, str]], depth: int = 0) -> None:
    if depth >= MAX_CSS_DEPTH:
        return
    for node in nodes:
        if isinstance(node, tinycss2.ast.QualifiedRule):
            _selector(node.prelude, out)
            _declarations(_block(node.content), slugs, out, depth + 1)
        elif isinstance(node, tinycss2.ast.AtRule):
            name = _VENDOR.sub("", node.lower_at_keyword)
            if name in _AT_RULES:
                out.append((_AT_RULES[name], f"@{name}"))
            if name == "media":
                for token in node.prelude:
                    for ident in _idents(token, depth + 1):
                        if ident in _MEDIA_FEATURES or ident.endswith("device-pixel-ratio"):
                            slug = _MEDIA_FEATURES.get(ident, "css-at-media-device-pixel-ratio")
                            out.append((slug, f"@media ({ident})"))
            if name in ("media", "supports", "document"):
                _rules(
                    tinycss2.parse_rule_list(node.content or [], skip_comments=False, skip_whitespace=True),
                    slugs,
                    out,
                    depth + 1,
                )
            # @font-face's descriptors and @keyframes' steps are the at-rule's own, not features.
        elif isinstance(node, tinycss2.ast.Comment):
            out.append(("css-comments", "/* */"))


def _idents(token: tinycss2.ast.Node, depth: int) -> list[str]:
    if isinstance(token, tinycss2.ast.IdentToken):
        return [token.lower_value]
    if isinstance(token, tinycss2.ast.ParenthesesBlock) and depth < MAX_CSS_DEPTH:
        return [ident for inner in token.content for ident in _idents(inner, depth + 1)]
    return []


@functools.lru_cache(maxsize=4096)
def inline_style(style: str) -> tuple[tuple[str, str], ...]:
    """Features of a ``style`` attribute; cached because mail repeats the same inline styles."""
    out: list[tuple[str, str]] = []
    nodes = tinycss2.parse_blocks_contents(style, skip_comments=False, skip_whitespace=True)
    _declarations(list(nodes), _slugs(), out)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def stylesheet(css: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    _rules(tinycss2.parse_stylesheet(css, skip_comments=False, skip_whitespace=True), _slugs(), out)
    return tuple(out)


def clear_caches() -> None:
    """Forget the style sheets seen so far (the bench measures a message's report from cold)."""
    inline_style.cache_clear()
    stylesheet.cache_clear()


@functools.cache
def _slugs() -> frozenset[str]:
    return frozenset(load().features)
