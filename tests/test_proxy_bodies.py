"""pager.proxy.bodies: a resent history parsed once, and the result always what orjson.loads says."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.proxy.bodies import BodyCache


def chat(n: int, first: str = "fix the parser") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": first}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat a]{\\"b"}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f'out {i}: [{{"x": "\\\\"}}] é ✓ "q"\n'})
    return msgs


def body(msgs: list[Any], dumps: Any = orjson.dumps, **extra: Any) -> bytes:
    out = dumps({"model": "m", "messages": msgs, "tools": [{"type": "function", "function": {"name": "bash"}}], **extra})
    return out if isinstance(out, bytes) else out.encode()


def test_a_growing_conversation_reuses_its_earlier_items_and_parses_equal():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    prev = None
    for n in range(3, 9):
        raw = body(chat(n))
        req = cache.parse(raw, "messages")
        assert req == orjson.loads(raw)
        if prev is not None:
            reused = [a is b for a, b in zip(req["messages"], prev)]
            assert all(reused) and len(prev) == len(req["messages"]) - 2  # every earlier item: the same object
        prev = req["messages"]


def test_a_moved_cache_mark_reparses_from_the_changed_item_only():
    cache = BodyCache(min_bytes=0, key_bytes=40)

    def ant(n: int) -> bytes:
        msgs = [{"role": "user", "content": [{"type": "text", "text": f"turn {i}"}]} if i % 2 == 0 else
                {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]} for i in range(n)]
        msgs[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}  # Claude Code: the newest block
        return orjson.dumps({"model": "claude", "system": "sys", "messages": msgs, "stream": True})

    first = cache.parse(ant(9), "messages")
    second = cache.parse(ant(11), "messages")
    assert second == orjson.loads(ant(11))
    assert [a is b for a, b in zip(first["messages"], second["messages"])] == [True] * 8 + [False]


def test_formatted_json_and_a_changed_start_parse_equal():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    pretty = lambda v: json.dumps(v, indent=2, ensure_ascii=False)  # noqa: E731 - spaces and newlines everywhere
    for raw in (body(chat(4), pretty), body(chat(5), pretty), body(chat(5, "another task"), pretty),
                body(chat(6, "another task")), body(chat(6), model="x")):
        assert cache.parse(raw, "messages") == json.loads(raw)


def test_what_is_not_a_list_of_objects_is_parsed_whole():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    resp = {"model": "m", "input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "k"}]}
    for req in (resp, {**resp, "input": [*resp["input"], "a string item", 3]}, {**resp, "input": "just text"},
                {"model": "m"}, [1, 2], {**resp, "input": [*resp["input"], {"type": "function_call_output"}]}):
        raw = orjson.dumps(req)
        assert cache.parse(raw, "input") == req


def test_invalid_json_raises_as_orjson_does_even_after_a_valid_prefix():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    cache.parse(body(chat(3)), "messages")
    broken = body(chat(4))[:-30] + b"{{{"
    with pytest.raises(orjson.JSONDecodeError):
        cache.parse(broken, "messages")
    with pytest.raises(orjson.JSONDecodeError):
        cache.parse(body(chat(4)) + b"]", "messages")


def test_two_conversations_with_one_opening_each_extend_their_own():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    a, b = chat(4), chat(4)
    b[5] = {**b[5], "content": "another result"}  # a fork: the same opening, then another history
    ra = cache.parse(body(a), "messages")
    rb = cache.parse(body(b), "messages")
    a2, b2 = chat(5), [*b, *chat(5)[-2:]]
    for _ in range(2):
        assert cache.parse(body(a2), "messages")["messages"][9] is ra["messages"][9]
        got = cache.parse(body(b2), "messages")
        assert got == orjson.loads(body(b2)) and got["messages"][9] is rb["messages"][9]


def test_the_caller_may_change_the_list_it_gets():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    cache.parse(body(chat(3)), "messages")["messages"].append({"role": "user", "content": "mine"})
    raw = body(chat(4))
    assert cache.parse(raw, "messages") == orjson.loads(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(alphabet='ab"\\[]{},: \n\té✓', max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab[]\"", max_size=4), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=examples(50, 150), deadline=None)
@given(items=st.lists(st.dictionaries(st.text("kq\"]", max_size=3), json_values, max_size=3), max_size=6),
       edits=st.lists(st.tuples(st.integers(0, 8), json_values), max_size=4), indent=st.booleans())
def test_any_sequence_of_bodies_parses_as_orjson_does(items, edits, indent):
    cache = BodyCache(min_bytes=0, key_bytes=40)
    history = list(items)
    for at, value in edits:
        history.append({"v": value})
        if history and at < len(history):
            history[at] = {"edited": value}  # an earlier item changed, or the last
        req = {"model": "m", "messages": history, "tail": value}
        raw = json.dumps(req, indent=2).encode() if indent else orjson.dumps(req)
        assert cache.parse(raw, "messages") == orjson.loads(raw)


def test_count_tokens_with_a_memo_counts_only_new_messages_and_agrees(monkeypatch):
    import pager.proxy.counting as counting
    from pager.core.tokens import default_counter

    memo = counting.CountMemo()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "read a.py"}]
    for i in range(4):
        msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                    "input": {"file_path": f"/w/{i}.py"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"body {i}"}]}]
    req = {"system": [{"type": "text", "text": "You are terse."}], "messages": msgs,
           "tools": [{"name": "Read", "input_schema": {"type": "object"}}]}
    assert counting.count_request(req, memo) == counting.count_request(req)
    texts: list[str] = []
    real = default_counter()

    class Spy:
        def count(self, text: str) -> int:
            texts.append(text)
            return real.count(text)

    monkeypatch.setattr(counting, "default_counter", lambda: Spy())
    grown = {**req, "system": [{"type": "text", "text": "You are terse."}],  # the same value, new objects
             "messages": [*msgs, {"role": "assistant", "content": "done"}]}
    n = counting.count_request(grown, memo)
    assert texts == ["done"]  # system, tools and the nine earlier messages came from the memo
    texts.clear()
    assert n == counting.count_request(grown) and len(texts) == 12


def test_boundaries_found_ahead_spare_the_next_body_its_scan(monkeypatch):
    import pager.proxy.bodies as bodies

    cache = BodyCache(min_bytes=0, key_bytes=40)
    first = cache.parse(body(chat(6)), "messages")  # parsed whole: boundaries not known yet
    jobs = cache.take_pending()
    assert len(jobs) == 1 and cache.take_pending() == []
    cache.set_bounds(BodyCache.find_bounds(jobs))  # the proxy runs find_bounds in a worker thread

    def no_scan(*_a: Any) -> None:
        raise AssertionError("the earlier body was scanned on the next body's path")

    monkeypatch.setattr(bodies, "_find_array", no_scan)
    raw = body(chat(7))
    req = cache.parse(raw, "messages")
    assert req == orjson.loads(raw) and all(a is b for a, b in zip(req["messages"], first["messages"]))


def test_boundaries_found_for_a_body_since_replaced_are_not_kept():
    cache = BodyCache(min_bytes=0, key_bytes=40)
    cache.parse(body(chat(6)), "messages")
    jobs = cache.take_pending()
    found = BodyCache.find_bounds(jobs)
    seen = jobs[0][0]
    seen.raw = body(chat(5))  # what parse does to a record it extends, meanwhile
    cache.set_bounds(found)
    assert seen.start is None  # the other body's offsets would misplace every item
