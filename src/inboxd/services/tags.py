"""Message tags: the one place that says what a tag is.

A tag is lowercase ASCII letters, digits, `.`, `_` and `-`, 1 to 32 characters; a message holds
at most 10. Tags come from the `X-Tags` header (comma-separated), from the plus part of the
address the message was delivered by (`box+signup@…` → `signup`), and by hand (`set_tags`). At
ingest an invalid tag is dropped (mail is never refused for its tags); by hand it is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from inboxd.errors import InvalidRequest

MAX_TAG_CHARS = 32
MAX_TAGS = 10
_TAG = re.compile(r"[a-z0-9._-]{1,32}")


def normal(tag: str) -> str | None:
    """`tag` trimmed and lowercased, or None when it is not a valid tag."""
    value = tag.strip().lower()
    return value if value.isascii() and _TAG.fullmatch(value) else None


def merged(*sources: Iterable[str]) -> tuple[str, ...]:
    """The valid tags of `sources`, in order, each once, at most MAX_TAGS: what ingest keeps."""
    out: dict[str, None] = {}
    for source in sources:
        for raw in source:
            tag = normal(raw)
            if tag is not None:
                out[tag] = None
                if len(out) == MAX_TAGS:
                    return tuple(out)
    return tuple(out)


def from_header(value: str) -> list[str]:
    """The comma-separated tags of an `X-Tags` header (invalid ones dropped later)."""
    return value.split(",") if value else []


def plus_tag(address: str, mailbox_address: str) -> tuple[str, ...]:
    """The tag named by the plus part of `address` when plus addressing delivered it to another
    `mailbox_address` (`box+signup@x` to `box@x`); none when the address is the mailbox's own."""
    if address == mailbox_address or "+" not in address:
        return ()
    local = address.rpartition("@")[0]
    tag = normal(local.split("+", 1)[1])
    return () if tag is None else (tag,)


def checked(tags: Iterable[object]) -> tuple[str, ...]:
    """Tags set by hand: every one valid, at most MAX_TAGS (after removing repeats), or a 400."""
    out: dict[str, None] = {}
    for raw in tags:
        tag = normal(raw) if isinstance(raw, str) else None
        if tag is None:
            raise InvalidRequest(
                f"Invalid tag {raw!r}: a tag is 1 to {MAX_TAG_CHARS} characters of a-z, 0-9, `.`, `_` and `-`."
            )
        out[tag] = None
    if len(out) > MAX_TAGS:
        raise InvalidRequest(f"A message holds at most {MAX_TAGS} tags.")
    return tuple(out)


def encoded(tags: Iterable[str]) -> str:
    """The `messages.tags` column: the tags separated by spaces (no tag holds one)."""
    return " ".join(tags)


def decoded(column: str | None) -> tuple[str, ...]:
    return tuple(column.split()) if column else ()
