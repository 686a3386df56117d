"""Counting by pieces: the same counts as tiktoken's own BPE pass (issue 23).

``TiktokenCounter`` splits a text with ``re`` and sums memoised piece counts
where that split is provably cl100k's (``pager.core.tokens``). Counts feed
every page's tokens, the plan and the bench, whose JSON must not move, so the
oracle here is tiktoken itself: ``encode(text, disallowed_special=())``, what
the counter called before. Texts are drawn to sit on the pattern's edges:
spaces of every ASCII kind before letters, digits and the end, apostrophe
suffixes in both cases, newline runs after punctuation, the safe non-ASCII
punctuation, special-token strings, and characters that must take the
fallback.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sizes import every, examples

from pager.core import tokens
from pager.core.tokens import PIECE_SAFE, TiktokenCounter, default_counter

ENC = default_counter()._enc


def oracle(text: str) -> int:
    return len(ENC.encode(text, disallowed_special=()))


# pieces of text that meet at the pattern's boundaries
_BITS = st.sampled_from([
    " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u3000", "'", "'s", "'S", "'ll",
    "'LL", "'re", "'ve", "'d", "'t", "'M", "a", "Z", "word", " word", "x1", "123", "12345", "0", "::", "...",
    "=====", "-", "_", "(", ")]", "]\n", ".\n\n", "<|endoftext|>", "<|fim_prefix|>", "é", "ß", "ſ", "K", "中文",
    "٣", "①", "😀", "\u200b", "\x00", *PIECE_SAFE[:12], "—", "…", "│", "├──",
])
TEXTS = st.lists(_BITS, max_size=40).map("".join)
SAFE_ALPHABET = st.characters(codec="ascii") | st.sampled_from(list(PIECE_SAFE))


# 200 examples in the suite (600 in the full campaign): each draw joins up to 40 boundary bits, so every
# bit meets most others within a few dozen draws; the @examples pin the edges found so far
@settings(max_examples=examples(200, 600), deadline=None)
@given(text=TEXTS)
@example(text="a \n")  # Rust's $ is the end of the text: Python's would also match before a final newline
@example(text="x  \n\n")
@example(text="it's  'S 12345\t\x0b\x0cend  ")
def test_prop_a_count_by_pieces_is_tiktokens_count(text: str) -> None:
    assert default_counter()._bpe(text) == oracle(text)


@settings(max_examples=examples(100, 300), deadline=None)  # texts of up to 400 characters: many pieces each
@given(text=st.text(SAFE_ALPHABET, max_size=400))
def test_prop_any_text_of_the_safe_alphabet_is_split_and_counted_exactly(text: str) -> None:
    counter = TiktokenCounter()
    assert counter._pieces is not None and (text.isascii() or tokens._UNSAFE.search(text) is None)
    assert counter._bpe(text) == oracle(text)


@settings(max_examples=examples(100, 200), deadline=None)  # the fallback's reach; the exhaustive test below
@given(text=st.text(max_size=200))
def test_prop_any_text_at_all_counts_as_tiktoken_does(text: str) -> None:
    assert default_counter()._bpe(text) == oracle(text)


def test_every_short_text_of_the_boundary_characters_counts_exactly() -> None:
    # exhaustively, what random texts rarely hit: each space kind before an apostrophe suffix ("\x0b's"),
    # a digit, punctuation, a newline or the end
    alphabet = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "a", "S", "1", "'", "s", "!", "—", "é"]
    counter = TiktokenCounter()
    for n in range(1, 5):
        for combo in itertools.product(alphabet, repeat=n):
            text = "".join(combo)
            assert counter._bpe(text) == oracle(text), repr(text)


def test_the_split_is_used_for_safe_texts_and_tiktoken_for_the_rest(monkeypatch) -> None:
    counter = TiktokenCounter()
    passes: list[str] = []
    real = counter._enc

    class Spy:
        def encode_ordinary(self, text: str) -> list[int]:
            passes.append(text)
            return real.encode_ordinary(text)

    monkeypatch.setattr(counter, "_enc", Spy())
    safe = "[pager: tool output stored off-prompt as pg:3-abcdef — 120 tokens]\n===== 3 passed …"
    assert counter._bpe(safe) == oracle(safe) and passes == []
    assert counter._bpe("naïve café") == oracle("naïve café") and passes == ["naïve café"]


def test_another_pattern_is_never_split_by_the_cl100k_one(monkeypatch) -> None:
    import tiktoken

    other = tiktoken.Encoding(
        name="cl100k-variant", pat_str=ENC._pat_str.replace(r"\p{N}{1,3}+", r"\p{N}{1,2}+"),
        mergeable_ranks=ENC._mergeable_ranks, special_tokens=ENC._special_tokens,
    )
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: other)
    counter = TiktokenCounter("cl100k-variant")
    assert counter._pieces is None
    assert counter.count("12345 and 678") == len(other.encode_ordinary("12345 and 678")) != oracle("12345 and 678")


def test_the_piece_memo_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "PIECE_MEMO_ENTRIES", 50)
    counter = TiktokenCounter()
    text = " ".join(f"w{i}x" for i in range(400))
    assert counter._bpe(text) == oracle(text) and 0 < len(counter._pieces) <= 50 and len(counter._pieces.old) <= 50
    long = "q" * (tokens.PIECE_KEY_CHARS + 1)
    assert counter._bpe(long) == oracle(long) and long not in counter._pieces


@pytest.mark.traces
def test_every_trace_message_counts_as_tiktoken_does(traces_dir) -> None:
    from pager.core.compact import compact_line
    from pager.core.messages import message_text
    from pager.lab.replay.session import discover, load_session

    counter = TiktokenCounter()
    texts: dict[str, None] = {}  # each distinct text once (a repeated one is the same check again), in order
    for path in discover([traces_dir]):
        for i, message in enumerate(load_session(path).messages):
            texts[message_text(message)[: tokens.EXACT_LIMIT]] = None
            texts[compact_line(message, "tool", f"pg:{i}-abcdef", i)] = None
    # the suite counts one distinct text in 3 (the full campaign every one): still thousands of real texts,
    # over a thousand of them counted by pieces and some by tiktoken's fallback (asserted below)
    checked = every(list(texts), 3)
    split = 0
    for t in checked:
        assert counter._bpe(t) == oracle(t), t[:200]
        split += t.isascii() or tokens._UNSAFE.search(t) is None
    assert split > 1000 and split < len(checked)
