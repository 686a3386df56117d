"""A round commits the recall index only when a page it left out of the prompt is not committed (issue 23).

Pages are indexed as they are recorded and committed every ``COMMIT_EVERY``
pages; a round that demotes a page still in the feeder's buffer commits it
then, so that what the prompt no longer shows can be recalled from the next
call on. A round that leaves out only pages committed already has nothing to
commit (a commit and the merges after it cost ~40 ms of CPU at 50,000 pages).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import pager
from pager.core.layout import FULL
from pager.lab.synth import generate_session
from pager.storage.index import IndexDoc
from pager.storage.indexing import IndexFeeder


def _doc(pid: int) -> IndexDoc:
    return IndexDoc(page_id=pid, session="s", step=pid, kind="tool", text=f"output number{pid} of a run")


def test_the_feeder_says_which_ids_its_buffer_may_hold(tmp_path: Path) -> None:
    with pager.open(tmp_path / "ctx", session="s", log_reports=False) as p:
        feeder: IndexFeeder = p._feeder
        assert not feeder.buffers() and not feeder.buffers(10**9)
        feeder.add([_doc(pid) for pid in (1_005, 1_003, 1_004)])  # out of order: the lowest counts
        assert feeder.buffers() and feeder.buffers(1_003) and feeder.buffers(5_000)
        assert not feeder.buffers(1_002)
        feeder.flush(wait=True)
        assert not feeder.buffers() and not feeder.buffers(1_004)
        feeder.add([_doc(2_000)])
        assert feeder.buffers(2_000) and not feeder.buffers(1_999)
        feeder.forget([2_000])  # a rolled-back call's pages: committed away
        assert not feeder.buffers()


@pytest.mark.parametrize("window", [16_000, 32_000])
def test_after_every_round_what_the_prompt_leaves_out_is_committed(tmp_path: Path, window: int) -> None:
    _h, msgs = generate_session(3, 120)
    decided: Counter[bool] = Counter()
    with pager.open(tmp_path / "ctx", session="s", context_window=window, log_reports=False) as p:
        feeder = p._feeder
        buffers = feeder.buffers

        def counted(upto: int | None = None) -> bool:
            answer = buffers(upto)
            decided[answer] += 1
            return answer

        feeder.buffers = counted  # type: ignore[method-assign]
        ends = [k for k in range(2, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]
        rounds = 0
        for k in ends:
            p.assemble({"messages": msgs[:k]})
            if not p.last_report.round:
                continue
            rounds += 1
            shown = {s.page for s in p._mirror.state.scheduler.slots if s.kind == FULL}
            hidden = [pid for pid in p.history.page if pid not in shown]
            if hidden:
                # waits for a background commit under way: what it shows is what the next call searches
                assert max(hidden) <= feeder.index.indexed_upto()
    assert rounds >= 5
    # both ways were taken: rounds that committed pages they demoted, rounds that had nothing to commit
    assert decided[True] and decided[False], decided
