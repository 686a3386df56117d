"""Hostile input: every public method, fuzzed; each error a PagerError, no hang, every prompt valid.

The fast version of ``bench/chaos`` part 3 (``python bench/chaos/run.py``):
a hundred or more generated calls, plus the inputs that broke earlier versions,
one test each.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import pager
from pager.errors import InputError, MessageError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "chaos"))

import chaos_fuzz  # noqa: E402

from helpers import coding_session  # noqa: E402
from sizes import size  # noqa: E402


def test_fuzzed_calls_to_every_public_method(tmp_path):
    # 120 calls in the suite (250 in the full campaign, tests/sizes.py), two big outputs either way: every
    # method is still called, and dozens of calls reach a typed error (both asserted)
    calls = size(120, 250)
    counts = chaos_fuzz.run(calls, seed=5, workdir=str(tmp_path), big_every=calls // 2)
    assert counts["calls"] >= calls
    assert set(counts["by_method"]) == set(chaos_fuzz.METHODS)
    assert counts["untyped_errors"] == 0, counts["samples"]
    assert counts["hangs"] == 0 and counts["crashed_workers"] == 0, counts["samples"]
    assert counts["invalid_prompts"] == 0, counts["samples"]
    assert counts["typed_errors"] > 0  # the generators do reach the checks


@pytest.mark.parametrize("role", [[], {}, {"user"}])
def test_an_unhashable_role_is_a_message_error(role):
    with pager.open(":memory:", session="s") as p:
        with pytest.raises(MessageError, match="role"):
            p.assemble({"messages": [{"role": role, "content": "hi"}]})


@pytest.mark.parametrize("k", [2**70, 10**6, "5", 0, True])
def test_search_k_out_of_range_is_an_input_error(k):
    with pager.open(":memory:", session="s") as p:
        p.assemble({"messages": coding_session(2)})
        with pytest.raises(InputError, match="k must be"):
            p.search("parse_config", k=k)
        assert p.search("parse_config", k=10_000)


@pytest.mark.parametrize("usage", [{"prompt_tokens": math.inf, "completion_tokens": 1},
                                   {"prompt_tokens": math.nan, "completion_tokens": 1},
                                   {"input_tokens": "12", "output_tokens": 1}, {"prompt_tokens": [], "completion_tokens": 1},
                                   {"prompt_tokens": 1, "completion_tokens": 2**70}, {"prompt_tokens": -5}])
def test_usage_figures_that_are_not_token_counts_are_input_errors(usage):
    with pager.open(":memory:", session="s") as p:
        with pytest.raises(InputError):
            p.observe({"usage": usage})
        assert p.observe({"usage": {"prompt_tokens": 10.0, "completion_tokens": 2}})["prompt_tokens"] == 10


@pytest.mark.parametrize("cached", [math.nan, math.inf, 2**70])
def test_an_odd_cached_figure_counts_as_none(cached):
    with pager.open(":memory:", session="s") as p:
        got = p.observe({"usage": {"prompt_tokens": 10, "completion_tokens": 2,
                                   "prompt_tokens_details": {"cached_tokens": cached}}})
        assert got["cached_tokens"] == 0


@pytest.mark.parametrize("path", ["\ud800dir", "store/\udbff"])
def test_a_store_path_with_a_lone_surrogate_is_a_config_error(tmp_path, path):
    with pytest.raises(pager.ConfigError):
        pager.open(str(tmp_path / path), session="s")
    with pytest.raises(pager.ConfigError):
        pager.store_sessions(str(tmp_path / path))


@pytest.mark.parametrize("config", [True, 5, 1.5, b"bytes", ["a"]])
def test_a_config_that_is_neither_a_path_nor_a_mapping_is_a_config_error(config):
    with pytest.raises(pager.ConfigError, match="config"):
        pager.open(":memory:", session="s", config=config)


@pytest.mark.parametrize("request_", [
    {"messages": [{"role": [], "content": "hi"}]},
    {"messages": [{"role": "user", "content": "hi"}], "tools": 5},
    {"messages": [{"role": "user", "content": "hi"}], "tools": {"bash": {}}},
])
def test_format_detection_survives_odd_roles_and_tools(request_):
    with pager.open(":memory:", session="s") as p:
        with pytest.raises(InputError):
            p.assemble(request_)


@pytest.mark.parametrize("window", [10**30, 2**63])
def test_a_context_window_past_64_bits_is_a_config_error(tmp_path, window):
    with pytest.raises(pager.ConfigError, match="context_window"):
        pager.open(tmp_path / "ctx", session="s", context_window=window)
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000) as p:  # nothing was poisoned
        assert p.options.context_window == 200_000


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages", "openai-responses"])
@pytest.mark.parametrize("request_", [math.nan, "{not json", ["messages"]])
def test_a_request_that_is_not_a_mapping_is_an_input_error_in_every_format(fmt, request_):
    with pager.open(":memory:", session="s") as p:
        with pytest.raises(InputError, match="mapping"):
            p.assemble(request_, format=fmt)


def test_a_50_mb_single_line_command_is_scanned_for_terms_within_the_watchdog():
    """Model-written strings are read in linear time: a 50 MB one-word command must not stall assemble."""
    import threading

    from pager.core.terms import extract_terms

    text = "cat " + "b" * 50_000_000 + " src/app/config.py"
    got: list[frozenset[str]] = []
    worker = threading.Thread(target=lambda: got.append(extract_terms(text)), daemon=True)
    worker.start()
    worker.join(chaos_fuzz.WATCHDOG_SECONDS)  # a bound on a hang, not a timing assertion
    assert got, "extracting terms of a 50 MB line took longer than the watchdog allows"
    assert "src/app/config.py" in got[0]
