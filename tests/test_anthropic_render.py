"""Anthropic rendering in O(new) (issue 23): the turn memo and the column breakpoints equal a from-scratch render.

``pager.formats.anthropic_render`` resumes the last call's merge at a
checkpoint inside the head of the same message objects, and places cache
marks on kept columns. Whatever the caller does between calls (append, edit
an old message, drop the tail, insert pager's messages or a late system
message, move the caller's marks), the prompt must be the very bytes a fresh
format renders, in every ``cache_marks`` mode; and the recorder must not hash
a message again once it matched its row by hash (a moved cache mark).
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import scheduler_prompts
from sizes import examples

import pager
from pager.formats import breakpoints as bp
from pager.formats.anthropic_messages import AnthropicMessages
from pager.formats.base import RenderHints

MODES = ("pager", "merge", "caller")


def _conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    """An Anthropic history: thinking, text, tool calls, results (some errors), caller marks here and there."""
    def maybe_mark(block: dict[str, Any]) -> dict[str, Any]:
        r = rng.random()
        if r < 0.08:
            return {**block, "cache_control": {"type": "ephemeral"}}
        if r < 0.12:
            return {**block, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        return block

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing test in src/app.py"}]
    for t in range(turns):
        blocks: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            blocks.append({"type": "thinking", "thinking": f"plan {t}", "signature": f"sig{t}"})
        if rng.random() < 0.7:
            blocks.append(maybe_mark({"type": "text", "text": f"step {t}" if rng.random() < 0.9 else ""}))
        calls = [f"tu{t}_{j}" for j in range(rng.randrange(0, 3))]
        blocks += [{"type": "tool_use", "id": c, "name": "read", "input": {"path": f"src/{c}.py"}} for c in calls]
        if not blocks:
            blocks = [{"type": "text", "text": f"ok {t}"}]
        msgs.append({"role": "assistant", "content": blocks if rng.random() < 0.9 or calls else f"plain {t}"})
        results = [maybe_mark({"type": "tool_result", "tool_use_id": c, "content": f"out {c}\n" * 3,
                               **({"is_error": True} if rng.random() < 0.2 else {})}) for c in reversed(calls)]
        extra = [maybe_mark({"type": "text", "text": f"and then {t}"})] if rng.random() < 0.4 or not results else []
        user = results + extra
        msgs.append({"role": "user", "content": user if len(user) > 1 or rng.random() < 0.6 else
                     (user[0]["text"] if "text" in user[0] else user)})
    return msgs


def _steps(seed: int) -> list[tuple[list[Any], RenderHints]]:
    """Prompts of neutral messages the way the scheduler hands them over between and across rounds."""
    rng = random.Random(seed)
    system: Any = "You are careful." if rng.random() < 0.5 else [
        {"type": "text", "text": "You are careful."}, {"type": "text", "text": "Be brief.",
                                                       **({"cache_control": {"type": "ephemeral"}} if rng.random() < 0.5 else {})}]
    req = {"model": "claude", "max_tokens": 64, "system": system, "messages": _conversation(rng, 14)}
    full = list(AnthropicMessages().to_messages(req).messages)

    def edited(m: dict[str, Any], i: int) -> dict[str, Any]:  # a stub, or an edited user message
        if m["role"] == "tool":
            return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": f"[stub {i}]"}
        return {**m, "content": f"edited {i}", "native": None} if m["role"] == "user" else dict(m)

    out = []
    for cur in scheduler_prompts(full, rng, 12, edited):
        n = len(cur)
        hints = RenderHints(l1=rng.randrange(0, n + 1), stable=rng.randrange(0, n + 1),
                            previous=rng.choice([None, rng.randrange(0, n + 1)]))
        out.append((cur, hints))
    return out


def _tools(rng: random.Random) -> list[Any] | None:
    if rng.random() < 0.3:
        return None
    tools: list[Any] = [{"name": "read", "description": "read", "input_schema": {"type": "object"}}]
    if rng.random() < 0.3:
        tools.append({"name": "grep", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}})
    return tools


@settings(max_examples=examples(30, 80), deadline=None)
@given(seed=st.integers(0, 100_000))
def test_memoised_render_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    kept = AnthropicMessages()
    request = {"model": "claude", "max_tokens": 64, "tools": [{"name": "t", "input_schema": {}}]}
    for messages, hints in _steps(seed):
        tools = _tools(rng)
        for mode in MODES:
            got = kept.render(request, messages, tools=tools, hints=hints, cache_marks=mode)
            want = AnthropicMessages().render(request, messages, tools=tools, hints=hints, cache_marks=mode)
            assert orjson.dumps(got) == orjson.dumps(want), mode
            # the caller may change what it is given: nothing it does reaches the next call's prompt
            for turn in got["messages"]:
                if isinstance(turn["content"], list):
                    turn["content"].append({"type": "text", "text": "added by the caller"})
                turn["role"] = "changed"


def test_the_memo_resumes_inside_the_head() -> None:
    """A prompt that grows by a turn merges from the checkpoint before its tail, not from the start."""
    import pager.formats.anthropic_render as ar

    req = {"model": "claude", "max_tokens": 64, "system": "s", "messages": _conversation(random.Random(3), 30)}
    full = list(AnthropicMessages().to_messages(req).messages)
    memo = ar.TurnMemo()
    ar.merge(full[:-6], memo)
    _done, start = memo.start(full)
    assert len(full) - 10 <= start <= len(full) - 6
    assert full[start]["role"] == "assistant"
    _done, start = memo.start([dict(full[0])] + full[1:])  # another first message: another conversation
    assert start == 0


# -- breakpoints on columns ------------------------------------------------------------------------


def _place_reference(slots: list[bp.Slot], *, l1: int, stable: int, previous: int | None, mode: str) -> list[int]:
    """The placement as it was written before the columns (main at afcda09), walking every slot."""
    def before(i: int) -> int | None:
        while i >= 0:
            if slots[i].markable:
                return i
            i -= 1
        return None

    def boundary(count: int) -> int | None:
        end = len(slots)
        for i, s in enumerate(slots):
            if s.source >= count:
                end = i
                break
        return before(end - 1)

    chosen: set[int] = set()
    if mode != "pager":
        chosen.update([i for i, s in enumerate(slots) if s.caller][-4:])
        if mode == "caller":
            return sorted(chosen)
    wanted = [before(len(slots) - 1)] + ([boundary(previous)] if previous is not None else [])
    for w in wanted + [boundary(l1), boundary(stable)]:
        if len(chosen) >= 4:
            break
        if w is not None:
            chosen.add(w)
    while chosen and len(chosen) < 4:
        marks = sorted(chosen)
        gaps = [(b - a, b) for a, b in zip([-1, *marks], marks) if b - a > bp.LOOKBACK_BLOCKS]
        if not gaps:
            break
        spot = before(max(gaps)[1] - bp.LOOKBACK_BLOCKS)
        if spot is None or spot in chosen:
            break
        chosen.add(spot)
    return sorted(chosen)


_slot = st.builds(bp.Slot, st.integers(-1, 40), st.booleans(), st.booleans())


# 150 examples in the suite (400 in the full campaign, tests/sizes.py): up to 90 slots of every kind per draw
@settings(max_examples=examples(150, 400), deadline=None)
@given(slots=st.lists(_slot, max_size=90), l1=st.integers(0, 42), stable=st.integers(0, 42),
       previous=st.one_of(st.none(), st.integers(0, 42)), mode=st.sampled_from(MODES))
def test_place_on_columns_equals_the_walk(slots: list[bp.Slot], l1: int, stable: int, previous: int | None,
                                          mode: str) -> None:
    # sources out of order too: a late system message's blocks sit before the turns
    assert bp.place(slots, l1=l1, stable=stable, previous=previous, mode=mode) == _place_reference(
        slots, l1=l1, stable=stable, previous=previous, mode=mode)


# -- the recorder and a moved cache mark ------------------------------------------------------------


def test_a_message_resent_without_its_mark_is_matched_by_identity_afterwards() -> None:
    """Claude Code marks its newest block; next call that message comes back unmarked, a new object.

    It matches its row by hash once; from then on it is the row's object, so
    the call after does not hash it (and everything after it) again.
    """
    msgs = _conversation(random.Random(5), 12)
    req = {"model": "claude", "max_tokens": 64, "system": "s", "messages": msgs[:-2]}
    last = req["messages"][-1]
    marked = {**last, "content": [{**b, "cache_control": {"type": "ephemeral"}} for b in last["content"]]} \
        if isinstance(last["content"], list) else {**last, "content": [{"type": "text", "text": last["content"],
                                                                        "cache_control": {"type": "ephemeral"}}]}
    with tempfile.TemporaryDirectory() as d:
        p = pager.open(d, "s", context_window=200_000)
        try:
            p.assemble({**req, "messages": msgs[:-3] + [marked]}, format="anthropic-messages")
            second = {**req, "messages": msgs[:-1]}  # the marked message unmarked, and one more
            p.assemble(second, format="anthropic-messages")
            third = {**req, "messages": msgs}
            fmt = p._format(third, "anthropic-messages")
            recorded = len(fmt.to_messages(second).messages)
            neutral = fmt.to_messages(third).messages
            assert len(neutral) > recorded
            assert p._recorder.same_prefix(neutral) == recorded  # all but the newest message's
        finally:
            p.close()


def test_the_head_memo_keeps_the_same_or_equal_messages_of_dicts_and_of_other_mappings() -> None:
    """``HeadMemo``'s head: the very same objects, or equal ones; a message replaced by another ends it."""
    from collections import UserDict

    from pager.formats._heads import HeadMemo

    for make in (dict, UserDict):
        msgs = [make(role="user", content=[{"type": "text", "text": f"m{i}"}]) for i in range(6)]
        msgs[2] = make(role="assistant")  # no content at all
        memo = HeadMemo()
        memo.put(msgs, list(range(6)), list(range(7)))
        assert memo.head(msgs + [make(role="user", content="new")])[0] == 6
        memo.abandon()  # no put: what head handed over is remembered again, as it was
        msgs[3] = make(msgs[3])  # an equal copy: the same message
        assert memo.head(msgs)[0] == 6
        memo.abandon()
        msgs[4] = make(role="user", content=[{"type": "text", "text": "replaced"}])  # another message
        assert memo.head(msgs)[0] == 4
        assert memo.head(msgs[:2])[0] == 2  # a shorter list: its head, the memo kept as it was
        assert memo.head(msgs)[0] == 4


