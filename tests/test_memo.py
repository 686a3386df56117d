"""The bounded memo of the term scan and the token count (``pager.core.memo``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import run_threads
from pager.core.memo import Memo


def _counted() -> tuple[Memo, list[str]]:
    calls: list[str] = []

    def fn(key: str) -> str:
        calls.append(key)
        return key.upper()

    return Memo(fn, entries=4, key_chars=8), calls


def test_a_key_in_steady_use_survives_every_turn_and_one_used_once_goes():
    memo, calls = _counted()
    for i in range(40):  # "hot" asked for between every two new keys: many turns of a 4-entry memo
        assert memo["hot"] == "HOT"
        assert memo[f"k{i}"] == f"K{i}"
    assert calls.count("hot") == 1  # computed once, moved back at each turn
    assert "k0" not in memo and "k0" not in memo.old  # used once, gone after at most two turns
    assert len(memo) <= 4 and len(memo.old) <= 4


def test_a_long_key_is_computed_but_not_kept():
    memo, calls = _counted()
    assert memo["x" * 9] == "X" * 9 and memo["x" * 9] == "X" * 9
    assert calls == ["x" * 9] * 2 and not memo


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcd", min_size=0, max_size=10), max_size=200), st.integers(1, 6))
def test_every_answer_is_the_function_s_whatever_the_memo_holds(keys, entries):
    memo = Memo(lambda k: (k, len(k)), entries=entries, key_chars=5)
    for k in keys:
        assert memo[k] == (k, len(k))
        assert memo.get(k, (k, len(k))) == (k, len(k))
        assert len(memo) <= entries and len(memo.old) <= entries


def test_threads_sharing_a_memo_get_the_function_s_answers():
    memo = Memo(lambda k: k * 2, entries=16, key_chars=64)
    bad: list[str] = []

    def work(seed: int) -> None:
        for i in range(3000):
            k = str((i * 7 + seed) % 97)
            if memo[k] != k * 2:
                bad.append(k)

    run_threads(work, 4)
    assert not bad and len(memo) <= 16
