"""Token counting throughput: the benchmark's hot path (run with ``pytest bench/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pager.lab.replay.facts import Facts
from pager.lab.replay.session import load_session
from pager.core.tokens import default_counter, message_tokens

DATA = Path(__file__).resolve().parents[1] / "pager" / "data" / "example_session.jsonl"


@pytest.fixture(scope="module")
def messages():
    return list(load_session(DATA).messages)


def test_count_every_message_cold(benchmark, messages):
    """Tokenize every message of the example session (no memo)."""
    counter = default_counter()
    total = benchmark(lambda: sum(message_tokens(m, counter) for m in messages))
    assert total > 0


def test_count_every_message_memoised(benchmark, messages):
    """Count every message again through ``Facts``: what each strategy's call costs."""
    facts = Facts()
    for m in messages:
        facts.tokens(m)
    total = benchmark(lambda: sum(facts.tokens(m) for m in messages))
    assert total > 0


def test_count_one_big_output(benchmark, messages):
    """Tokenize the largest tool output."""
    counter = default_counter()
    big = max((m["content"] for m in messages if m["role"] == "tool"), key=len)
    assert benchmark(counter.count, big) > 0


def test_terms_of_every_message(benchmark, messages):
    """Extract need-matching terms of every message (no memo)."""
    from pager.lab.replay.needs import message_text, terms

    assert benchmark(lambda: sum(len(terms(message_text(m))) for m in messages)) > 0
