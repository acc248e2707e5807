"""The index's word splitter: the ASCII fast path gives the words the general path cuts (each
word the index can answer for, so the same searches find the same messages)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inboxd.services.filters import fold, index_words, words
from inboxd.store.search_index import MAX_TERM_CHARS


def _general(parts: tuple[str, ...]) -> list[str]:
    """The definition: NFKC, case folded, runs of letters and digits, each kept once."""
    return list(dict.fromkeys(w for part in parts for w in words(part)))


def _answerable(text: str) -> list[str]:
    """The distinct words a query can name, in order: what the index answers for."""
    return [w for w in dict.fromkeys(text.split()) if len(w) <= MAX_TERM_CHARS]


@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127)), max_size=5))
def test_ascii_text_gives_the_same_words_in_the_same_order(parts: list[str]) -> None:
    assert _answerable(index_words(parts)) == _general(tuple(parts))
    assert _answerable(index_words(parts, distinct=False)) == _general(tuple(parts))


@given(st.lists(st.text(), max_size=5))
def test_any_text_gives_the_same_words(parts: list[str]) -> None:
    assert _answerable(index_words(parts)) == _general(tuple(parts))


def test_examples() -> None:
    assert _answerable(
        index_words(["Your CODE is 123-456", "Ünïcode Straße", "a_b " + "x" * (MAX_TERM_CHARS + 1)])
    ) == [
        "your",
        "code",
        "is",
        "123",
        "456",
        *words("Ünïcode Straße"),
        "a",
        "b",
    ]
    # ASCII: mapped, each word once by the C word set; without it, mapped only, cut by the database
    assert index_words(["Hello, hello!"]) == "hello"
    assert index_words(["Hello, hello!"], distinct=False) == "hello  hello "
    assert index_words(["Grüße, grüße"]) == "grüsse"  # other text: cut here, each word once
    assert fold("Straße") == "strasse"
