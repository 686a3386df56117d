"""The collector-policy fixture the proxy's GC tests share (tests/test_proxy_latency.py, test_proxy_gc_idle.py)."""

from __future__ import annotations

import gc
from typing import Any, Iterator

import pytest

from pager.proxy import gcpolicy


class Node:
    def __init__(self) -> None:
        self.other: Any = self  # a cycle: only the collector frees it


# The tests grow the frozen part past ``regrow`` of what the worker froze: at the default REGROW (a
# half) that was ~350,000 new objects in a suite worker (~2 s of CPU a test); the
# logic does not depend on the fraction, so they run at a small one.
TEST_REGROW = 0.05


@pytest.fixture
def policy() -> Iterator[gcpolicy.GcPolicy]:
    saved = gc.get_threshold()
    p = gcpolicy.install(gcpolicy.GcPolicy(threshold0=5000, regrow=TEST_REGROW))
    try:
        yield p
    finally:
        gcpolicy.uninstall()
    assert gc.get_threshold() == saved and p._callback not in gc.callbacks
