"""Hostile values at the format boundary (issue 20): every fault a typed ``PagerError`` with a clear message.

Each case the campaign found (a Responses item with a non-string ``role`` or
a non-list ``summary``; lone surrogates in Anthropic's ``system`` or a block
type; non-string dict keys; a ``bytearray`` id; a value nested past every
encoder's limit in ``observe`` or ``expand``; an over-long ``state_dir``) is
one explicit test. Hypothesis then puts hostile values (surrogates, wrong
types, non-string keys, deep nesting) at any string position of a valid
request in each of the three formats, and at the arguments of the other
methods: the result is a prompt or a ``PagerError``, never anything else.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sizes import examples

import pager
from pager.core.describe import brief
from pager.errors import ConfigError, HandleError, InputError, MessageError, PagerError, ToolError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "chaos"))

import chaos_shapes as shapes  # noqa: E402

from helpers import coding_session  # noqa: E402


def nested(depth: int, as_dict: bool = False) -> Any:
    v: Any = "leaf"
    for _ in range(depth):
        v = {"k": v} if as_dict else [v]
    return v


DEEP = nested(50_000)  # past Python's recursion limit: repr() of it raises RecursionError
CHAT = coding_session(3)


@pytest.fixture
def p():
    with pager.open(":memory:", session="s", context_window=32_000, log_reports=False) as pg:
        yield pg


def responses(*items: Any, **kw: Any) -> dict[str, Any]:
    return {"model": "gpt", "input": [{"role": "user", "content": "hi"}, *items], **kw}


def anthropic(system: Any = "sys", *messages: Any) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 10, "system": system,
            "messages": list(messages) or [{"role": "user", "content": "hi"}]}


CASES = [
    ("a Responses role that is a list", responses({"role": ["user"], "content": "x"}), "role must be"),
    ("a Responses role that is a dict", responses({"type": "message", "role": {}, "content": "x"}), "role must be"),
    ("a reasoning summary that is a number", responses({"type": "reasoning", "summary": 5}), "'summary' must be a list"),
    ("a reasoning summary that is a string", responses({"type": "reasoning", "summary": "s"}), "'summary' must be"),
    ("a Responses type that is a list", responses({"type": ["message"], "role": "user"}), "'type' must be a string"),
    ("a lone surrogate in an item", responses({"type": "web_search_call", "q": "\ud800"}), "lone surrogate"),
    ("a non-string key in an item", responses({"type": "web_search_call", 1: 2}), "key that is not a string"),
    ("a bytearray in an item", responses({"type": "web_search_call", "id": bytearray(b"x")}), "bytearray"),
    ("a lone surrogate in instructions", responses(instructions="\ud800"), "request['instructions']"),
    ("a lone surrogate in system", anthropic("sys \ud800"), "request['system'] cannot be encoded: a string holds"),
    ("a lone surrogate in a system block", anthropic([{"type": "text", "text": "\udfff"}]), "request['system']"),
    ("a non-string key in a system block", anthropic([{"type": "text", "text": "s", 1: 2}]), "key that is not"),
    ("a lone surrogate in a block type", anthropic("s", {"role": "user", "content": [{"type": "\ud800"}]}),
     "messages[0]: cannot be encoded: a string holds a lone surrogate"),
    ("a non-string key in a block", anthropic("s", {"role": "user", "content": [{"type": "document", 2.5: 1}]}),
     "key that is not a string"),
    ("a bytearray tool_use id", anthropic("s", {"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": bytearray(b"t"), "name": "bash", "input": {}}]}), "'id' must be a string, got bytearray"),
    ("a deep value in a tool_use input", anthropic("s", {"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "bash", "input": {"x": nested(300)}}]}), "nested too deeply"),
    ("a non-string key in a chat message", {"messages": [{"role": "user", "content": "hi", 1: 2}]},
     "messages[0]: cannot be encoded: an object has a key that is not a string"),
    ("a bytearray chat call id", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None,
     "tool_calls": [{"id": bytearray(b"c"), "type": "function", "function": {"name": "b", "arguments": "{}"}}]}]},
     "id must be a string, got bytearray"),
    ("a deep chat role", {"messages": [{"role": DEEP, "content": "hi"}]}, "unknown role [[[["),
    ("a deep chat part type", {"messages": [{"role": "user", "content": [{"type": DEEP}]}]}, "unknown type"),
]


@pytest.mark.parametrize("request_, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_fault_the_campaign_found_is_an_input_error_with_a_clear_message(p, request_, match):
    with pytest.raises(InputError, match=re.escape(match)):
        p.assemble(request_)
    assert p.store.count_pages("s") == 0  # nothing recorded for a refused request


def test_the_index_named_is_the_item_at_fault(p):
    with pytest.raises(MessageError) as exc:
        p.assemble(responses({"role": "assistant", "content": "ok"}, {"type": "reasoning", "summary": {"a": 1}}))
    assert exc.value.index == 2 and str(exc.value).startswith("input[2]:")


@pytest.mark.parametrize("call", [
    lambda p: p.expand("pg:1-abc", DEEP),
    lambda p: p.expand(DEEP),
    lambda p: p.observe(DEEP),
    lambda p: p.observe({"usage": {"prompt_tokens": DEEP, "completion_tokens": 1}}),
    lambda p: p.observe({"usage": {1: 2, "a": 3}}),  # keys of mixed types do not sort
    lambda p: p.observe({"usage": {}}, format=DEEP),
    lambda p: p.search("x", k=DEEP),
    lambda p: p.tools(format=DEEP),
], ids=["expand start_line", "expand handle", "observe", "observe field", "observe mixed keys", "observe format",
        "search k", "tools format"])
def test_a_deeply_nested_or_odd_argument_is_a_typed_error_with_a_bounded_message(p, call):
    with pytest.raises(PagerError) as exc:
        call(p)
    assert len(str(exc.value)) < 400


def test_a_deeply_nested_tool_call_name_comes_back_as_an_error_result(p):
    out = p.call_tool({"id": "c1", "type": "function", "function": {"name": DEEP, "arguments": "{}"}})
    assert out["tool_call_id"] == "c1" and "must be a string, got list" in out["content"]


@pytest.mark.parametrize("state_dir, match", [
    ("d" * 300, "300-byte name"),
    ("/tmp/" + "e/" * 3000, "bytes long"),
    ("sd\ud800", "not valid Unicode"),
], ids=["long name", "long path", "surrogate"])
def test_an_over_long_state_dir_is_a_config_error_and_creates_nothing(tmp_path, state_dir, match):
    where = state_dir if state_dir.startswith("/") else str(tmp_path / state_dir)
    with pytest.raises(ConfigError, match=match):
        pager.open(tmp_path / "ctx", session="s", state_dir=where)
    assert not (tmp_path / "sd").exists()


def test_open_options_nested_past_repr_are_config_errors(tmp_path):
    for opts in ({"mode": DEEP}, {"scope": DEEP}, {"cache_marks": DEEP}, {"max_notes": DEEP}):
        with pytest.raises(ConfigError):
            pager.open(":memory:", session="s", **opts)


def test_a_responses_role_that_is_not_a_string_is_a_400_through_the_proxy(tmp_path):
    """It was an HTTP 500: a TypeError in the format."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from pager.proxy import ProxyConfig, ServerThread, create_app

    cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai="http://127.0.0.1:9",
                      upstream_anthropic="http://127.0.0.1:9")
    with ServerThread(create_app(cfg)) as base:
        for item in ({"role": ["user"], "content": "x"}, {"type": "reasoning", "summary": 5}):
            resp = httpx.post(base + "/v1/responses", json={"model": "m", "input": [item]}, timeout=30)
            assert resp.status_code == 400, resp.text
            assert resp.json()["error"]["type"] == "invalid_request_error"
            assert "pager cannot page this request" in resp.json()["error"]["message"]


