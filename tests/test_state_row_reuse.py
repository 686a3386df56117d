"""A call between rounds keeps the session's sets and the state row's sorted copy of them (issue 23).

``Pager._persist`` keeps ``state.handles`` and ``state.demoted`` as the same
frozensets when a call adds nothing to them, and ``SessionState.row`` reuses
the sorted list of the demoted set it sorted last (by identity). The row the
store holds after every call must still be exactly the state's figures.
"""

from __future__ import annotations

import orjson

import pager
from pager import session as session_module
from pager.lab.synth import generate_session
from pager.session import SessionState
from sizes import size


def test_the_saved_row_is_the_state_after_every_call() -> None:
    # 40 steps in the suite (80 in the full campaign, tests/sizes.py): two rounds that demote, dozens of
    # calls that do not (asserted at the end)
    _h, msgs = generate_session(9, size(40, 80), big_every=5)
    bounds = [k for k in range(2, len(msgs) + 1) if k == len(msgs) or msgs[k]["role"] == "assistant"]
    kept = grew = 0
    with pager.open(":memory:", session="s", context_window=6000, log_reports=False) as p:
        for k in bounds:
            before = p._mirror.state
            p.assemble({"model": "m", "messages": msgs[:k]})
            after = p._mirror.state
            saved = p.store.load_state("s")
            assert saved["demoted"] == sorted(after.demoted)
            assert after.handles >= before.handles
            if after.handles == before.handles:
                assert after.handles is before.handles
            if after.demoted == before.demoted:
                assert after.demoted is before.demoted, "nothing demoted: the very same set"
                kept += 1
            else:
                grew += 1
    assert kept and grew, "calls that demote nothing and rounds that demote some"


def test_the_sorted_copy_follows_the_set_not_its_contents() -> None:
    a, b = frozenset({3, 1, 2}), frozenset({3, 1, 2, 0})
    for s in (a, a, b, a, b, b, frozenset()):
        row = SessionState(demoted=s).row(_NoScheduler())
        assert row["demoted"] == sorted(s)
    assert session_module._sorted(b) is session_module._sorted(b)


class _NoScheduler:
    key = "layout"

    def dump(self, state: object) -> object:
        return None


def test_two_sessions_in_turn_keep_their_own_rows() -> None:
    """The memo is one entry for the process: two sessions alternating must each save their own set."""
    # 30 steps in the suite (60 in the full campaign): both sessions have demoted pages, and not the same
    _h, msgs = generate_session(2, size(30, 60), big_every=4)
    bounds = [k for k in range(2, len(msgs) + 1) if k == len(msgs) or msgs[k]["role"] == "assistant"]
    with pager.open(":memory:", session="x", context_window=5000, log_reports=False) as x, \
            pager.open(":memory:", session="y", context_window=9000, log_reports=False) as y:
        for k in bounds:
            for p, name in ((x, "x"), (y, "y")):
                p.assemble({"model": "m", "messages": msgs[:k]})
                assert orjson.loads(orjson.dumps(p.store.load_state(name)["demoted"])) == sorted(
                    p._mirror.state.demoted)
        assert x._mirror.state.demoted and y._mirror.state.demoted
        assert x._mirror.state.demoted != y._mirror.state.demoted
