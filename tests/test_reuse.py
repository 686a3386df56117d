"""What a paging call reuses of the previous call equals a from-scratch computation (issue 23).

Between rounds a call renders only the slots after the head the previous call
rendered the same (``pager.schedulers.reuse``), normalises only after the last
closed point (``pairing.normalize_after``), reuses the rows of the layout's
state, the layer figures, the re-readable rows and the prompt diff, and keeps
the layout itself as its state (no ``from_state`` round trip). Each must give
what the whole computation gives: the same prompt bytes, the same report, the
same saved state, whatever the caller does between calls (append, resend a
message as an equal new object, edit an old one, drop the tail, switch the
wire format).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sizes import examples, size

import pager
from pager.core import pairing
from pager.core.canonical import same_objects
from pager.core.plan import Layout
from pager.lab.synth import generate_session
from pager.schedulers.paging import PagingScheduler

# -- pairing.normalize_after ---------------------------------------------------------------------

_IDS = [f"c{i}" for i in range(5)]
_message = st.one_of(
    st.builds(lambda ids: {"role": "assistant", "content": "", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]},
        st.lists(st.sampled_from(_IDS), min_size=1, max_size=2)),
    st.builds(lambda i: {"role": "tool", "tool_call_id": i, "content": "out"}, st.sampled_from(_IDS)),
    st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant"]), st.text(max_size=3)),
)
# one change between calls: keep the first ``cut`` messages (None: all), replace one by an equal copy, add some
_change = st.tuples(st.one_of(st.none(), st.integers(0, 30)), st.one_of(st.none(), st.integers(0, 30)),
                    st.lists(_message, max_size=5))


# 100 examples in the suite (300 in the full campaign): each draws up to 6 changes of every kind (a cut,
# an edited old message, calls without results, results without calls) over 5 ids that collide often
@settings(max_examples=examples(100, 300), deadline=None)
@given(first=st.lists(_message, max_size=12), changes=st.lists(_change, max_size=6))
def test_normalize_after_equals_normalize(first: list[dict[str, Any]], changes: list[Any]) -> None:
    msgs = first
    prev = pairing.normalize_after(msgs)
    assert prev.out == pairing.normalize(msgs)
    for cut, copy_at, new in changes:
        msgs = (msgs if cut is None else msgs[:cut]) + new
        if copy_at is not None and msgs:
            i = copy_at % len(msgs)
            msgs[i] = {**msgs[i], "content": "edited"}  # an edited old message: a new object
        got = pairing.normalize_after(msgs, prev)
        want = pairing.normalize(msgs)
        assert got.out == want
        # the caller's own objects, never an earlier call's (only synthetic results are pager's)
        assert all(a is b for a, b in zip(got.out, want) if a.get("content") != pairing.SYNTHETIC_RESULT)
        scratch = pairing.normalize_after(msgs)
        assert (got.points, got.sizes) == (scratch.points, scratch.sizes)
        prev = got


def test_normalize_after_reads_an_edited_old_message() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    msgs = [{"role": "user", "content": "go"}, call, {"role": "tool", "tool_call_id": "a", "content": "1"}]
    prev = pairing.normalize_after(msgs)
    edited = [msgs[0], call, {"role": "tool", "tool_call_id": "b", "content": "1"}, {"role": "user", "content": "x"}]
    assert pairing.normalize_after(edited, prev).out == pairing.normalize(edited)


def test_same_objects_is_identity_not_equality() -> None:
    a, b = {"n": 1}, {"n": True}
    assert a == b
    assert same_objects([a, a], [a, b]) == 1
    assert same_objects([a], [a, b]) == 1
    assert same_objects([], [a]) == 0


# -- a paging session, reusing, against one computed from scratch every call ----------------------


def _forget(p: pager.Pager) -> None:
    """Drop every memo of the previous call, and read the layout back as a reopened session would."""
    sched = p._scheduler
    assert isinstance(sched, PagingScheduler)
    sched._rendered = sched._dumped = sched._layered = sched._rereadable = None
    state = p._mirror.state
    if state.scheduler is not None:
        saved = orjson.loads(orjson.dumps(state.scheduler.to_state()))
        p._mirror.state = attrs.evolve(state, scheduler=Layout.from_state(saved))


def _to_anthropic(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return a chat history as an Anthropic request (system apart, tool results as user blocks)."""
    out: list[dict[str, Any]] = []
    system = ""
    for m in msgs:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": orjson.loads(c["function"]["arguments"] or "{}")} for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m["role"], "content": m["content"] or "."})
    return {"model": "m", "max_tokens": 64, "system": system, "messages": out}


