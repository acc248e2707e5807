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

What counts and how loudly is decided by ``mail/checks/impact.py``: features whose loss the reader
cannot see (a bare ``<body>``, ``lang``, ``role``, the doctype, ``target``) are not counted; a partial
result whose notes name only values the message does not use counts as supported; clients caniemail
tested on too few features are not judged. A client is judged on a message when caniemail tested it
on at least half of the message's counted features; its support is the mean of its support of each of
them (supported 1, partial 0.5, unsupported 0; features it was never tested on are left out); the
overall figure is the mean over the judged clients, each counted once (caniemail's data has no market
share). Every count in the part (the clients' list, the overall figure, the findings' "k of N") is over
the same judged clients. A feature a judged client lacks is a warning when its loss moves or hides
content (``impact.BREAKING``), information otherwise.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec
from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks.caniemail import CaniemailData, Feature, load
from inboxd.mail.checks.css import inline_style, stylesheet
from inboxd.mail.checks.impact import BREAKING, MIN_CLIENT_FEATURES, NOT_COUNTED, NoteConditions
from inboxd.mail.checks.report import ClientResult, ClientSupport, Finding, HtmlFeature, HtmlPart, verdict_of
from inboxd.mail.html_guard import guard_html

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
# Attributes of <body> that change nothing drawn: a body with only these is a bare body.
_HIDDEN = re.compile(r"(?:^|[;\s])display\s*:\s*none\b", re.IGNORECASE)
_QUIET_BODY_ATTRIBUTES = frozenset(("lang", "dir", "role", "xml:lang", "xmlns"))
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
    css: list[str] = field(default_factory=list)  # the CSS analysed, for impact's notes on values

    def take_css(self, css: str) -> str:
        """What of ``css`` is analysed: all of it until the message's CSS budget is spent, then a
        prefix (tinycss2 reads a cut sheet as the browser would), then nothing."""
        allowed = css[: max(self.css_left, 0)]
        self.css_left -= len(css)
        if len(allowed) < len(css):
            self.truncated = True
        if allowed:
            self.css.append(allowed)
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
    # Cut to the size cap and flattened past the depth browsers keep (mail/html_guard.py): Lexbor's
    # time grows with depth times size, so 200 KB of nested <div> took seconds.
    return LexborHTMLParser(guard_html(html, max_chars=_MAX_HTML).html)


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
    parsed = tree if tree is not None else parse_html(html)
    root = parsed.root
    if root is None:
        return found
    body = parsed.body
    if _BODY.search(html) and body is not None:
        # A bare <body> draws nothing a client could drop; one with a style, a background or a class does.
        drawn = sorted(
            name.lower()
            for name in body.attributes
            if name.lower() not in _QUIET_BODY_ATTRIBUTES and not name.lower().startswith("aria-")
        )
        if drawn:
            found.add("html-body", f"<body {drawn[0]}>")
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
            if name == "dir" and (value or "").strip().lower() != "rtl":
                continue  # dir=ltr is how the text runs anyway
            if name in _ATTRIBUTES and not (name in ("width", "height") and tag in ("svg", "rect", "circle")):
                found.add(_ATTRIBUTES[name], f"<{tag} {name}>")
            if name == "style" and value:
                style = found.take_css(value)
                if style:
                    features = inline_style(style)
                    if _HIDDEN.search(style):
                        # Drawn only by a client that drops display:none (which counts): the rest of
                        # its style (a preheader's opacity, max-height...) is never seen elsewhere.
                        features = tuple(f for f in features if f[0] in ("css-display", "css-display-none"))
                    _merge_css(found, features)
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
    notes = NoteConditions(";".join(found.css))
    features = [
        data.features[s] for s in found.counts if s in data.features and s not in NOT_COUNTED and notes.draws(s)
    ]
    part = _part(data, features, found, notes)
    if not found.truncated:
        return part
    note = Finding(
        severity="info",
        code="html_partly_analysed",
        message=f"Only the first {_MAX_HTML // 1024} KB of markup and {_MAX_CSS // 1024} KB of CSS were analysed.",
        where="text/html",
    )
    return msgspec.structs.replace(part, findings=[*part.findings, note])


def _judged(data: CaniemailData, features: list[Feature]) -> set[int]:
    """The clients judged on these features: tested by caniemail on enough features overall, and on
    at least half of these (so no client's figure rests on one feature of many)."""
    tested: Counter[int] = Counter(r.client for f in features for r in f.results)
    return {
        client
        for client, count in tested.items()
        if data.tested[client] >= MIN_CLIENT_FEATURES and 2 * count >= len(features)
    }


def _part(data: CaniemailData, features: list[Feature], found: _Found, notes: NoteConditions) -> HtmlPart:
    judged = _judged(data, features)
    scores: dict[int, list[float]] = {client: [] for client in judged}
    unsupported: Counter[int] = Counter()
    partial: Counter[int] = Counter()
    out_features: list[HtmlFeature] = []
    findings: list[tuple[float, Finding]] = []
    for feature in features:
        limited: list[ClientResult] = []
        no: list[str] = []
        some: list[str] = []
        values: list[float] = []
        for result in feature.results:
            if result.client not in judged:
                continue
            # A partial result whose notes name only values the message does not use drops nothing of it.
            support = result.support
            if support == "partial" and not notes.applies(result.notes):
                support = "supported"
            value = {"supported": 1.0, "partial": 0.5, "unsupported": 0.0}[support]
            values.append(value)
            scores[result.client].append(value)
            if support == "supported":
                continue
            family, platform, name = data.clients[result.client]
            (no if support == "unsupported" else some).append(name)
            (unsupported if support == "unsupported" else partial)[result.client] += 1
            limited.append(
                ClientResult(
                    client=family, platform=platform, version=result.version, support=support, notes=list(result.notes)
                )
            )
        support_pct = round(100.0 * sum(values) / len(values), 1) if values else 100.0
        out_features.append(
            HtmlFeature(
                slug=feature.slug,
                title=feature.title,
                url=feature.url,
                category=feature.category,
                count=found.counts[feature.slug],
                where=found.where.get(feature.slug, []),
                support=support_pct,
                results=limited,
            )
        )
        finding = _finding(feature, found, no=no, some=some, clients=len(judged))
        if finding is not None:
            findings.append((support_pct, finding))
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
    ordered = [f for _, f in sorted(findings, key=lambda pair: (_SEVERITY_ORDER[pair[1].severity], pair[0]))]
    overall = round(sum(c.support for c in clients) / len(clients), 1) if clients else 100.0
    return HtmlPart(
        verdict=verdict_of(ordered),
        support=overall,
        clients=clients,
        features=out_features,
        findings=ordered,
        data_version=data.version,
    )


_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _finding(feature: Feature, found: _Found, *, no: list[str], some: list[str], clients: int) -> Finding | None:
    """What the part says of one feature: a warning when a judged client lacks it and its loss moves
    or hides content, information when the client only shows the message plainer or in part."""
    place = (found.where.get(feature.slug) or [feature.title])[0]
    if no:
        breaking = feature.slug in BREAKING
        return Finding(
            severity="warning" if breaking else "info",
            code="html_unsupported",
            message=f"{feature.title} is not supported by {len(no)} of the {clients} clients judged: {_names(no)}"
            + (
                ". Their readers see the content moved or missing."
                if breaking
                else ". They show the message without it."
            ),
            where=place,
        )
    if some:
        return Finding(
            severity="info",
            code="html_partial",
            message=f"{feature.title} is only partly supported by {len(some)} of the {clients} clients judged: "
            + _names(some),
            where=place,
        )
    return None


def _names(names: list[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
