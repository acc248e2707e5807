"""Every link and image URL of a message, for the link checker: anchors and images of the HTML body,
URLs of the text body, and the http(s) URLs of ``List-Unsubscribe``. Pure: nothing is fetched here."""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks.report import LinkItem, LinkKind, LinkSource
from inboxd.mail.codes import find_links
from inboxd.mail.parse import ParsedMessage

__all__ = ["extract_links", "header_values", "list_unsubscribe_urls"]

_HTTP = re.compile(r"^https?://\S", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)""", re.IGNORECASE)
_ANGLE = re.compile(r"<([^<>]*)>")
# A message with more URLs than this is judged on its first ones: the checker's work stays bounded.
_MAX_ITEMS = 500


def header_values(parsed: ParsedMessage, name: str) -> list[str]:
    """The values of every top-level header called ``name`` (any case), decoded, in order."""
    lower = name.lower()
    return [value for header, value in parsed.headers if header.lower() == lower]


def list_unsubscribe_urls(parsed: ParsedMessage) -> list[str]:
    """The URLs of ``List-Unsubscribe`` (RFC 2369: each in angle brackets), mailto: included."""
    return [url.strip() for value in header_values(parsed, "List-Unsubscribe") for url in _ANGLE.findall(value)]


def _image_urls(node_tag: str, attributes: dict[str, str | None]) -> list[str]:
    urls: list[str] = []
    src = attributes.get("src")
    if src and (node_tag == "img" or (node_tag == "input" and (attributes.get("type") or "").lower() == "image")):
        urls.append(src)
    background = attributes.get("background")
    if background:
        urls.append(background)
    srcset = attributes.get("srcset")
    if srcset:
        urls.extend(part.strip().split(" ", 1)[0] for part in srcset.split(","))
    style = attributes.get("style")
    if style and "url(" in style.lower():
        urls.extend(_CSS_URL.findall(style))
    return urls


def extract_links(parsed: ParsedMessage, tree: LexborHTMLParser | None = None) -> list[LinkItem]:
    """The message's http(s) links and images in document order (HTML body, text body, then
    List-Unsubscribe), each (URL, kind) once. ``tree`` is the parsed HTML body when the caller has it."""
    seen: set[tuple[str, LinkKind]] = set()
    items: list[LinkItem] = []

    def add(url: str, kind: LinkKind, source: LinkSource) -> None:
        url = url.strip()
        if _HTTP.match(url) and (url, kind) not in seen and len(items) < _MAX_ITEMS:
            seen.add((url, kind))
            items.append(LinkItem(url=url, kind=kind, source=source))

    if parsed.html_body:
        if tree is None:
            tree = LexborHTMLParser(parsed.html_body)
        root = tree.root
        for node in root.traverse(include_text=False) if root is not None else ():
            tag = node.tag or ""
            attributes = node.attributes
            if tag in ("a", "area"):
                add(attributes.get("href") or "", "link", "html")
            for url in _image_urls(tag, attributes):
                add(url, "image", "html")
            if tag == "style":
                for url in _CSS_URL.findall(node.text(deep=True)):
                    add(url, "image", "html")
        # Bare URLs in the HTML's text are links too (codes.find_links reads them as a reader would).
        body = tree.body
        if body is not None:
            for link in find_links(body.text(separator=" "), ""):
                add(link.url, "link", "html")
    for link in find_links(parsed.text_body, ""):
        add(link.url, "link", "text")
    for url in list_unsubscribe_urls(parsed):
        add(url, "link", "list-unsubscribe")
    return items
