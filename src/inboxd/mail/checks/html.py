"""HTML compatibility: which caniemail features an HTML body uses, and how well each client supports them.

The markup is parsed with selectolax (the Lexbor HTML5 parser), the style sheets of ``<style>`` elements
and ``style`` attributes with tinycss2. What is detected, named by caniemail's slugs:

* elements (``html-video``, ``html-lists`` for ul/ol/dl, ``html-semantics`` for article/section...,
  ``html-input-*`` by type), attributes (``html-align``, ``html-srcset``, ``html-aria-*``...), anchor and
  mailto links, ``<meta name="color-scheme">``, comments and the doctype;
* image formats (``image-webp``, ``image-base64``...) of ``src``, ``srcset``, ``background`` and CSS
  ``url()``;
* CSS properties (longhands map to their shorthand's feature: ``margin-top`` is ``css-margin``),
  values caniemail tests (``display: flex``, gradients, ``calc()``, ``rgb()``, units, ``!important``,
  custom properties), at-rules (``@media`` and its features such as ``prefers-color-scheme``,
  ``@font-face``, ``@import``, ``@keyframes``, ``@supports``), selectors (class, id, attribute,
  combinators, pseudo-classes and pseudo-elements) and comments.

A client's support is the mean of its support of each feature the message uses (supported 1, partial
0.5, unsupported 0; features it was never tested on are left out); the overall figure is the mean over
the clients, each counted once: caniemail's data has no market share (Mailpit counts each tested
version of each client and takes the worst feature weighted by its share of the message's elements).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec
import tinycss2
import tinycss2.ast
from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks.caniemail import CaniemailData, Feature, load
from inboxd.mail.checks.report import ClientResult, ClientSupport, Finding, HtmlFeature, HtmlPart, verdict_of

__all__ = ["clear_caches", "detect_features", "judge_html", "parse_html"]

_TAGS = {
    tag: f"html-{tag}"
    for tag in [
        "abbr",
        "acronym",
        "address",
        "audio",
        "base",
        "bdi",
        "blockquote",
        "code",
        "del",
        "dfn",
        "dialog",
        "div",
        "form",
        "hr",
        "img",
        "link",
        "marquee",
        "meter",
        "object",
        "p",
        "picture",
        "pre",
        "progress",
        "rp",
        "rt",
        "ruby",
        "select",
        "small",
        "span",
        "strike",
        "strong",
        "style",
        "svg",
        "table",
        "textarea",
        "video",
        "wbr",
    ]
}
_TAGS.update({f"h{n}": "html-h1-h6" for n in range(1, 7)})
_TAGS.update(dict.fromkeys(("ul", "ol", "dl", "li", "dt", "dd"), "html-lists"))
_TAGS.update(
    dict.fromkeys(
        [
            "article",
            "aside",
            "details",
            "figcaption",
            "figure",
            "footer",
            "header",
            "main",
            "mark",
            "nav",
            "section",
            "summary",
            "time",
        ],
        "html-semantics",
    )
)
_TAGS.update({"map": "html-image-maps", "area": "html-image-maps"})
_ATTRIBUTES = {
    name: f"html-{name}"
    for name in [
        "align",
        "background",
        "cellpadding",
        "cellspacing",
        "dir",
        "height",
        "width",
        "hidden",
        "lang",
        "loading",
        "popover",
        "required",
        "role",
        "srcset",
        "target",
        "valign",
        "aria-describedby",
        "aria-hidden",
        "aria-label",
        "aria-labelledby",
        "aria-live",
    ]
}
_ATTRIBUTES["inert"] = "css-inert-attribute"
_ATTRIBUTES["loading"] = "html-loading-attribute"
_INPUT_TYPES = frozenset(("checkbox", "hidden", "radio", "reset", "submit", "text"))
_IMAGE_EXTENSIONS = {
    "apng": "image-apng",
    "avif": "image-avif",
    "bmp": "image-bmp",
    "gif": "image-gif",
    "hdr": "image-hdr",
    "heif": "image-heif",
    "heic": "image-heif",
    "ico": "image-ico",
    "jpg": "image-jpg",
    "jpeg": "image-jpg",
    "mp4": "image-mp4",
    "png": "image-png",
    "svg": "image-svg",
    "tif": "image-tiff",
    "tiff": "image-tiff",
    "webp": "image-webp",
}
_IMAGE_MIME = {"jpeg": "jpg", "svg+xml": "svg", "x-icon": "ico", "vnd.microsoft.icon": "ico"}
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{2,5})(?:[?#]|$)")
_DATA_URL = re.compile(r"data:image/([\w.+-]+)", re.IGNORECASE)

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
_COLOR_SCHEME_META = ("color-scheme", "supported-color-schemes")
_VENDOR = re.compile(r"^-(?:webkit|moz|ms|o)-")
_DOCTYPE = re.compile(r"^\s*<!doctype", re.IGNORECASE)
_BODY = re.compile(r"<body[\s>]", re.IGNORECASE)
_MAX_WHERE = 3
# Markup and CSS past these are not analysed: real mail stays far below them (Gmail clips at 102 KB)
# and the caps bound the work a hostile body asks for (CSS costs about 3 ms a KB here, so 128 KB ~0.4 s).
_MAX_HTML = 1024 * 1024
_MAX_CSS = 128 * 1024


@dataclass(slots=True)
class _Found:
    counts: Counter[str] = field(default_factory=Counter)
    where: dict[str, list[str]] = field(default_factory=dict)
    css_left: int = _MAX_CSS  # characters of CSS still to analyse
    truncated: bool = False

    def take_css(self, css: str) -> str:
        """What of ``css`` is analysed: all of it until the message's CSS budget is spent, then a
        prefix (tinycss2 reads a cut sheet as the browser would), then nothing."""
        allowed = css[: max(self.css_left, 0)]
        self.css_left -= len(css)
        if len(allowed) < len(css):
            self.truncated = True
        return allowed

    def add(self, slug: str, where: str, count: int = 1) -> None:
        self.counts[slug] += count
        places = self.where.setdefault(slug, [])
        if len(places) < _MAX_WHERE and where not in places:
            places.append(where)

    def merge(self, found: tuple[tuple[str, str], ...]) -> None:
        for slug, where in found:
            self.add(slug, where)


def _image(url: str, found: _Found, where: str) -> None:
    url = url.strip()
    data = _DATA_URL.match(url)
    if data:
        found.add("image-base64", where)
        kind = data.group(1).lower()
        slug = _IMAGE_EXTENSIONS.get(_IMAGE_MIME.get(kind, kind))
    else:
        match = _EXTENSION.search(url.split("#", 1)[0])
        slug = _IMAGE_EXTENSIONS.get(match.group(1).lower()) if match else None
    if slug:
        found.add(slug, where)


# --- CSS ------------------------------------------------------------------------------------------------


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


def _value_features(tokens: list[tinycss2.ast.Node], out: list[tuple[str, str]]) -> None:
    for token in tokens:
        if isinstance(token, tinycss2.ast.FunctionBlock):
            name = token.lower_name
            if name in _FUNCTIONS:
                out.append((_FUNCTIONS[name], f"{name}()"))
            _value_features(token.arguments, out)
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
            _value_features(token.content, out)


def _declarations(nodes: list[tinycss2.ast.Node], slugs: frozenset[str], out: list[tuple[str, str]]) -> None:
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
                value = tinycss2.serialize(node.value).strip().lower()
                if value in _DISPLAY:
                    out.append((_DISPLAY[value], f"display: {value}"))
            _value_features(node.value, out)
        elif isinstance(node, tinycss2.ast.Comment):
            out.append(("css-comments", "/* */"))
        elif isinstance(node, tinycss2.ast.QualifiedRule):
            out.append(("css-nesting", tinycss2.serialize(node.prelude).strip()[:60]))
            _selector(node.prelude, out)
            _declarations(_block(node.content), slugs, out)


def _block(content: list[tinycss2.ast.Node] | None) -> list[tinycss2.ast.Node]:
    if not content:
        return []
    return list(tinycss2.parse_blocks_contents(content, skip_comments=False, skip_whitespace=True))


def _selector(prelude: list[tinycss2.ast.Node], out: list[tuple[str, str]]) -> None:
    """Selector features, read from the prelude's tokens: combinators, simple selectors, pseudo-classes."""
    text = tinycss2.serialize(prelude).strip()[:80]
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


