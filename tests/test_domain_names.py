"""`normalize_domain` on arbitrary text: a valid stored name, or 400 invalid_domain, never a crash."""

from __future__ import annotations

import random
import re

from inboxd.errors import InvalidRequest
from inboxd.services.domains import normalize_domain

STORED = re.compile(r"(?=.{3,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]*[a-z][a-z0-9-]*")
ALPHABET = "abcXYZ019-._ .@/:\u00fc\u00df\u4f8b\u30c6\uff21\u200d\u0301\U0001f4a9\x00"


def test_random_text_is_stored_form_or_invalid_domain() -> None:
    rng = random.Random(20261121)
    accepted = 0
    for _ in range(20000):
        raw = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
        try:
            stored = normalize_domain(raw)
        except InvalidRequest as exc:
            assert exc.code == "invalid_domain"
            continue
        accepted += 1
        assert STORED.fullmatch(stored), (raw, stored)
        assert normalize_domain(stored) == stored, raw  # idempotent
    assert accepted > 0