def _run(steps: list[tuple[str, Any]], opts: dict[str, Any]) -> Counter[str]:
    """Feed the same requests to a reusing session and a from-scratch one; every output must be equal.

    Return how many calls there were and how many of them were a round, a fork, behind the recorded
    branch or recalled pages: the cases a reusing call must get right, so that a test can assert its
    session (shortened in the suite, tests/sizes.py) still reaches them.
    """
    seen: Counter[str] = Counter()
    with pager.open(":memory:", **opts) as a, pager.open(":memory:", **opts) as b:
        for kind, request in steps:
            kw: dict[str, Any] = {"reread_only": True} if opts.get("expose_tools") is False else {}
            if kind == "anthropic":
                kw["format"] = "anthropic-messages"
            got = a.assemble(request, **kw)
            _forget(b)
            want = b.assemble(request, **kw)
            assert orjson.dumps(got) == orjson.dumps(want)
            ra, rb = a.last_report.to_dict(), b.last_report.to_dict()
            ra.pop("elapsed_ms"), rb.pop("elapsed_ms")
            assert ra == rb
            sa, sb = a._mirror.state, b._mirror.state
            assert orjson.dumps(sa.row(a._scheduler)) == orjson.dumps(sb.row(b._scheduler))
            assert Layout.from_state(orjson.loads(orjson.dumps(sa.scheduler.to_state()))) == sa.scheduler
            # each page in at most one slot (``paging._demoted`` compares only the layouts' tails)
            pages = [s.page for s in sa.scheduler.slots if s.kind in ("full", "stub")]
            assert len(pages) == len(set(pages))
            report = a.last_report
            seen.update(calls=1, round=report.round, fork=report.changed_from is not None,
                        behind=report.behind > 0, recalled=report.pages_recalled > 0, **{kind: 1})
    return seen


def _session(seed: int, n_steps: int) -> list[dict[str, Any]]:
    _h, msgs = generate_session(seed, n_steps, big_every=6)
    return msgs


_BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}


def _growing(msgs: list[dict[str, Any]], rng: random.Random, edits: bool) -> list[tuple[str, Any]]:
    """Return the calls of a harness that resends its growing history, with the changes ``edits`` allows."""
    bounds = [k for k in range(2, len(msgs) + 1) if k == len(msgs) or msgs[k]["role"] == "assistant"]
    cur = list(msgs)  # the conversation as the harness holds it
    steps: list[tuple[str, Any]] = []
    for k in bounds:
        k = min(k, len(cur))
        r = rng.random() if edits and k > 6 else 1.0
        i = rng.randrange(2, k - 2) if k > 6 else 0
        if r < 0.15:
            # an equal message as a new object, its keys in another order: the prompt must carry this one
            cur[i] = dict(reversed(list(cur[i].items())))
        elif r < 0.2 and cur[i]["role"] in ("user", "assistant") and isinstance(cur[i].get("content"), str):
            cur[i] = {**cur[i], "content": cur[i]["content"] + " (edited)"}  # an edited old message: a fork
        elif r < 0.23 and cur[i]["role"] == "user":
            del cur[i]  # a dropped message: a fork
            k -= 1
        sent = cur[:k]
        if r > 0.95:
            sent = sent[:-3]  # an overtaken request: behind the recorded branch
        steps.append(("chat", {"model": "m", "messages": sent, "tools": [_BASH]}))
    return steps


@pytest.mark.parametrize("opts", [
    {"context_window": 6000},
    {"context_window": 9000, "compact_tokens": 300, "recall_leaves": False},
    {"context_window": 20000, "expose_tools": False},
    {"context_window": 8000, "l1_cap": 40},
])
def test_a_reusing_session_emits_what_a_from_scratch_one_does(opts: dict[str, Any]) -> None:
    rng = random.Random(5)
    # 35 steps in the suite (70 in the full campaign; a call's cost grows with the session, so half the
    # steps is a quarter of the time): each of the four sessions still has at least two rounds, forks,
    # overtaken requests and recalls (measured 4-9, 5-20, 2, 2-9)
    seen = _run(_growing(_session(3, size(35, 70)), rng, edits=True), {"session": "s", **opts})
    assert min(seen["round"], seen["fork"], seen["behind"], seen["recalled"]) >= 2, seen


def test_reuse_holds_under_random_edits() -> None:
    seen: Counter[str] = Counter()
    _random_edits(seen)
    # over the examples (one session each may be too short for a round): rounds, forks and recalls happen
    assert min(seen["round"], seen["fork"], seen["recalled"]) > 0, seen


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def _random_edits(seen: Counter[str], seed: int) -> None:
    rng = random.Random(seed)
    # 25 steps in the suite (40 in the full campaign): a session of 20 already had 2-3 rounds and 4-6 forks
    seen.update(_run(_growing(_session(seed, size(25, 40)), rng, edits=True), {"session": "s", "context_window": 5000}))


def test_switching_the_wire_format_between_calls() -> None:
    # 20 steps in the suite (40 in the full campaign): still a dozen rounds, and calls in each format
    msgs = _session(11, size(20, 40))
    steps = _growing(msgs, random.Random(1), edits=False)
    mixed = [("anthropic", _to_anthropic(req["messages"])) if i % 3 == 1 else (k, req)
             for i, (k, req) in enumerate(steps)]
    seen = _run(mixed, {"session": "s", "context_window": 6000})
    assert seen["round"] >= 5 and seen["anthropic"] >= 5 and seen["chat"] >= 10, seen