def _rules(nodes: list[tinycss2.ast.Node], slugs: frozenset[str], out: list[tuple[str, str]]) -> None:
    for node in nodes:
        if isinstance(node, tinycss2.ast.QualifiedRule):
            _selector(node.prelude, out)
            _declarations(_block(node.content), slugs, out)
        elif isinstance(node, tinycss2.ast.AtRule):
            name = _VENDOR.sub("", node.lower_at_keyword)
            if name in _AT_RULES:
                out.append((_AT_RULES[name], f"@{name}"))
            if name == "media":
                for token in node.prelude:
                    for ident in _idents(token):
                        if ident in _MEDIA_FEATURES or ident.endswith("device-pixel-ratio"):
                            slug = _MEDIA_FEATURES.get(ident, "css-at-media-device-pixel-ratio")
                            out.append((slug, f"@media ({ident})"))
            if name in ("media", "supports", "document"):
                _rules(
                    tinycss2.parse_rule_list(node.content or [], skip_comments=False, skip_whitespace=True), slugs, out
                )
            # @font-face's descriptors and @keyframes' steps are the at-rule's own, not features.
        elif isinstance(node, tinycss2.ast.Comment):
            out.append(("css-comments", "/* */"))


def _idents(token: tinycss2.ast.Node) -> list[str]:
    if isinstance(token, tinycss2.ast.IdentToken):
        return [token.lower_value]
    if isinstance(token, tinycss2.ast.ParenthesesBlock):
        return [ident for inner in token.content for ident in _idents(inner)]
    return []


