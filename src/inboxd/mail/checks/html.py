"""HTML compatibility: which caniemail features an HTML body uses, and how well each client supports them.

The markup is parsed with selectolax (the Lexbor HTML5 parser), the style sheets of ``<style>`` elements
and ``style`` attributes with tinycss2 (``mail/checks/css.py``). What is detected, named by caniemail's slugs:

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

import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec
from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks.caniemail import CaniemailData, Feature, load
from inboxd.mail.checks.css import inline_style, stylesheet
from inboxd.mail.checks.report import ClientResult, ClientSupport, Finding, HtmlFeature, HtmlPart, verdict_of

__all__ = ["detect_features", "judge_html", "parse_html"]

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

_COLOR_SCHEME_META = ("color-scheme", "supported-color-schemes")
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
                _merge_css(found, stylesheet(css))
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
                    _merge_css(found, inline_style(style))
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
