"""Random identifiers (inboxd/ids.py): the text of version 4 UUIDs, made without `uuid.UUID`."""

from __future__ import annotations

import uuid

from inboxd.ids import random_hex, random_uuid


def test_random_uuids_are_canonical_version_4_uuids() -> None:
    made = [random_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    # Every variant digit turns up: the digit is drawn, not fixed.
    assert {text[19] for text in made} == set("89ab")


def test_random_hex_has_the_digits_asked_for() -> None:
    for digits in (1, 15, 16, 32):
        text = random_hex(digits)
        assert len(text) == digits
        int(text, 16)
    assert len({random_hex(16) for _ in range(1000)}) == 1000
