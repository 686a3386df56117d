"""The collector-policy fixture the proxy's GC tests share (tests/test_proxy_latency.py, test_proxy_gc_idle.py)."""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterator

import pytest

from pager.proxy import gcpolicy


class Node:
    def __init__(self) -> None:
        self.other: Any = self  # a cycle: only the collector frees it


# The tests grow the heap past ``regrow`` of what the worker holds: at the default REGROW (a
# half) that was ~350,000 new objects in a suite worker (~2 s of CPU a test); the
# logic does not depend on the fraction, so they run at a small one.
TEST_REGROW = 0.05


@contextlib.contextmanager
def _installed(p: gcpolicy.GcPolicy) -> Iterator[gcpolicy.GcPolicy]:
    saved = gc.get_threshold()
    gcpolicy.install(p)
    try:
        yield p
    finally:
        gcpolicy.uninstall()
    assert gc.get_threshold() == saved and p._callback not in gc.callbacks


@pytest.fixture
def fresh_policy() -> Iterator[gcpolicy.GcPolicy]:
    """A policy as ``pager proxy`` installs it: its first full collection walks the whole heap."""
    with _installed(gcpolicy.GcPolicy(threshold0=5000, regrow=TEST_REGROW)) as p:
        yield p


@pytest.fixture
def policy() -> Iterator[gcpolicy.GcPolicy]:
    """A policy that has walked the heap as it is now (what ``after_startup`` leaves), without walking it.

    A suite worker's heap is over a million objects (every SDK the tests import): the walk a fresh
    policy's first collection makes cost ~1 s of CPU in each test that started one; one test
    (``fresh_policy``) keeps it.
    """
    with _installed(gcpolicy.GcPolicy(threshold0=5000, regrow=TEST_REGROW)) as p:
        p.examined = gcpolicy.heap_size()
        yield p


def grow(policy: gcpolicy.GcPolicy, by: float) -> list[Node]:
    """Return new objects that grow the heap past ``by`` times ``regrow`` of what ``policy`` last walked.

    Made until ``heap_size`` says so: what an object costs in blocks is the allocator's business.
    """
    target = policy.examined * (1.0 + by * policy.regrow)
    out: list[Node] = []
    while gcpolicy.heap_size() <= target:
        out.extend(Node() for _ in range(1000))
    return out
