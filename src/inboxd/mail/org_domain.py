"""A domain's organizational domain (RFC 7489 §3.2): its public suffix plus one label, through the
Public Suffix List shipped in `publicsuffixlist` (private section included, so `github.io` is a
suffix and `attacker.github.io` is not `victim.github.io`'s organization). DMARC alignment and the
content check's Reply-To comparison both ask here.

The list is read once, at the first question (a few MB that most servers never need), and is
data only: every caller gets the same answers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList


@functools.cache
def _suffixes() -> PublicSuffixList:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()  # the list shipped with the package: no download


def organizational_domain(domain: str) -> str:
    """The public suffix plus one label, or the domain itself when it is a public suffix (or
    unknown to the list)."""
    name = domain.lower().strip(".")
    return _suffixes().privatesuffix(name) or name
