"""Compact lines of dropped units: rendered, stable, and counted after a reopen."""

from __future__ import annotations

import pager
from pager.core.compact import INDEX_HEADER, compact_line
from pager.core.tokens import HeuristicCounter

from helpers import assistant, call, coding_session, tool


def test_compact_line_keeps_the_agents_call_and_the_handle() -> None:
    msg = assistant("Look at the parser", call("c1", "bash", command="grep -n parse_config src/app/config.py"))
    line = compact_line(msg, "assistant", "pg:4-abc", 7)
    assert line.startswith("pg:4-abc step 7 agent:") and "parse_config src/app/config.py" in line
    out = compact_line(tool("c1", "\n\nfirst line here\nsecond\n"), "tool", "pg:5-def", 7)
    assert out == "pg:5-def result, 4 lines: first line here"


def _index(messages) -> list[str]:
    return [str(m["content"]) for m in messages if INDEX_HEADER in str(m.get("content"))]


def test_a_round_writes_an_index_block_and_a_reopened_store_counts_its_lines(tmp_path) -> None:
    history = coding_session(30, output_lines=20) + [assistant("done")]
    opts = dict(counter=HeuristicCounter(), context_window=60_000, output_reserve=1_000, high_watermark=6_000,
                low_watermark=3_000, recent_units=2, compact_tokens=500,
                objective=False)  # index lines are written by the heat order's rounds
    with pager.open(tmp_path, session="c", **opts) as p:
        out = p.assemble({"messages": history[:-1]})
        blocks = _index(out["messages"])
        assert len(blocks) == 1 and "cat src/mod_" in blocks[0]
        assert p.last_report.tokens <= 60_000 - 1_000
        live = list(p.history.compact_tokens)  # counted by the round
        assert -1 not in live
    with pager.open(tmp_path, session="c", **opts) as p:
        out = p.assemble({"messages": history})
        p.history.fill_compact_tokens(history)  # what the next round does first: counted when first needed
        assert p.history.compact_tokens[: len(live)] == live and -1 not in p.history.compact_tokens
        assert _index(out["messages"]) == blocks  # appended to, not rebuilt: the same bytes
