"""The search index's word set in C (`inboxd/services/_words.c`): each word once, in the order
first seen, as a Python dict of the words gives; built wherever `make test` installs inboxd."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from inboxd.services import filters
from inboxd.services._words import distinct_words


def python_words(data: bytes) -> bytes:
    return b" ".join(dict.fromkeys(data.split()))


def test_the_c_word_set_is_built_and_used() -> None:
    # setup.py builds it as optional: a build without it would pass the rest of the suite.
    assert filters.DISTINCT_WORDS is distinct_words
    assert filters.index_words(["the cat", "The Cat-flap", "the dog"]) == "the cat flap dog"
    assert filters.index_words(["the cat", "The Cat-flap"], distinct=False) == "the cat the cat flap"


def test_shapes_the_index_text_takes() -> None:
    for data in (b"", b"   ", b"a", b" a  b a ", b"the cat the dog", b"x" * 5000 + b" " + b"x" * 5000):
        assert distinct_words(data) == python_words(data), data[:60]


@given(st.lists(st.sampled_from([b"a", b"b", b"ab", b"ba", b"abc", b"0", b"09", b"z" * 70, b"", b" "]), max_size=300))
def test_random_texts_keep_each_word_once_in_order(pieces: list[bytes]) -> None:
    data = b" ".join(pieces)
    assert distinct_words(data) == python_words(data)


def test_many_distinct_words_fill_the_table_without_losing_any() -> None:
    rng = random.Random(25)
    vocabulary = [
        bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz0123456789", k=rng.randint(1, 12))) for _ in range(50_000)
    ]
    data = b" ".join(rng.choices(vocabulary, k=200_000))
    assert distinct_words(data) == python_words(data)


def test_a_memoryview_and_a_bytearray_are_read_too() -> None:
    assert distinct_words(bytearray(b"b a b")) == b"b a"
    assert distinct_words(memoryview(b"b a b")) == b"b a"