def test_the_head_memo_hands_its_lists_over_and_takes_them_back() -> None:
    """A list that only grew: ``head`` gives the remembered lists themselves, ``put`` keeps them extended."""
    from pager.formats._heads import HeadMemo

    msgs = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    memo = HeadMemo()
    memo.put(msgs, ["n0", "n1", "n2", "n3"], [0, 1, 2, 3, 4])
    longer = msgs + [{"role": "user", "content": "m4"}]
    k, neutral, last, ends = memo.head(longer)
    assert (k, neutral, last, ends) == (4, ["n0", "n1", "n2", "n3"], ["n3"], [0, 1, 2, 3, 4])
    assert memo.head(longer)[0] == 0  # handed over: not in the memo until put
    neutral.append("n4")
    ends.append(5)
    memo.head(longer)  # another head in between (a miss) does not lose what the first handed over
    memo.put(longer, neutral, ends, head=4)
    # the memo has it; put after a miss is the plain put
    k, neutral, last, ends = memo.head(longer + [{"role": "user", "content": "m5"}])
    assert (k, last, ends) == (5, ["n4"], [0, 1, 2, 3, 4, 5])
    # a shorter list than remembered: copies, the memo keeps its lists
    memo.put(longer, neutral, ends, head=5)
    k, neutral, _last, ends = memo.head(longer[:3])
    assert (k, neutral, ends) == (3, ["n0", "n1", "n2"], [0, 1, 2, 3])
    assert memo.head(longer)[0] == 5


