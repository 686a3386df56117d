"""Inferences are never promoted to spec-confirmed requirements across windows, however relabelled."""

from __future__ import annotations

import json

import pytest

import pager
from pager.core.handoff import parse_handoff
from pager.core.promotion import check_promotion
from pager.core.tokens import HeuristicCounter
from pager.errors import ToolError

INFERENCE = "The output reserve is subtracted twice in hard_limit"


def memo(requirements, inferences=(), next_steps=("Run tests/test_budget.py",)):
    return parse_handoff({"handoff": {"requirements": list(requirements), "inferences": list(inferences),
                                      "conflicts": [], "next_steps": list(next_steps)}, "related_files": []})


@pytest.mark.parametrize("source", [
    "previous handoff inference",
    "handoff of window 2",
    "agent analysis",
    "my investigation in the previous window",
    "inferred from the stack trace",
    "assumption confirmed earlier",
    "hypothesis (verified)",
    "previous context",
    "context window 3",
    "the assistant, step 40",
    "new_context memo",
    "generation 2",
    "pg:41-a1b2c3",
])
def test_a_source_naming_the_agent_or_an_earlier_handoff_is_refused(source):
    with pytest.raises(ToolError, match="move it to inferences"):
        check_promotion(memo([{"text": "A prompt never exceeds the window", "source": source}]))


@pytest.mark.parametrize("text", [
    INFERENCE,
    INFERENCE.upper(),
    "Confirmed: " + INFERENCE + ".",
    "FACT: verified: " + INFERENCE.lower() + "!",
    "In hard_limit, the output reserve is subtracted twice",  # words reordered
    "  the   output reserve is subtracted twice in `hard_limit`  ",
])
def test_restating_an_earlier_inference_is_refused_whatever_the_source(text):
    req = [{"text": text, "source": "user, turn 1"}]
    with pytest.raises(ToolError, match="restates an inference of an earlier handoff"):
        check_promotion(memo(req), prior_inferences=[INFERENCE])


def test_the_earlier_handoffs_message_uuid_is_not_a_source():
    req = [{"text": "A prompt never exceeds the window", "source": "see msg 7f3a-trigger"}]
    with pytest.raises(ToolError):
        check_promotion(memo(req), prior_triggers=["7f3a-trigger"])


def test_the_same_claim_as_requirement_and_inference_at_once_is_refused():
    with pytest.raises(ToolError, match="one or the other"):
        check_promotion(memo([{"text": INFERENCE, "source": "user, turn 1"}], inferences=[INFERENCE]))


@pytest.mark.parametrize("source", ["user, turn 1", "docs/spec.md §2", "ticket ABC-12", "README.md",
                                    "issue 14", "user message at step 12", "RFC 9110 section 3"])
def test_real_sources_and_new_claims_pass(source):
    check_promotion(memo([{"text": "A prompt never exceeds the window", "source": source}]),
                    prior_inferences=[INFERENCE], prior_triggers=["pg:9-abc"])
    # an inference may stay an inference in every later window
    check_promotion(memo([], inferences=[INFERENCE]), prior_inferences=[INFERENCE])


def _nc(cid, requirements, inferences):
    args = {"handoff": {"requirements": requirements, "inferences": inferences, "conflicts": [],
                        "next_steps": ["Run tests/test_budget.py"]}, "related_files": []}
    return {"id": cid, "type": "function", "function": {"name": "new_context", "arguments": json.dumps(args)}}


def test_across_windows_through_the_tool(tmp_path):
    p = pager.open(tmp_path / "ctx", session="s", context_window=40_000, mode="rollover",
                   fallback_reserve=4_000, reminder_threshold=4_000, counter=HeuristicCounter(4.0),
                   log_reports=False)
    history = [{"role": "system", "content": "agent"}, {"role": "user", "content": "Fix hard_limit."}]
    p.assemble({"messages": history})
    c1 = _nc("nc1", [], [INFERENCE])
    history += [{"role": "assistant", "content": None, "tool_calls": [c1]}, p.call_tool(c1)]
    p.assemble({"messages": history})  # window 2 starts from the handoff
    assert p.last_report.reason == "rollover: model"
    for i, req in enumerate([
        {"text": INFERENCE, "source": "user, turn 1"},
        {"text": "Verified: " + INFERENCE.lower(), "source": "docs/spec.md"},
        {"text": "A prompt never exceeds the window", "source": "previous handoff inference"},
    ]):
        c = _nc(f"bad{i}", [req], [])
        answer = p.call_tool(c)
        assert answer["content"].startswith("Error: new_context:"), answer
    assert p.task_state().next == "Run tests/test_budget.py"
    assert p._mirror.state.scheduler.pending is None  # no refused handoff was recorded
    # a real requirement, with the inference kept as one, is accepted
    ok = p.call_tool(_nc("good", [{"text": "A prompt never exceeds the window", "source": "user, turn 1"}],
                          [INFERENCE]))
    assert ok["content"].startswith("A new context window will start")
    p.close()
    # the record of earlier inferences survives a reopen
    q = pager.open(tmp_path / "ctx", session="s", counter=HeuristicCounter(4.0))
    assert q.call_tool(_nc("again", [{"text": INFERENCE, "source": "user"}], []))["content"].startswith("Error")
    q.close()
