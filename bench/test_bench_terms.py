"""Term extraction throughput: what each new message costs at ingest (issue 23).

Run: ``python -m pytest bench/test_bench_terms.py --benchmark-only -q``.
The example session always; every message of ``../shared/traces`` where it
exists. "cold" empties extract_terms' memos before each round (a new process,
or text never seen); "warm" keeps them (a long session, where most chunks of a
new message have been seen before).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pager.core import termscan
from pager.core.messages import message_text
from pager.core.terms import extract_terms
from pager.lab.replay.session import discover, load_session

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "pager" / "data" / "example_session.jsonl"
TRACES = ROOT.parent / "shared" / "traces"


def _texts(paths: list[Path]) -> list[str]:
    return [t for p in paths for t in map(message_text, load_session(p).messages) if t]


@pytest.fixture(scope="module")
def example_texts() -> list[str]:
    return _texts([EXAMPLE])


@pytest.fixture(scope="module")
def trace_texts() -> list[str]:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return _texts(list(discover([TRACES])))


def _clear() -> None:
    for memo in (termscan._CHUNK_TERMS, termscan._SPLIT_CHUNK_TERMS, termscan._MATCH_TERMS):
        memo.clear()


def _run(texts: list[str]) -> int:
    return sum(len(extract_terms(t)) for t in texts)


def test_terms_example_session_cold(benchmark, example_texts):
    assert benchmark.pedantic(_run, (example_texts,), setup=_clear, rounds=5) > 0


def test_terms_example_session_warm(benchmark, example_texts):
    _run(example_texts)
    assert benchmark(_run, example_texts) > 0


def test_terms_every_trace_message_cold(benchmark, trace_texts):
    assert benchmark.pedantic(_run, (trace_texts,), setup=_clear, rounds=3) > 0


def test_terms_every_trace_message_warm(benchmark, trace_texts):
    _run(trace_texts)
    assert benchmark.pedantic(_run, (trace_texts,), rounds=3) > 0