# -- properties -------------------------------------------------------------------------------

surrogate_text = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
hostile = st.one_of(
    st.tuples(st.text(max_size=5), surrogate_text).map("".join),
    st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4),
    st.dictionaries(st.one_of(st.integers(), st.none(), st.floats(allow_nan=False)), st.text(max_size=3),
                    min_size=1, max_size=2),
    st.integers(250, 3_000).map(nested),
    st.integers(250, 3_000).map(lambda n: nested(n, as_dict=True)),
    st.sets(st.integers(), max_size=2),
    st.integers(2**64, 2**70),
    st.lists(st.integers(), max_size=2),
    st.none(), st.booleans(), st.floats(),
)
hostile_key = st.one_of(st.integers(), st.none(), st.floats(allow_nan=False), st.tuples(st.integers()),
                        st.tuples(st.text(max_size=3), surrogate_text).map("".join))
BASES = {
    "openai-chat": {"model": "m", "messages": CHAT},
    "anthropic-messages": shapes.anthropic_request(CHAT),
    "openai-responses": shapes.responses_request(CHAT),
}


# 50 examples in the suite (150 in the full campaign, tests/sizes.py): each draws a format, a position and a value
# of every hostile kind: 50 reach each format's keys and strings
@settings(max_examples=examples(50, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(BASES)), where=st.integers(0, 10**6), value=hostile, key=hostile_key,
       on_key=st.booleans(), named=st.booleans())
