"""TiktokenCounter's memo of counts by text: the same counts as a BPE pass, in bounded memory (issue 23)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pager.core import tokens
from pager.core.tokens import TiktokenCounter, default_counter


def bpe_count(counter: TiktokenCounter, text: str) -> int:
    """Count as the counter did before it had a memo: one BPE pass, scaled past EXACT_LIMIT."""
    if not text:
        return 0
    if len(text) > tokens.EXACT_LIMIT:
        head = text[: tokens.SAMPLE]
        return max(1, round(len(counter._enc.encode(head, disallowed_special=())) * len(text) / len(head)))
    return len(counter._enc.encode(text, disallowed_special=()))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300) | st.sampled_from(["bash", "", " ", "<|endoftext|>", "héllo wörld", "\ud800x"]))
def test_prop_a_count_is_the_bpe_count_cold_and_warm(text: str) -> None:
    counter = default_counter()
    expected = bpe_count(counter, text)
    assert counter.count(text) == expected
    assert counter.count(text) == expected  # from the memo now
    assert counter.count(str(text)) == expected  # an equal text, whatever object holds it


def test_a_repeated_text_is_encoded_once(monkeypatch) -> None:
    counter = TiktokenCounter()
    calls: list[str] = []
    real = counter._bpe  # one BPE pass (by pieces or tiktoken's: tests/test_tokens_pieces.py)

    def spy(text: str) -> int:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(counter, "_bpe", spy)
    body = "def f(x):\n    return x + 1\n" * 200
    assert counter.count(body) == counter.count("".join([body])) == bpe_count(TiktokenCounter(), body)
    assert counter.count("bash") == counter.count("bash")
    assert calls == [body, "bash"]


def test_the_memo_is_bounded_by_characters(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_CHARS", 1000)
    counter = TiktokenCounter()
    texts = [f"text number {i} " * 10 for i in range(200)]
    for text in texts:
        assert counter.count(text) == bpe_count(counter, text)
    assert 0 < sum(map(len, counter._memo)) <= 1000
    assert all(counter.count(text) == bpe_count(counter, text) for text in texts)  # after clearing, the same


def test_a_text_over_the_memo_bound_is_counted_but_not_kept(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_TEXT_CHARS", 50)
    counter = TiktokenCounter()
    long, short = "word " * 20, "word " * 5
    assert counter.count(long) == bpe_count(counter, long) and counter.count(short) == bpe_count(counter, short)
    assert long not in counter._memo and short in counter._memo


def test_a_huge_text_is_still_sampled_and_not_kept() -> None:
    counter = TiktokenCounter()
    huge = "alpha beta gamma " * (tokens.EXACT_LIMIT // 17 + 100)
    assert counter.count(huge) == bpe_count(counter, huge)
    assert huge not in counter._memo
