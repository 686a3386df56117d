"""A history rebuilt for every call costs what a resent list does (issue 23).

A harness that decodes or rebuilds its history for each call passes equal
values in new objects. ``pager.core.canonical.resent`` maps the head equal to
the last call's back to those objects, so the formats' memos, the recorder
and the renderers do work for what is new only. What the caller gets back
must not change: the same prompts, call for call, as from the very objects.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import pager
import pager.recording
from pager.core.canonical import resent
from pager.formats import anthropic_blocks, openai_responses
from pager.formats.export import export_request
from pager.lab.synth import generate_session

FORMATS = ("openai-chat", "anthropic-messages", "openai-responses")


def test_the_head_of_equal_items_becomes_the_previous_objects():
    prev = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    new = [prev[0], {"role": "assistant", "content": "b"}, {"role": "user", "content": "C"}, {"role": "user", "content": "d"}]
    out = resent(prev, new)
    assert out == new and out is not new
    assert out[0] is prev[0] and out[1] is prev[1] and out[2] is new[2] and out[3] is new[3]
    # a history decoded anew: new objects from the first, equal up to an edit
    fresh = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "B"}, {"role": "user", "content": "c"}]
    out = resent(prev, fresh)
    assert out == fresh and out[0] is prev[0] and out[1] is fresh[1] and out[2] is fresh[2]
    # nothing to replace: the caller's own list comes back
    assert resent(prev, prev) is prev and resent(prev, [*prev, {"x": 1}])[:3] == prev
    grown = [*prev, {"role": "assistant", "content": "e"}]
    assert resent(prev, grown) is grown
    assert resent(None, new) is new and resent([], new) is new and resent(prev, "text") == "text"
    # the last item the two share is the same object: taken as resent whole, in one identity test
    mid = [prev[0], {"role": "assistant", "content": "b"}, prev[2]]
    assert resent(prev, mid) is mid
    # a shorter resend (an overtaken request) maps what it has
    short = [{"role": "user", "content": "a"}]
    assert resent(prev, short)[0] is prev[0]


def test_a_moved_cache_mark_costs_two_identity_tests_not_a_walk():
    compared: list[int] = []

    class Counting(dict):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            compared.append(1)
            return dict.__eq__(self, other)

        def __ne__(self, other: object) -> bool:
            compared.append(1)
            return dict.__ne__(self, other)

    marked = {"role": "user", "content": [{"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}}]}
    prev = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, marked]
    # the middle is another object (a walk would compare it); the item before the moved mark is the same
    items = [Counting(role="user", content="a"), prev[1],
             {"role": "user", "content": [{"type": "text", "text": "c"}]}, {"role": "assistant", "content": "d"}]
    assert resent(prev, items) is items and not compared
    # without the item before it the same, the walk runs and maps the equal first item back
    items2 = [Counting(role="user", content="a"), {"role": "assistant", "content": "B"}, items[2], items[3]]
    out = resent(prev, items2)
    assert compared and out[0] is prev[0] and out[1:] == items2[1:]


def test_a_value_whose_comparison_raises_ends_the_head():
    class Odd(dict):  # type: ignore[type-arg]
        def __ne__(self, other: object) -> bool:
            raise ValueError("no comparing me")

    prev = [{"a": 1}, {"b": 2}]
    new = [{"a": 1}, Odd(b=2)]
    assert resent(prev, new) is new


def _requests(fmt: str, calls: int) -> list[dict[str, Any]]:
    """Requests of one synthetic session in ``fmt``, each cut before an assistant message, sharing objects."""
    from pager.formats.base import get_format

    _header, msgs = generate_session(5, calls + 40)
    neutral = get_format("openai-chat").to_messages({"model": "m", "messages": msgs}).messages
    key = "input" if fmt == "openai-responses" else "messages"
    whole = export_request(neutral, fmt, request={"model": "m", "max_tokens": 512})
    cuts = [i for i, m in enumerate(whole[key]) if m.get("role") == "assistant" or m.get("type") == "function_call"]
    out = []
    for cut in cuts[2: 2 + calls]:
        req = {k: v for k, v in whole.items() if k != key}
        req[key] = whole[key][:cut]  # slices of one list: the very objects, as a harness appending would pass
        out.append(req)
    return out


def _run(tmp, requests: list[bytes | dict[str, Any]], fmt: str) -> list[bytes]:
    out = []
    with pager.open(tmp, session="s", context_window=12000) as p:
        for req in requests:
            body = orjson.loads(req) if isinstance(req, bytes) else req
            out.append(orjson.dumps(p.assemble(body, format=fmt), option=orjson.OPT_SORT_KEYS))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_history_decoded_anew_each_call_gets_the_same_prompts(fmt, tmp_path):
    requests = _requests(fmt, 24)
    shared = _run(tmp_path / "shared", requests, fmt)
    fresh = _run(tmp_path / "fresh", [orjson.dumps(r) for r in requests], fmt)
    assert fresh == shared
    assert any(b"pg:" in x for x in shared)  # the budget made pager page: rounds ran too


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_history_decoded_anew_each_call_is_converted_and_hashed_for_its_new_messages_only(fmt, tmp_path,
                                                                                            monkeypatch):
    hashed: list[int] = []
    converted: list[int] = []
    real_one, real_many = pager.recording.hash_message, pager.recording.hash_messages

    def one(msg: Any, i: int) -> Any:
        hashed.append(1)
        return real_one(msg, i)

    def many(msgs: Any, offset: int = 0) -> Any:
        hashed.append(len(msgs))
        return real_many(msgs, offset=offset)

    def checked(real: Any) -> Any:
        def check(value: Any, fail: Any) -> None:  # what a format runs on each item it converts
            converted.append(1)
            real(value, fail)
        return check

    monkeypatch.setattr(pager.recording, "hash_message", one)
    monkeypatch.setattr(pager.recording, "hash_messages", many)
    for module in (anthropic_blocks, openai_responses):
        monkeypatch.setattr(module, "check_encodable", checked(module.check_encodable))
    requests = _requests(fmt, 16)
    key = "input" if fmt == "openai-responses" else "messages"
    with pager.open(tmp_path, session="s") as p:
        p.assemble(orjson.loads(orjson.dumps(requests[0])), format=fmt)
        for prev, req in zip(requests, requests[1:]):
            hashed.clear()
            converted.clear()
            p.assemble(orjson.loads(orjson.dumps(req)), format=fmt)
            new = len(req[key]) - len(prev[key])
            # a turn's calls are one neutral message of several items, converted again when the turn grew
            assert 0 < sum(hashed) <= 2 * new + 1, (len(req[key]), sum(hashed))
            assert sum(converted) <= 2 * new + 1, (len(req[key]), sum(converted))