def test_a_moved_cache_mark_cuts_the_remembered_lists_and_hands_them_over(monkeypatch) -> None:
    """The last remembered message resent as another value, new ones after it: no scan, no copy of the head.

    A client that moves its cache mark to its newest message re-sends the one it marked before as
    another value every call; scanning and copying the head each time made the call O(history).
    """
    import pager.formats._heads as heads_module
    from pager.formats._heads import HeadMemo

    scans: list[int] = []
    real_run = heads_module.same_run

    def counted_run(a, b):  # the item-by-item scan the two list comparisons spare
        scans.append(len(a))
        return real_run(a, b)

    monkeypatch.setattr(heads_module, "same_run", counted_run)

    mark = {"type": "ephemeral"}
    msgs = [{"role": "user", "content": [{"type": "text", "text": f"m{i}"}]} for i in range(3)]
    msgs.append({"role": "user", "content": [{"type": "text", "text": "m3", "cache_control": mark}]})
    memo = HeadMemo()
    neutral0, ends0 = ["n0", "n1", "n2", "n3"], [0, 1, 2, 3, 4]
    memo.put(msgs, neutral0, ends0, state="after m3")
    moved = [*msgs[:3], {"role": "user", "content": [{"type": "text", "text": "m3"}]},
             {"role": "user", "content": [{"type": "text", "text": "m4", "cache_control": mark}]}]
    k, neutral, last, ends, state = memo.head_state(moved, last=True)
    monkeypatch.undo()
    assert (k, neutral, last, ends, state) == (3, ["n0", "n1", "n2"], ["n2"], [0, 1, 2, 3], None)
    assert not scans  # the head was found by comparing lists (pointers), not item by item
    assert neutral is neutral0 and ends is ends0  # the remembered lists, cut in place: no copy
    assert memo.head(moved)[0] == 0  # handed over: not in the memo until put
    neutral += ["n3'", "n4"]
    ends += [4, 5]
    memo.put(moved, neutral, ends, state="after m4", head=3)
    assert memo.head_state([*moved, {"role": "assistant", "content": "ok"}])[::4] == (5, "after m4")
    memo.abandon()
    # a failed call gives the cut lists back, without the state that followed the old last message
    memo.put(msgs, ["n0", "n1", "n2", "n3"], [0, 1, 2, 3, 4], state="after m3")
    assert memo.head_state(moved)[0] == 3
    memo.abandon()
    assert memo.head_state(msgs[:3] + [moved[3]])[::4] == (3, None)
    memo.abandon()
    # a request that stops short of the last one (overtaken by a newer) leaves the memo whole
    memo.put(msgs, ["n0", "n1", "n2", "n3"], [0, 1, 2, 3, 4], state="after m3")
    assert memo.head(msgs[:3])[0] == 3 and memo.head_state(msgs)[::4] == (4, "after m3")


