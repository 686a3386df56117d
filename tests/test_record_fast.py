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


# -- classifying a tool call: a first word that reads nothing skips shlex ----------------------------------

_WORDS = st.sampled_from(["cat", "head", "sed", "grep", "nl", "open", "less", "python", "-n", "-rn", "3", "'1,5p'",
                          "src/a.py", "a b", "x", "'", '"', "\\", "c\"a\"t", "'cat'", "ca\\t", "-n3", "tail"])
_GLUE = st.sampled_from([" ", "  ", "\t", "", "\r", "\x0b", "\xa0"])


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.tuples(_WORDS, _GLUE), min_size=1, max_size=6), lead=_GLUE)
def test_command_path_equals_the_lexing_path(parts: list[tuple[str, str]], lead: str) -> None:
    import re

    from pager.core import fileread

    command = lead + "".join(w + g for w, g in parts)
    fast = fileread._command_path(command)
    saved = fileread._FIRST_WORD
    fileread._FIRST_WORD = re.compile(r"(?!)")  # never matches: every command is lexed, as before
    try:
        assert fast == fileread._command_path(command), command
    finally:
        fileread._FIRST_WORD = saved


# -- reference detection: a new page's postings are not copied, term weights are memoised ------------------

def _slow_references(index: Any, terms: frozenset[str], exclude: set[int], before: int | None) -> dict[int, int]:
    import bisect

    from pager.core.terms import term_weight

    out: dict[int, int] = {}
    for term in terms:
        ids = index._postings.get(term)
        if ids is None or len(ids) > index.max_df:
            continue
        if before is not None:
            ids = ids[: bisect.bisect_left(ids, before)]
        for pid in ids:
            if pid not in exclude:
                out[pid] = out.get(pid, 0) + term_weight(term)
    return out


_TERMS = st.sampled_from(["src/a.py", "a.py", "valueerror", "max_retries", "1024", "pg:3-abcdef", "deadbeef1",
                          "line 12", "os.path.join", "join", "https://x.org/p", "camelcase"])


@settings(max_examples=300, deadline=None)
@given(pages=st.lists(st.tuples(st.integers(1, 40), st.frozensets(_TERMS, max_size=5)), max_size=25),
       query=st.frozensets(_TERMS, max_size=6), before=st.one_of(st.none(), st.integers(0, 45)),
       exclude=st.sets(st.integers(1, 40), max_size=3), max_df=st.integers(1, 6))
def test_references_equal_the_copying_walk(pages: list[tuple[int, frozenset[str]]], query: frozenset[str],
                                           before: int | None, exclude: set[int], max_df: int) -> None:
    from pager.core.terms import TermIndex

    index = TermIndex(max_df=max_df)
    for pid, terms in pages:
        index.add_page(pid, terms)
    got = index.references(query, exclude=exclude, before=before)
    assert got == _slow_references(index, query, exclude, before)