@functools.lru_cache(maxsize=4096)
def _inline_style(style: str) -> tuple[tuple[str, str], ...]:
    """Features of a ``style`` attribute; cached because mail repeats the same inline styles."""
    out: list[tuple[str, str]] = []
    nodes = tinycss2.parse_blocks_contents(style, skip_comments=False, skip_whitespace=True)
    _declarations(list(nodes), _slugs(), out)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _stylesheet(css: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    _rules(tinycss2.parse_stylesheet(css, skip_comments=False, skip_whitespace=True), _slugs(), out)
    return tuple(out)


def clear_caches() -> None:
    """Forget the style sheets seen so far (the bench measures a message's report from cold)."""
    _inline_style.cache_clear()
    _stylesheet.cache_clear()


@functools.cache
def _slugs() -> frozenset[str]:
    return frozenset(load().features)


def _merge_css(found: _Found, features: tuple[tuple[str, str], ...]) -> None:
    for slug, where in features:
        if slug == "@image":
            _image(where, found, f"url({where[:80]})")
        else:
            found.add(slug, where)


# --- HTML -----------------------------------------------------------------------------------------------


def parse_html(html: str) -> LexborHTMLParser:
    """The parsed body, shared by the HTML, content and link checks (one parse per report)."""
    return LexborHTMLParser(html[:_MAX_HTML])


def detect_features(html: str, tree: LexborHTMLParser | None = None) -> tuple[Counter[str], dict[str, list[str]]]:
    """The caniemail features ``html`` uses: how often each occurs, and up to three places."""
    found = _detect(html, tree)
    return found.counts, found.where


def _detect(html: str, tree: LexborHTMLParser | None) -> _Found:
    found = _Found()
    if len(html) > _MAX_HTML:
        found.truncated = True
        html = html[:_MAX_HTML]
    if _DOCTYPE.match(html):
        found.add("html-doctype", "<!DOCTYPE>")
    if _BODY.search(html):
        found.add("html-body", "<body>")
    root = (tree if tree is not None else parse_html(html)).root
    if root is None:
        return found
    for node in root.traverse(include_text=False):
        tag = node.tag or ""
        if tag == "-comment":
            found.add("html-comments", "<!-- -->")
            continue
        if tag in _TAGS:
            found.add(_TAGS[tag], f"<{tag}>")
        attributes = node.attributes
        if tag == "style":
            css = found.take_css(node.text(deep=True))
            if css:
                _merge_css(found, _stylesheet(css))
        elif tag == "input":
            kind = (attributes.get("type") or "text").strip().lower()
            if kind in _INPUT_TYPES:
                found.add(f"html-input-{kind}", f'<input type="{kind}">')
        elif tag == "button":
            kind = (attributes.get("type") or "submit").strip().lower()
            if kind in ("submit", "reset"):
                found.add(f"html-button-{kind}", f'<button type="{kind}">')
        elif tag == "a":
            href = (attributes.get("href") or "").strip()
            if href.startswith("#"):
                found.add("html-anchor-links", f'<a href="{href[:60]}">')
            elif href.lower().startswith("mailto:"):
                found.add("html-mailto-links", '<a href="mailto:…">')
        elif tag == "meta" and (attributes.get("name") or "").strip().lower() in _COLOR_SCHEME_META:
            found.add("html-meta-color-scheme", '<meta name="color-scheme">')
        for name, value in attributes.items():
            name = name.lower()
            if name in _ATTRIBUTES and not (name in ("width", "height") and tag in ("svg", "rect", "circle")):
                found.add(_ATTRIBUTES[name], f"<{tag} {name}>")
            if name == "style" and value:
                style = found.take_css(value)
                if style:
                    _merge_css(found, _inline_style(style))
            elif value and (
                (name == "src" and tag in ("img", "source", "input")) or (name == "background") or (name == "srcset")
            ):
                for candidate in value.split(",") if name == "srcset" else [value]:
                    url = candidate.strip().split(" ", 1)[0]
                    _image(url, found, f"<{tag} {name}>")
    return found


def judge_html(html: str, tree: LexborHTMLParser | None = None) -> HtmlPart:
    """The HTML compatibility part for an HTML body ("" when the message has none); ``tree`` is
    ``parse_html(html)`` when the caller has it already."""
    data = load()
    if not html.strip():
        return HtmlPart(verdict="skipped", data_version=data.version, reason="the message has no HTML body")
    found = _detect(html, tree)
    features = sorted((data.features[slug] for slug in found.counts if slug in data.features), key=lambda f: f.support)
    part = _part(data, features, found.counts, found.where)
    if not found.truncated:
        return part
    note = Finding(
        severity="info",
        code="html_partly_analysed",
        message=f"Only the first {_MAX_HTML // 1024} KB of markup and {_MAX_CSS // 1024} KB of CSS were analysed.",
        where="text/html",
    )
    return msgspec.structs.replace(part, findings=[*part.findings, note])


def _part(data: CaniemailData, features: list[Feature], counts: Counter[str], where: dict[str, list[str]]) -> HtmlPart:
    scores: dict[int, list[float]] = {}
    unsupported: Counter[int] = Counter()
    partial: Counter[int] = Counter()
    out_features: list[HtmlFeature] = []
    findings: list[Finding] = []
    for feature in features:
        limited = []
        for result in feature.results:
            scores.setdefault(result.client, []).append(result.score)
            if result.support == "unsupported":
                unsupported[result.client] += 1
            elif result.support == "partial":
                partial[result.client] += 1
            if result.support != "supported":
                family, platform, _ = data.clients[result.client]
                limited.append(
                    ClientResult(
                        client=family,
                        platform=platform,
                        version=result.version,
                        support=result.support,
                        notes=list(result.notes),
                    )
                )
        out_features.append(
            HtmlFeature(
                slug=feature.slug,
                title=feature.title,
                url=feature.url,
                category=feature.category,
                count=counts[feature.slug],
                where=where.get(feature.slug, []),
                support=feature.support,
                results=limited,
            )
        )
        no = [data.clients[r.client][2] for r in feature.results if r.support == "unsupported"]
        some = [data.clients[r.client][2] for r in feature.results if r.support == "partial"]
        place = (where.get(feature.slug) or [feature.title])[0]
        if no:
            findings.append(
                Finding(
                    severity="warning",
                    code="html_unsupported",
                    message=f"{feature.title} is not supported by {len(no)} of {len(feature.results)} clients: "
                    + _names(no),
                    where=place,
                )
            )
        elif some:
            findings.append(
                Finding(
                    severity="info",
                    code="html_partial",
                    message=f"{feature.title} is only partly supported by {len(some)} of {len(feature.results)} "
                    "clients: " + _names(some),
                    where=place,
                )
            )
    clients = [
        ClientSupport(
            client=data.clients[index][0],
            platform=data.clients[index][1],
            name=data.clients[index][2],
            support=round(100.0 * sum(values) / len(values), 1),
            tested=len(values),
            unsupported=unsupported[index],
            partial=partial[index],
        )
        for index, values in scores.items()
    ]
    clients.sort(key=lambda c: (c.support, c.name))
    out_features.sort(key=lambda f: (f.support, f.slug))
    overall = round(sum(c.support for c in clients) / len(clients), 1) if clients else 100.0
    return HtmlPart(
        verdict=verdict_of(findings),
        support=overall,
        clients=clients,
        features=out_features,
        findings=findings,
        data_version=data.version,
    )


def _names(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