def test_a_hostile_value_at_any_string_position_of_any_format_is_typed(fmt, where, value, key, on_key, named):
    base = BASES[fmt]
    spots = shapes._positions(base)
    keys = [s for s in spots if s and isinstance(s[-1], shapes._Key)]
    strings = [s for s in spots if not (s and isinstance(s[-1], shapes._Key))]
    path = (keys if on_key else strings)[where % len(keys if on_key else strings)]
    req = shapes._replace(base, path, lambda old: key if on_key else value)
    with pager.open(":memory:", session="s", context_window=32_000, log_reports=False) as p:
        try:
            out = p.assemble(req, format=fmt if named else None)
        except PagerError as exc:
            assert len(str(exc)) < 2_000  # a bounded message, whatever the value
        else:
            orjson.dumps(out["messages"] if "messages" in out else out["input"])  # what it sends is JSON


@settings(max_examples=examples(100, 200), deadline=None)
@given(st.recursive(st.one_of(hostile, st.text()), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=3), hostile_key), inner, max_size=3)),
    max_leaves=10))
def test_brief_is_bounded_and_never_fails(value):
    assert len(brief(value)) <= 80


@settings(max_examples=100, deadline=None)
@given(st.one_of(hostile, st.text()), st.sampled_from(["openai-chat", "anthropic-messages", "openai-responses"]))
def test_parse_tool_call_and_usage_take_any_value_typed(value, fmt):
    from pager.formats.base import get_format

    f = get_format(fmt)
    for call in ({"id": value, "function": {"name": "recall", "arguments": "{}"}},
                 {"type": "tool_use", "id": "t", "name": value, "input": {}},
                 {"type": "function_call", "call_id": value, "name": "n", "arguments": "{}"}):
        try:
            f.parse_tool_call(call)
        except ToolError:
            pass
    for usage in ({"usage": {"prompt_tokens": value, "completion_tokens": 1}}, {"usage": {value: 1}}
                  if not isinstance(value, (dict, list, set, bytearray)) else {"usage": value}):
        try:
            f.parse_usage(usage)  # None counts as 0 (an SDK's optional field)
        except InputError:
            pass


def test_handle_errors_quote_a_bounded_handle(p):
    with pytest.raises(HandleError) as exc:
        p.expand("x" * 1_000_000)
    assert len(str(exc.value)) < 200
