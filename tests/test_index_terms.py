"""The index's word splitter: the ASCII fast path cuts exactly the words the general path cuts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inboxd.services.filters import MAX_TERM_CHARS, fold, index_terms, words


def _general(parts: tuple[str, ...]) -> list[str]:
    """The definition: NFKC, case folded, runs of letters and digits, each kept once."""
    return list(dict.fromkeys(w for part in parts for w in words(part)))


@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127)), max_size=5))
def test_ascii_text_gives_the_same_words_in_the_same_order(parts: list[str]) -> None:
    assert index_terms(parts) == _general(tuple(parts))


@given(st.lists(st.text(), max_size=5))
def test_any_text_gives_the_same_words(parts: list[str]) -> None:
    assert index_terms(parts) == _general(tuple(parts))


def test_examples() -> None:
    assert index_terms(["Your CODE is 123-456", "Ünïcode Straße", "a_b " + "x" * (MAX_TERM_CHARS + 1)]) == [
        "your",
        "code",
        "is",
        "123",
        "456",
        *words("Ünïcode Straße"),
        "a",
        "b",
    ]
    assert fold("Straße") == "strasse"
