"""Identifiers (inboxd/ids.py): the text of version 4 and version 7 UUIDs, made without `uuid.UUID`."""

from __future__ import annotations

import os
import uuid

import pytest

from inboxd import ids
from inboxd.ids import random_hex, random_uuid, time_ordered_uuid


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


def test_time_ordered_uuids_are_canonical_version_7_uuids_of_their_millisecond() -> None:
    at = 1_795_000_000.123456
    made = [time_ordered_uuid(at) for _ in range(2000)]
    assert len(set(made)) == len(made)  # 74 random bits within one millisecond
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert parsed.int >> 80 == 1_795_000_000_123  # the Unix time in milliseconds, first
    assert {text[19] for text in made} == set("89ab")


def test_time_ordered_uuids_sort_as_their_times() -> None:
    times = [0.0, 0.001, 1.5, 1_700_000_000.0, 1_795_000_000.123, 1_795_000_000.124, 4_000_000_000.0]
    made = [time_ordered_uuid(at) for at in times]
    assert made == sorted(made)


def test_random_bytes_come_from_a_pool_of_kernel_calls_and_never_repeat_across_refills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = os.urandom

    def counted(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counted)
    ids._forget_pool()
    taken = [ids.random_bytes(10) for _ in range(800)]
    big = ids.random_bytes(ids.POOL_BYTES)
    monkeypatch.undo()
    assert all(len(b) == 10 for b in taken) and len(big) == ids.POOL_BYTES
    assert len(set(taken)) == len(taken)
    # Two pools for 800 ids (each refill draws a whole pool), and a large request drawn on its own.
    assert calls == [ids.POOL_BYTES, ids.POOL_BYTES, ids.POOL_BYTES]


def test_a_forked_child_does_not_hand_out_its_parents_next_bytes() -> None:
    ids.random_bytes(1)  # the parent's pool holds bytes not yet handed out
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report its next id and leave at once
        os.write(write, ids.random_uuid().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    from_child = os.read(read, 100).decode()
    os.close(read)
    assert from_child != ids.random_uuid()
