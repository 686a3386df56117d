"""The recorder's fast paths give what the slow ones do (issue 23: a steady call's recording in O(new messages))."""

from __future__ import annotations

from typing import Any, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from pager.core.history import History
from pager.core.tokens import HeuristicCounter
from pager.recording import Recorder


def _slow_same_prefix(ident: Sequence[Any], rows: int, messages: Sequence[Any]) -> int:
    """``Recorder.same_prefix`` as it was: a slice of the history, compared whole, else the run of identities."""
    lim = min(len(ident), rows, len(messages))
    if not lim:
        return 0
    head = list(messages[:lim])
    if list(ident[:lim]) == head:
        return lim
    k = 0
    while k < lim and ident[k] is messages[k]:
        k += 1
    return k


# a history: each message is the recorded object, an equal copy, an equal-looking but different one, or new
_EDITS = st.sampled_from(["same", "same", "same", "copy", "other"])


@settings(max_examples=500, deadline=None)
@given(edits=st.lists(_EDITS, max_size=12), tail=st.integers(-3, 3),
       as_tuple=st.sampled_from([False, False, False, True]), ident_extra=st.sampled_from([0, 0, 0, 1, 2]))
def test_same_prefix_equals_the_slow_comparison(edits: list[str], tail: int, as_tuple: bool, ident_extra: int) -> None:
    """``tail``: new messages after the recorded rows (> 0), or rows missing at the end (< 0: a request behind)."""
    rows = len(edits)  # the recorded rows; ``ident_extra`` more objects known by identity than rows
    recorded = [{"role": "user", "content": f"m{i}"} for i in range(rows + ident_extra)]
    messages: list[Any] = []
    for i, (m, how) in enumerate(zip(recorded, edits)):
        messages.append(m if how == "same" else dict(m) if how == "copy" else {"role": "user", "content": f"x{i}"})
    messages += [{"role": "assistant", "content": f"new{j}"} for j in range(tail)]
    messages = messages[: len(messages) + min(tail, 0)]
    rec = Recorder("s", History("s", HeuristicCounter()), "session")
    rec.history.hash = ["h"] * rows
    rec._ident = list(recorded)
    before = list(rec._ident)
    sent = tuple(messages) if as_tuple else messages
    assert rec.same_prefix(sent) == _slow_same_prefix(recorded, rows, sent)
    assert rec._ident == before and all(a is b for a, b in zip(rec._ident, before))  # left as it was
