"""Usage figures per provider, from real SDK objects and dicts; unknown shapes are errors.

Each format reads its own provider's usage (``WireFormat.parse_usage``); ``read_usage``
picks the format by the usage's keys (the formats' ``usage_claim``).
"""

from __future__ import annotations

import functools
from typing import Any

import openai.types.responses as rt
import pytest
from langchain_core.messages import AIMessage
from openai.types.chat import ChatCompletion

from pager.errors import InputError
from pager.formats.base import get_format, read_usage

from lazy import lazy_module

at = lazy_module("anthropic.types", skip=False)  # imported by the test that uses it (tests/lazy.py)

parse_usage = read_usage  # the facade's route: observe() reads any format's usage


def test_anthropic_message():
    resp = at.Message.model_validate({
        "id": "m", "type": "message", "role": "assistant", "model": "claude", "content": [],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 800,
                  "cache_creation_input_tokens": 100},
    })
    u = parse_usage(resp)
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_write_tokens) == (912, 7, 800, 100)


def test_anthropic_without_cache_fields_counts_nulls_as_zero():
    u = parse_usage(at.Usage(input_tokens=30, output_tokens=2))
    assert (u.prompt_tokens, u.cached_tokens) == (30, 0)


def test_responses():
    usage = {"input_tokens": 1000, "output_tokens": 5, "total_tokens": 1005,
             "input_tokens_details": {"cached_tokens": 800, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}
    resp = rt.Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5", "output": [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage,
    })
    u = parse_usage(resp)
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (1000, 5, 800)


def test_chat_completion():
    resp = ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o", "choices": [],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 9, "total_tokens": 2009,
                  "prompt_tokens_details": {"cached_tokens": 1536}},
    })
    u = parse_usage(resp)
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (2000, 9, 1536)


def test_langchain_usage_metadata():
    msg = AIMessage(content="x", usage_metadata={
        "input_tokens": 1000, "output_tokens": 5, "total_tokens": 1005,
        "input_token_details": {"cache_read": 800, "cache_creation": 100}})
    u = parse_usage(msg)
    assert (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens) == (1000, 800, 100)


@pytest.mark.parametrize("bad", [
    {"usage": {"tokens": 5}},
    {"id": "x"},
    {"usage": None},
    {"usage": {"prompt_tokens": 10}},  # no completion_tokens: never a zero
    {"usage": {"input_tokens": "many", "output_tokens": 1, "cache_read_input_tokens": 0}},
    AIMessage(content="x"),
    42,
])
def test_unknown_shapes_raise(bad):
    with pytest.raises(InputError):
        parse_usage(bad)


# -- each format reads its own provider's usage, and only that -------------------------------------

NAMES = ("anthropic-messages", "openai-chat", "openai-responses")


@functools.cache
def _own() -> dict[str, Any]:
    """Each format's name: a response of its provider, and its figures (built at first use: tests/lazy.py)."""
    chat = ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o", "choices": [],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 9, "total_tokens": 2009,
                  "prompt_tokens_details": {"cached_tokens": 1536}},
    })
    responses = rt.Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-5", "output": [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 1000, "output_tokens": 5, "total_tokens": 1005,
                  "input_tokens_details": {"cached_tokens": 800, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    })
    anthropic = at.Message.model_validate({
        "id": "m", "type": "message", "role": "assistant", "model": "claude", "content": [],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 800,
                  "cache_creation_input_tokens": 100},
    })
    own = {"openai-chat": (chat, (2000, 9, 1536, 0)), "openai-responses": (responses, (1000, 5, 800, 0)),
           "anthropic-messages": (anthropic, (912, 7, 800, 100))}
    assert sorted(own) == list(NAMES)
    return own


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("as_dict", [False, True])
def test_each_format_reads_its_own_usage(name, as_dict):
    response, figures = _own()[name]
    response = response.model_dump() if as_dict else response
    for value in (response, response["usage"] if as_dict else response.usage):
        u = get_format(name).parse_usage(value)
        assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_write_tokens) == figures
        assert read_usage(value) == u  # observe's route picks the same format


@pytest.mark.parametrize("name", NAMES)
def test_a_format_refuses_another_providers_usage(name):
    for other, (response, _) in _own().items():
        if other != name:
            with pytest.raises(InputError, match="usage"):
                get_format(name).parse_usage(response)


@pytest.mark.parametrize(("usage", "owner"), [
    ({"input_tokens": 30, "output_tokens": 2}, "anthropic-messages"),  # no total: never Responses
    ({"input_tokens": 30, "output_tokens": 2, "total_tokens": 32}, "openai-responses"),  # a total: never Anthropic
    ({"input_tokens": 30, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 3}}, "openai-responses"),
    ({"prompt_tokens": 30, "completion_tokens": 2, "input_tokens": 1, "cache_read_input_tokens": 5}, "openai-chat"),
    ({"input_tokens": 30, "output_tokens": 2, "cache_read_input_tokens": 5,
      "input_tokens_details": {"cached_tokens": 3}}, "anthropic-messages"),  # sure claims tie: the older format
])
def test_the_surest_claim_reads_an_ambiguous_usage(usage, owner):
    assert read_usage(usage) == get_format(owner).parse_usage(usage)


def test_langchain_details_outrank_a_guess_but_not_a_sure_claim():
    lc = {"input_tokens": 1000, "output_tokens": 5, "total_tokens": 1005,
          "input_token_details": {"cache_read": 800}}
    assert read_usage(lc).cached_tokens == 800  # Responses would only guess (by the total)
    assert read_usage({**lc, "input_tokens_details": {"cached_tokens": 7}}).cached_tokens == 7
