"""Message filters: the one parser of the list and wait query parameters, and the word splitter
that the full-text index and the `q` parameter share.

Both faces (REST and the dashboard) hand the query string to `parse_filter`; a malformed value is
400 `invalid_request` naming the parameter. Words are cut the same way when a message is indexed
and when it is searched (NFKC, case folded, runs of letters and digits), and the index stores the
words themselves, so SQLite (FTS5) and PostgreSQL (tsvector) match the same messages.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from inboxd.errors import InvalidRequest
from inboxd.model import MessageFilter, Term
from inboxd.services import tags
from inboxd.store.search_index import MAX_TERM_CHARS


def _c_word_set() -> Callable[[bytes], bytes] | None:
    """The C word set (`_words.c`), which setup.py builds when a compiler is there; else None."""
    try:
        from inboxd.services._words import distinct_words
    except ImportError:
        return None
    return distinct_words


DISTINCT_WORDS = _c_word_set()

MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
MAX_TIMEOUT = 60.0
DEFAULT_TIMEOUT = 30.0
FILTER_PARAMS = ("q", "from", "to", "subject", "unread", "has_attachments", "since", "until", "tag")

_WORD = re.compile(r"[^\W_]+")
_TIMEOUT = re.compile(r"\d{1,3}(\.\d{1,3})?")
# RFC 3339: a date, `T` (or a space, or lowercase t), a time, and a zone (`Z` or an offset).
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})",
)


# ASCII text, the common case, is cut with a byte table instead of the regular expression: letters
# map to lower case, digits stay, every other byte becomes a space. For ASCII this is exactly what
# NFKC + casefold + `[^\W_]+` give, at a quarter of the cost per message indexed.
_ASCII_WORDS = bytes(
    (c + 32 if 65 <= c <= 90 else c) if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122) else 32 for c in range(256)
)


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def words(text: str) -> list[str]:
    """The searchable words of `text`, in order, repeats kept."""
    return [w for w in _WORD.findall(fold(text)) if len(w) <= MAX_TERM_CHARS]


def index_words(parts: Iterable[str], *, distinct: bool = True) -> str:
    """The words of a message's searchable parts as the index takes them: separated by spaces.

    ASCII text, the common case, is mapped through the byte table (a few microseconds for a page
    of text), then each word is kept once by the C word set (`_words.c`) where it was built; the
    database cuts what it is given at the spaces (SQLite's FTS5, in C and without the GIL) and keeps
    each word once. Without the C word set (or with `distinct` false) the repeats stay: FTS5 then
    tokenizes them all and stores the whole text, about 15 microseconds and 4 KB more for a 4 KB
    mail, where a Python set would cost more than both (docs/performance.md, "The search index's
    words"). Words over MAX_TERM_CHARS may stay too: no query can name them (`parse_query` keeps
    shorter words only) and PostgreSQL's save leaves them out. Other text is cut here, into its
    distinct words up to that length.
    """
    text = " ".join(parts)  # a word never spans two parts: the space keeps them apart
    if text.isascii():
        cut = text.encode("ascii").translate(_ASCII_WORDS)
        if distinct and DISTINCT_WORDS is not None:
            cut = DISTINCT_WORDS(cut)
        return cut.decode("ascii")
    return " ".join(w for w in dict.fromkeys(_WORD.findall(fold(text))) if len(w) <= MAX_TERM_CHARS)


def parse_query(q: str) -> tuple[Term, ...]:
    """`q`: words separated by spaces, each required; `word*` matches words starting with it. A
    word the splitter cuts in parts (`e-mail`, `a@b.c`) requires each part."""
    terms: list[Term] = []
    for chunk in q.split():
        prefix = chunk.endswith("*")
        parts = words(chunk.rstrip("*"))
        terms.extend(Term(p, prefix=prefix and i == len(parts) - 1) for i, p in enumerate(parts))
    unique = tuple(dict.fromkeys(terms))
    if not unique:
        raise InvalidRequest("`q` needs at least one word of letters or digits.")
    if len(unique) > MAX_QUERY_TERMS:
        raise InvalidRequest(f"`q` may hold at most {MAX_QUERY_TERMS} words.")
    return unique


def parse_filter(params: Mapping[str, str]) -> MessageFilter:
    """The filters of a list or wait request; an empty value counts as absent."""
    values = {name: params.get(name, "") for name in FILTER_PARAMS}
    q = values["q"]
    if len(q) > MAX_QUERY_CHARS or any(len(values[n]) > MAX_QUERY_CHARS for n in ("from", "to", "subject")):
        raise InvalidRequest(f"`q`, `from`, `to` and `subject` may be at most {MAX_QUERY_CHARS} characters.")
    since = _timestamp("since", values["since"])
    until = _timestamp("until", values["until"])
    tag = tags.normal(values["tag"]) if values["tag"] else ""
    if tag is None:
        raise InvalidRequest(f"`tag` must be 1 to {tags.MAX_TAG_CHARS} characters of a-z, 0-9, `.`, `_` and `-`.")
    return MessageFilter(
        terms=parse_query(q) if q.strip() else (),
        from_=values["from"].strip().lower(),
        to=values["to"].strip().lower(),
        subject=values["subject"].strip().lower(),
        unread=_flag("unread", values["unread"]),
        has_attachments=_flag("has_attachments", values["has_attachments"]),
        since=since,
        until=until,
        tag=tag,
    )


def parse_timeout(raw: str | None) -> float:
    """`timeout` of a wait: seconds from 0 to 60, default 30."""
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT
    if not (raw.isascii() and _TIMEOUT.fullmatch(raw)) or float(raw) > MAX_TIMEOUT:
        raise InvalidRequest(f"`timeout` must be a number of seconds from 0 to {MAX_TIMEOUT:.0f}.")
    return float(raw)


def _flag(name: str, raw: str) -> bool | None:
    if raw == "":
        return None
    if raw in ("true", "false"):
        return raw == "true"
    raise InvalidRequest(f"`{name}` must be `true` or `false`.")


def _timestamp(name: str, raw: str) -> float | None:
    if raw == "":
        return None
    # A `+` in a query string arrives as a space when the client did not encode it.
    value = raw.strip()
    if len(value) > 19 and value[19:].count(" ") == 1 and not value.endswith(" "):
        value = value[:19] + value[19:].replace(" ", "+")
    if not (value.isascii() and _RFC3339.fullmatch(value)):
        raise InvalidRequest(f"`{name}` must be an RFC 3339 timestamp, e.g. 2026-11-23T20:15:00Z.")
    try:
        parsed = datetime.fromisoformat(value.upper())
    except ValueError as exc:
        raise InvalidRequest(f"`{name}` is not a valid date and time.") from exc
    return parsed.timestamp()
