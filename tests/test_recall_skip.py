"""A call whose recall search could recall nothing does not search, and plans what a searching call plans.

``PagingScheduler._may_recall`` skips the index when no row of the history
that the search may return is referred to strongly enough by the query to
become a candidate; with pools, only when the index also holds no page beyond
the session (``PageIndex.beyond_session``, ``RecallRequest.beyond_only``).
Each case runs the same calls on a skipping session and on one that searches
every call (``skip_idle_recall = False``): prompts, reports and saved state
must be equal, some calls must have skipped and some must have recalled, so
a skip that drops a real recall fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import pager
from pager.lab.synth import generate_session

_BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


def _counted(p: pager.Pager) -> list[int]:
    """Count the recall searches ``p`` runs (the index's ``search_ids``)."""
    index = p._feeder.index
    real = index.search_ids
    calls: list[int] = []

    def spied(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    index.search_ids = spied  # type: ignore[method-assign]
    return calls


def _same_call(a: pager.Pager, b: pager.Pager, request: dict[str, Any]) -> int:
    """Assemble ``request`` on both; assert the same prompt, report and state; return the pages recalled."""
    got, want = a.assemble(request), b.assemble(request)
    assert orjson.dumps(got) == orjson.dumps(want)
    ra, rb = a.last_report.to_dict(), b.last_report.to_dict()
    ra.pop("elapsed_ms"), rb.pop("elapsed_ms")
    assert ra == rb
    assert orjson.dumps(a._mirror.state.row(a._scheduler)) == orjson.dumps(b._mirror.state.row(b._scheduler))
    return ra["pages_recalled"]


@pytest.mark.parametrize("pools", [False, True])
def test_a_skipping_session_plans_what_a_searching_one_does(pools: bool) -> None:
    _h, msgs = generate_session(4, 90, big_every=6)
    bounds = [k for k in range(2, len(msgs) + 1) if k == len(msgs) or msgs[k]["role"] == "assistant"]
    opts = {"session": "s", "context_window": 6000, "recall_pools": pools, "log_reports": False}
    with pager.open(":memory:", **opts) as a, pager.open(":memory:", **opts) as b:
        b._scheduler.skip_idle_recall = False
        searched_a, searched_b = _counted(a), _counted(b)
        recalled = sum(_same_call(a, b, {"model": "m", "messages": msgs[:k], "tools": [_BASH]}) for k in bounds)
    assert recalled > 0, "some calls recall: a skip that drops a recall would show"
    assert len(searched_a) < len(searched_b) / 2, "most calls have nothing to recall and do not search"


def _shared_page(store: Path, skip: bool) -> pager.Pager:
    """Return a session ``y`` of ``store`` where session ``x`` shared one page about four files."""
    paths = " ".join(f"src/pkg/mod_{i}.py" for i in range(4))
    x = [{"role": "system", "content": "sys"}, {"role": "user", "content": "look around"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "grep"}'}}]},
         {"role": "tool", "tool_call_id": "c1", "content": f"matches in {paths}\nValueError raised there"}]
    with pager.open(str(store), session="x", log_reports=False) as px:
        px.assemble({"model": "m", "messages": x})
        handle = px.history.handle[3]
        px.promote(handle, "shared")
    py = pager.open(str(store), session="y", log_reports=False)
    py._scheduler.skip_idle_recall = skip
    return py


def test_a_page_beyond_the_session_is_still_recalled(tmp_path: Path) -> None:
    """No row of ``y`` left out of its prompt is about the files, but another session's shared page is."""
    a, b = _shared_page(tmp_path / "a", True), _shared_page(tmp_path / "b", False)
    try:
        searched = _counted(a)
        paths = " ".join(f"src/pkg/mod_{i}.py" for i in range(4))
        y = [{"role": "system", "content": "sys"}, {"role": "user", "content": "another task"},
             {"role": "assistant", "content": f"now read {paths} for the ValueError"},
             {"role": "user", "content": "yes"}]
        assert _same_call(a, b, {"model": "m", "messages": y}) == 1, "the shared page is recalled"
        # the same request again: every row of y is in the prompt in full, so only the shared page can be
        # recalled (``beyond_only``), and it keeps its block at the tail
        before = len(searched)
        _same_call(a, b, {"model": "m", "messages": y})
        assert len(searched) == before + 1, "the index holds a page beyond the session: the call searched"
        assert "src/pkg/mod_0.py" in orjson.dumps(a.assemble({"model": "m", "messages": y})).decode()
    finally:
        a.close()
        b.close()
