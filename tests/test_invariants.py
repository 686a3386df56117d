"""Property tests: the scheduler's invariants hold on random histories.

Invariants: never over budget; every tool call in the output has its result
and every result its call; kept history messages keep their relative order;
L1 (system messages and the first user message) is always present, verbatim;
the output is a valid OpenAI chat history.
"""

from __future__ import annotations


import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sizes import examples

import pager
from pager.core import pairing
from pager.formats.openai_chat import validate
from pager.core.heat import POLICIES
from pager.core.tokens import HeuristicCounter

WORDS = ["parse_config", "src/app.py", "ValueError", "retry_count", "42017", "the", "cache", "pg_stub", "line"]


@st.composite
def histories(draw):
    """Draw a valid history: system, user task, then steps of calls/results, text turns, user follow-ups."""
    rnd_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
    msgs = [{"role": "system", "content": draw(rnd_text)}, {"role": "user", "content": draw(rnd_text)}]
    n_steps = draw(st.integers(1, 40))
    cid = 0
    for _ in range(n_steps):
        kind = draw(st.sampled_from(["call", "call", "call", "parallel", "text", "user"]))
        if kind == "text":
            msgs.append({"role": "assistant", "content": draw(rnd_text)})
        elif kind == "user":
            msgs.append({"role": "user", "content": draw(rnd_text)})
        else:
            n = 2 if kind == "parallel" else 1
            ids = [f"c{cid + k}" for k in range(n)]
            cid += n
            path = draw(st.sampled_from(["src/a.py", "src/b.py", "README.md"]))
            msgs.append({
                "role": "assistant", "content": draw(st.one_of(st.none(), rnd_text)),
                "tool_calls": [
                    {"id": i, "type": "function",
                     "function": {"name": "bash", "arguments": orjson.dumps({"command": f"cat {path}"}).decode()}}
                    for i in ids
                ],
            })
            for i in ids:
                size = draw(st.sampled_from([1, 5, 50, 400, 3000]))
                msgs.append({"role": "tool", "tool_call_id": i, "content": (draw(rnd_text) + "\n") * size})
    return msgs


def _check(history, out, budget_tokens, report):
    assert report.tokens <= budget_tokens
    assert pairing.check(out) == []
    validate(out)
    # L1 verbatim at the top
    assert out[0] == history[0] and out[1] == history[1]
    # kept history messages in their original relative order
    positions = {id(m): i for i, m in enumerate(history)}
    seen = [positions[id(m)] for m in out if id(m) in positions]
    assert seen == sorted(seen)


# 10 examples in the suite (25 in the full campaign, tests/sizes.py): each example is a whole session (up to 40
# steps, outputs of up to 3000 lines) assembled at every prefix: rounds and BudgetError at the 6k window
@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    window=st.sampled_from([6_000, 20_000, 200_000]),
    policy=st.sampled_from(sorted(POLICIES)),
    recall_pages=st.sampled_from([0, 3]),
)
def test_invariants_hold_on_every_prefix(history, window, policy, recall_pages):
    counter = HeuristicCounter()
    if True:  # the in-memory store: the same contract as SQLite (pager.testing), no disk
        with pager.open(":memory:", session="prop", context_window=window, output_reserve=500, counter=counter,
                        policy=policy, high_watermark=min(3_000, window // 2), low_watermark=1_000,
                        recall_pages=recall_pages, recall_min_strength=1,
                        log_reports=False) as p:
            for n in range(2, len(history) + 1):
                if n < len(history) and history[n]["role"] == "tool":
                    continue  # the harness calls the model only after all results are in
                try:
                    out = p.assemble({"messages": history[:n]})["messages"]
                except pager.BudgetError as exc:
                    # allowed only when L1 plus the newest message cannot fit at all
                    assert exc.over_by > 0
                    continue
                _check(history[:n], out, window - 500, p.last_report)