# -- a format converting only what follows the head of the last call's list ------------------------


# 10 examples in the suite (25 in the full campaign): each converts 6 growing lists with random edits
@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_anthropic_conversion_reuses_only_the_same_objects(seed: int) -> None:
    from pager.formats.anthropic_messages import AnthropicMessages

    rng = random.Random(seed)
    req = _to_anthropic(_session(seed, 12))
    msgs = req["messages"]
    fmt = AnthropicMessages()
    for k in range(2, len(msgs) + 1, 2):
        sent = msgs[:k]
        r = rng.random()
        i = rng.randrange(k)
        if r < 0.2:
            msgs[i] = dict(reversed(list(msgs[i].items())))  # an equal copy, keys reordered
        elif r < 0.3 and isinstance(msgs[i]["content"], str):
            msgs[i] = {**msgs[i], "content": msgs[i]["content"] + " (edited)"}  # an edit: a new dict
        elif r < 0.35 and k > 3:
            sent = sent[: k - 2]  # a shorter list
        sent = msgs[: len(sent)]
        got = fmt.to_messages({**req, "messages": sent})
        want = AnthropicMessages().to_messages({**req, "messages": sent})  # no memo at all
        assert orjson.dumps(got.messages) == orjson.dumps(want.messages)


def test_an_edit_in_place_is_not_seen_a_replaced_message_is() -> None:
    """The documented contract (``Pager.assemble``): to edit a message, replace the dict.

    A message whose ``content`` is replaced inside the same dict is the
    message converted before (as the recorder has it in every format); the
    same edit made by replacing the dict is converted anew.
    """
    from pager.formats.anthropic_messages import AnthropicMessages

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                                  {"role": "user", "content": "second"}]
    fmt = AnthropicMessages()
    fmt.to_messages({"messages": msgs})
    msgs[0]["content"] = "first, edited in place"
    msgs.append({"role": "assistant", "content": "fine"})
    assert fmt.to_messages({"messages": msgs}).messages[0]["content"] == "first"
    msgs[0] = {**msgs[0], "content": "first, replaced"}
    msgs.append({"role": "user", "content": "third"})
    assert fmt.to_messages({"messages": msgs}).messages[0]["content"] == "first, replaced"


def test_a_failed_responses_conversion_takes_back_the_calls_it_saw() -> None:
    """The set of every call id seen is grown in place; a request that fails leaves it as it was."""
    from pager.errors import InputError
    from pager.formats.openai_responses import OpenAIResponses

    fmt = OpenAIResponses()
    items: list[Any] = [{"role": "user", "content": "go"},
                        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    fmt.to_messages({"input": items})
    call = {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}
    stray = {"type": "function_call_output", "call_id": "zz", "output": "x"}  # raises once c9 is seen
    with pytest.raises(InputError, match="zz"):
        fmt.to_messages({"input": [*items, call, stray]})
    # c9 was never in a request that converted: its output alone is an output for a call not in input
    with pytest.raises(InputError, match="not in input"):
        fmt.to_messages({"input": [*items, {"type": "function_call_output", "call_id": "c9", "output": "x"}]})


_ITEM = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=3)),
    st.builds(lambda t: {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]},
              st.text(max_size=3)),
    st.builds(lambda t: {"type": "reasoning", "summary": [{"type": "summary_text", "text": t}]}, st.text(max_size=3)),
    st.just("call"),  # a function call and its output
)


def _items(spec: list[Any], base: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, x in enumerate(spec):
        if x == "call":
            cid = f"call_{base}_{n}"
            out += [{"type": "function_call", "call_id": cid, "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": cid, "output": "ok"}]
        else:
            out.append(dict(x))
    return out


@settings(max_examples=examples(30, 60), deadline=None)  # each draws up to 5 growths of every item kind
@given(first=st.lists(_ITEM, max_size=6), more=st.lists(st.tuples(st.lists(_ITEM, max_size=4), st.integers(0, 9)),
                                                        max_size=5))
def test_responses_conversion_reuses_only_the_same_objects(first: list[Any], more: list[Any]) -> None:
    """A list that grows by items converts as a fresh format converts it, runs of model items included."""
    from pager.formats.openai_responses import OpenAIResponses

    fmt = OpenAIResponses()
    items = _items(first, 0)
    for step, (spec, edit) in enumerate(more, 1):
        for sent in (items, items + _items(spec, step)):
            if edit == 0 and sent:
                sent[-1] = dict(sent[-1])  # an equal copy of the last item
            got = fmt.to_messages({"model": "m", "input": sent})
            want = OpenAIResponses().to_messages({"model": "m", "input": sent})
            assert orjson.dumps(got.messages) == orjson.dumps(want.messages)
        items = sent
