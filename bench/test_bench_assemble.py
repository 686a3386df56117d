"""assemble() latency on sessions of 100, 1,000 and 10,000 messages (run with ``pytest bench/``).

Each round appends one step (an assistant call and its result) to a session
that already holds N messages and times the ``assemble`` that records and
schedules it: the cost a harness pays per model call in steady state.
"""

from __future__ import annotations

import itertools

import pytest

import pager
from pager.lab.synth import generate_session


def _history(n: int) -> list[dict]:
    msgs: list[dict] = []
    seed = itertools.count()
    while len(msgs) < n + 400:
        _header, session = generate_session(next(seed), 200)
        body = session if not msgs else [m for m in session if m["role"] in ("assistant", "tool")]
        # call ids must be unique across the stitched sessions
        k = len(msgs)
        for m in body:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"{c['id']}-{k}"} for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}-{k}"
            msgs.append(m)
    # cut at a step boundary: the next message is an assistant one
    while msgs[n]["role"] != "assistant":
        n += 1
    return msgs[: n + 400]


@pytest.mark.parametrize("n", [100, 1_000, 10_000])
def test_assemble_latency(benchmark, tmp_path, n):
    history = _history(n)
    p = pager.open(tmp_path / "ctx", session="bench", context_window=200_000, log_reports=False)
    pos = [n]
    p.assemble({"messages": history[:n]})

    def setup():
        # one more step: up to and including the results of the next assistant message
        end = pos[0] + 1
        while end < len(history) and history[end]["role"] == "tool":
            end += 1
        pos[0] = end
        return ({"messages": history[:end]},), {}

    benchmark.pedantic(p.assemble, setup=setup, rounds=60, iterations=1)
    benchmark.extra_info["session_messages"] = n
    assert p.last_report.tokens <= p.options.budget
    p.close()
