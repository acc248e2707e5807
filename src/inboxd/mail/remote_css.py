"""CSS that would fetch, taken out of a message's style sheets and ``style`` attributes: pure, no I/O.

The CSS is read as the browser reads it, with tinycss2's tokenizer, so an escape cannot hide a fetch:
``\\75 rl(//x)`` and ``u\\72 l("//x")`` are the ``url`` they decode to, and ``url(\\2f\\2f x)`` names
``//x``. Taken out: ``url(...)`` tokens and functions, the functions that take a URL as a string
(``src()``, ``image()``, ``image-set()``, ``cross-fade()``) when they name one, and every ``@import``
up to its ``;``. A ``data:`` URL, a fragment (``#id``) or a ``cid:`` URL stays: it fetches nothing.
Each taken-out value becomes ``none``. Blocks nested deeper than ``MAX_CSS_DEPTH`` are emptied, so
the walk is bounded and never recursive beyond it. Linear in the length of the CSS.
"""

from __future__ import annotations

import re

import tinycss2
import tinycss2.ast

__all__ = ["MAX_CSS_DEPTH", "strip_remote_css"]


# Real mail nests CSS a handful of levels (a rule in @media in @supports, calc() in var()); what
# lies deeper in a view's CSS is emptied rather than walked.
MAX_CSS_DEPTH = 32

_FETCHING = frozenset(("url", "src", "image", "image-set", "-webkit-image-set", "cross-fade", "-webkit-cross-fade"))
# What a url() may name without a fetch. Everything else goes, a relative URL too (it would be
# fetched from the dashboard's origin); only what names another host counts as remote content.
_LOCAL = re.compile(r"\s*(?:data:|cid:|#)", re.IGNORECASE)
_REMOTE = re.compile(r"\s*(?:[a-z][a-z0-9+.-]*:)?[/\\]{2}|\s*https?:", re.IGNORECASE)
# Without one of these characters no url(), function or at-rule can be written.
_MAY_FETCH = re.compile(r"[(@\\]")


def strip_remote_css(css: str) -> tuple[str, int]:
    """``css`` (a style sheet or a ``style`` attribute) without what would fetch, and how many of the
    values taken out named another host. ``css`` comes back unchanged when nothing is taken out."""
    if not _MAY_FETCH.search(css):
        return css, 0
    nodes = tinycss2.parse_component_value_list(css, skip_comments=False)
    walk = _Walk()
    kept = walk.level(nodes, 0)
    if not walk.changed:
        return css, 0
    return tinycss2.serialize(kept), walk.remote


class _Walk:
    def __init__(self) -> None:
        self.changed = False
        self.remote = 0  # values taken out that named another host

    def level(self, nodes: list[tinycss2.ast.Node], depth: int) -> list[tinycss2.ast.Node]:
        """The nodes of one level, with what fetches replaced and the blocks in them walked."""
        out: list[tinycss2.ast.Node] = []
        skipping_import = False
        for node in nodes:
            if skipping_import:
                if isinstance(node, tinycss2.ast.LiteralToken) and node.value == ";":
                    skipping_import = False
                continue
            if isinstance(node, tinycss2.ast.AtKeywordToken) and node.lower_value == "import":
                skipping_import = True
                self.changed = True
                self.remote += 1
                continue
            if isinstance(node, tinycss2.ast.URLToken):
                out.append(self._url(node, node.value))
            elif isinstance(node, tinycss2.ast.FunctionBlock):
                out.append(self._function(node, depth))
            elif isinstance(
                node, tinycss2.ast.ParenthesesBlock | tinycss2.ast.SquareBracketsBlock | tinycss2.ast.CurlyBracketsBlock
            ):
                node.content = self._inner(node.content, depth)
                out.append(node)
            else:
                out.append(node)
        return out

    def _inner(self, nodes: list[tinycss2.ast.Node], depth: int) -> list[tinycss2.ast.Node]:
        if depth + 1 >= MAX_CSS_DEPTH:
            if nodes:
                self.changed = True
            return []
        return self.level(nodes, depth + 1)

    def _url(self, node: tinycss2.ast.Node, value: str) -> tinycss2.ast.Node:
        if _LOCAL.match(value):
            return node
        self.changed = True
        self.remote += bool(_REMOTE.match(value))
        return tinycss2.ast.IdentToken(node.source_line, node.source_column, "none")

    def _function(self, node: tinycss2.ast.FunctionBlock, depth: int) -> tinycss2.ast.Node:
        if node.lower_name in _FETCHING:
            named = _named_url(node.arguments)
            if named is not None:
                return self._url(node, named)
        node.arguments = self._inner(node.arguments, depth)
        return node


def _named_url(arguments: list[tinycss2.ast.Node]) -> str | None:
    """The first URL a fetching function names among its arguments (strings, url tokens, url() in
    them, to MAX_CSS_DEPTH levels), the non-local one when there is one; None when it names none."""
    first: str | None = None
    stack: list[tuple[list[tinycss2.ast.Node], int]] = [(arguments, 0)]
    while stack:
        nodes, depth = stack.pop()
        for node in nodes:
            value: str | None = None
            if isinstance(node, tinycss2.ast.StringToken | tinycss2.ast.URLToken):
                value = node.value
            elif isinstance(node, tinycss2.ast.FunctionBlock) and depth < MAX_CSS_DEPTH:
                stack.append((node.arguments, depth + 1))
            elif isinstance(node, tinycss2.ast.ParenthesesBlock) and depth < MAX_CSS_DEPTH:
                stack.append((node.content, depth + 1))
            if value is not None:
                if not _LOCAL.match(value):
                    return value
                first = first if first is not None else value
    return first