def test_threads_converting_one_history_with_their_own_new_messages_get_fresh_conversions() -> None:
    """The head memo hands its lists to one thread at a time: a collision costs a conversion, never a wrong one.

    Each thread resends the same history (the very same objects), alone and then with new messages of its
    own, so several threads find the whole remembered list as their head at once.
    """
    import sys
    import threading

    from pager.formats.anthropic_messages import AnthropicMessages

    fmt = AnthropicMessages()
    shared: list[Any] = [{"role": "user", "content": "the same opening"}]
    for n in range(20):
        shared += [{"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"ask {n}"}]
    want_shared = orjson.dumps(AnthropicMessages().to_messages({"messages": shared}).messages)
    failures: list[str] = []

    def worker(t: int) -> None:
        for n in range(300):
            if orjson.dumps(fmt.to_messages({"messages": shared}).messages) != want_shared:
                failures.append(f"thread {t} call {n}: the shared history")
            own = [*shared, {"role": "assistant", "content": f"thread {t} reply {n}"},
                   {"role": "user", "content": f"thread {t} asks {n}"}]
            got = fmt.to_messages({"messages": own}).messages
            if orjson.dumps(got) != orjson.dumps(AnthropicMessages().to_messages({"messages": own}).messages):
                failures.append(f"thread {t} call {n}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave inside a conversion, not only between them
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures[:3]


def test_a_failed_conversion_leaves_the_head_memo_as_it_was() -> None:
    """A malformed new message raises and the next, corrected request still converts only what is new."""
    from pager.errors import MessageError
    from pager.formats._heads import HeadMemo
    from pager.formats.anthropic_messages import AnthropicMessages

    fmt = AnthropicMessages()
    calls: list[int] = []
    real = HeadMemo.head_state

    def spy(self: HeadMemo, messages: Any, **kw: Any) -> Any:
        out = real(self, messages, **kw)
        calls.append(out[0])
        return out

    msgs: list[Any] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    fmt.to_messages({"messages": msgs})
    bad = msgs + [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]
    HeadMemo.head_state = spy  # type: ignore[method-assign]
    try:
        with pytest.raises(MessageError):
            fmt.to_messages({"messages": bad})
        good = msgs + [{"role": "user", "content": "go on"}]
        assert [n["content"] for n in fmt.to_messages({"messages": good}).messages][-1] == "go on"
    finally:
        HeadMemo.head_state = real  # type: ignore[method-assign]
    assert calls == [2, 2]  # the corrected request found the whole head again
