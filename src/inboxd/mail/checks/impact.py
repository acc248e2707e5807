"""What a client's lack of a caniemail feature does to what the reader sees (issue 34's rules).

Three rules, each a table here so docs/checks.md can quote them and a test can hold them to the data:

* ``NOT_COUNTED``: features whose loss changes nothing the reader sees (a bare ``<body>``, ``lang``,
  ``role``, the doctype, ``target``, ARIA...). They are not looked at at all.
* ``BREAKING``: features whose loss moves or hides content (``display:flex``, ``position``, images in
  a format the client cannot show...). A client that does not support one is a ``warning``; a
  client that lacks any other (round corners, a shadow, a web font) shows the message plainer, which
  is ``info``.
* ``PARTIAL_NOTES``: a ``partial`` result whose every note names values the message does not use
  (negative margins, ``rem`` font sizes, ``text-align: start``...) counts as supported for that
  message, since nothing it wrote is dropped. A note about elements, bugs or anything not in the
  table keeps the result partial.

And one rule on clients: ``MIN_CLIENT_FEATURES``, the number of features caniemail must have tested
a client on for it to be judged at all (below it a figure rests on one or two features).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = [
    "BREAKING",
    "COUNTED_WHEN",
    "DRAWN_ONLY_IF",
    "MIN_CLIENT_FEATURES",
    "NOT_COUNTED",
    "PARTIAL_NOTES",
    "NoteConditions",
]

# Why each is left out: the reader sees the same message whether the client keeps it or drops it.
NOT_COUNTED: dict[str, str] = {
    "html-doctype": "the doctype: clients that drop it render the same markup",
    "html-lang": "lang: read by screen readers and translators, not drawn",
    "html-role": "role: accessibility semantics, not drawn",
    "html-target": "target: where a link opens, not what the mail shows",
    "html-aria-describedby": "ARIA: accessibility semantics, not drawn",
    "html-aria-hidden": "ARIA: accessibility semantics, not drawn",
    "html-aria-label": "ARIA: accessibility semantics, not drawn",
    "html-aria-labelledby": "ARIA: accessibility semantics, not drawn",
    "html-aria-live": "ARIA: accessibility semantics, not drawn",
    "html-comments": "comments (Outlook's conditional comments are for Outlook alone)",
    "css-comments": "CSS comments",
    "html-loading-attribute": "loading=lazy: the image shows either way",
    "html-meta-color-scheme": "<meta name=color-scheme>: a hint (text colour without a background is checked instead)",
    "css-pseudo-class-hover": ":hover: only while the pointer is over it",
    "css-pseudo-class-active": ":active: only while clicked",
    "css-pseudo-class-focus": ":focus: only while focused",
    "css-pseudo-class-focus-visible": ":focus-visible: only while focused",
    "css-pseudo-class-focus-within": ":focus-within: only while focused",
}

# Counted only in some forms (the HTML check detects them only then).
COUNTED_WHEN: dict[str, str] = {
    "html-body": "a <body> with a style, a background, a class: any attribute but lang, dir and role",
    "html-dir": "dir=rtl (dir=ltr is how the text runs anyway)",
}

# Counted only when the message's CSS gives them a value that draws something: ``outline: none`` on an
# image or a link removes an outline nothing draws outside keyboard focus.
DRAWN_ONLY_IF: dict[str, str] = {
    "css-outline": r"outline(?:-[a-z]+)?\s*:\s*(?!(?:none|0|0px)\s*(?:[;\"'}<!]|$))",
}

# Features whose loss rearranges or hides content: a client without them shows a broken message.
BREAKING: frozenset[str] = frozenset(
    {
        # layout
        "css-display-flex",
        "css-display-grid",
        "css-position",
        "css-left-right-top-bottom",
        "css-inset",
        "css-float",
        "css-flex-direction",
        "css-flex-wrap",
        "css-justify-content",
        "css-align-items",
        "css-gap",
        "css-grid-template",
        "css-column-count",
        "css-column-layout-properties",
        "css-transform",
        "css-writing-mode",
        # content that does not show at all
        "html-video",
        "html-audio",
        "html-svg",
        "html-object",
        "html-form",
        "html-select",
        "html-textarea",
        "html-input-checkbox",
        "html-input-radio",
        "html-input-text",
        "html-input-submit",
        "html-input-reset",
        "html-button-submit",
        "html-button-reset",
        "html-dialog",
        "html-meter",
        "html-progress",
        "image-avif",
        "image-base64",
        "image-bmp",
        "image-hdr",
        "image-heif",
        "image-ico",
        "image-mp4",
        "image-svg",
        "image-tiff",
        "image-webp",
    }
)

# Below this many tested features (of caniemail's ~300) a client is not judged: in the data shipped,
# LaPoste.net Android and iOS and RainLoop (1), WP.pl (4), Free.fr (21), T-online.de (24) and
# Thunderbird Windows (34; Thunderbird macOS, the same engine, is judged). The next is tested on 232.
MIN_CLIENT_FEATURES = 50

_V = r"[^;\"'}<>]{0,120}"  # the rest of one declaration's value, bounded so a hostile sheet stays linear
_END = r"\s*(?:[;\"'}<!]|$)"
_UNCOMMON_DISPLAY = rf"display\s*:\s*(?!(?:none|block|inline-block|inline|table|table-row|table-cell){_END})"
_MULTI = r"[a-z-]{1,40}\s+[a-z#(-]"  # a shorthand given more than one value

# (a fragment of caniemail's note, the CSS that note is about or None when the note drops nothing).
PARTIAL_NOTES: tuple[tuple[str, str | None], ...] = (
    ("Negative values are not supported", rf"margin[a-z-]{{0,40}}\s*:{_V}-\.?\d"),
    ("`auto` value is not supported", rf"margin[a-z-]{{0,40}}\s*:{_V}\bauto\b"),
    ("`rem` values are not supported", rf"font(?:-size)?\s*:{_V}\drem\b"),
    ("`relative` and `percentage` size values", r"font-size\s*:\s*(?:[\d.]{1,20}(?:%|em|rem)|smaller|larger)"),
    ("`match-parent` value", r"match-parent"),
    ("Supports the vendor prefixed value", None),
    ("Flow-relative values `start` and `end`", r"text-align\s*:\s*(?:start|end)\b"),
    # the three notes of `display` that list values other than the basic ones
    ("`flow-root`, `inline-flex`", _UNCOMMON_DISPLAY),
    ("`flex`, `grid`, `flow-root`", _UNCOMMON_DISPLAY),
    ("`inline-flex`, `inline-grid`, `flex`", _UNCOMMON_DISPLAY),
    ("Two-value syntax", r"display\s*:\s*[a-z-]{1,40}\s+[a-z-]"),
    ("Only the first value is kept with the two-value syntax", r"display\s*:\s*[a-z-]{1,40}\s+[a-z-]"),
    ("Only supports `display:none`", r"display\s*:\s*(?!none\b)"),
    ("`display:none` does not inherit", r"display\s*:\s*none\b"),
    ("`<number>` values are not supported as per CSS Fonts Level 4", r"font-weight\s*:\s*(?![1-9]00\b)\d"),
    ("`<number>` values between 0 and 599", r"font-weight\s*:\s*(?!(?:400|700)\b)\d"),
    ("`normal` value is not supported", r"line-height\s*:\s*normal\b"),
    ("`em` and `px` units behave weirdly", r"line-height\s*:\s*[\d.]{1,20}(?:em|px)"),
    ("Big negative values", r"letter-spacing\s*:\s*-(?:[1-9][\d.]{0,20}(?:px|pt)|[\d.]{0,20}[1-9][\d.]{0,20}em)"),
    ("Values set in `em` are smaller", r"letter-spacing\s*:\s*-?[\d.]{1,20}em\b"),
    ("Not supported with multiple values", r"text-decoration\s*:\s*[a-z-]{1,40}\s+[a-z#-]"),
    ("`overline` is not supported", r"overline"),
    ("when written with long hand", r"text-decoration\s*:\s*[a-z-]{1,40}\s+[a-z#(-]"),
    ("Only supports the line property", rf"text-decoration\s*:\s*{_MULTI}|text-decoration-(?:style|color|thickness)"),
    ("slash `/` notation", rf"border-radius\s*:{_V}/"),
    ("`overflow-block` & `overflow-inline`", r"overflow-(?:block|inline)"),
    ("Cannot scroll through to hidden content", r"overflow(?:-[xy])?\s*:\s*(?:scroll|auto)\b"),
    (
        "A border can not be bigger than 8px",
        rf"border[a-z-]{{0,40}}\s*:{_V}(?<![\d.])(?:9|[1-9]\d{{1,6}})(?:\.\d{{1,6}})?px",
    ),
    ("Does not support multiple values", rf"background\s*:{_V},"),
    ("shorthand for `background-size`", rf"background\s*:{_V}/"),
    ("Only `background-color` values are supported", rf"background\s*:\s*(?:{_MULTI}|{_V}(?:url\(|gradient))"),
    (
        "color keywords from CSS Level 1",
        r"background(?:-color)?\s*:\s*(?!(?:aqua|black|blue|fuchsia|gray|green|lime|maroon|navy|olive|purple"
        r"|red|silver|teal|white|yellow|transparent)\b)[a-z]",
    ),
)
_DRAWN = {slug: re.compile(css) for slug, css in DRAWN_ONLY_IF.items()}
_COMPILED: tuple[tuple[str, re.Pattern[str] | None], ...] = tuple(
    (fragment, re.compile(css) if css is not None else None) for fragment, css in PARTIAL_NOTES
)


@functools.cache
def _known(note: str) -> tuple[int, ...]:
    """The entries of PARTIAL_NOTES that read ``note`` (caniemail's notes are few and fixed: kept)."""
    return tuple(i for i, (fragment, _) in enumerate(_COMPILED) if fragment in note)


class NoteConditions:
    """For one message's CSS: whether a partial result's notes name anything the message uses.
    Each condition is searched at most once per message."""

    __slots__ = ("_css", "_held")

    def __init__(self, css: str) -> None:
        self._css = css.lower()
        self._held: dict[int, bool] = {}

    def _holds(self, index: int) -> bool:
        if index not in self._held:
            pattern = _COMPILED[index][1]
            self._held[index] = pattern is not None and pattern.search(self._css) is not None
        return self._held[index]

    def draws(self, slug: str) -> bool:
        """Whether the message uses ``slug`` in a form a client that drops it would show differently."""
        pattern = _DRAWN.get(slug)
        return pattern is None or pattern.search(self._css) is not None

    def applies(self, notes: Iterable[str]) -> bool:
        """Whether the message may meet what these notes say the client drops: True when there is
        no note, a note the table does not know, or a known note whose CSS the message uses."""
        notes = list(notes)
        if not notes:
            return True
        for note in notes:
            known = _known(note)
            if not known or any(self._holds(i) for i in known):
                return True
        return False
