"""Two sizes for the long property tests and campaigns: the suite's, and the full one.

The README test command runs every test at the suite's size: each property
still reaches its interesting cases there (the reason is beside each use, and
asserted where that is cheap), so nothing is skipped. ``PAGER_TEST_FULL=1``
runs the same tests at the size they ran at before (many more hypothesis
examples, longer sessions, every trace message): ``python bench/full_tests.py``
sets it and runs the files that use this module (docs/testing.md).
"""

from __future__ import annotations

import os

from hypothesis import settings

FULL_ENV = "PAGER_TEST_FULL"
FULL = os.environ.get(FULL_ENV, "") not in ("", "0")

# The full campaign: no deadline (as the suite's profile, tests/conftest.py: a loaded machine makes an
# example slow, never wrong), and hypothesis prints the blob that reproduces a failure found at that size.
settings.register_profile("pager-full", deadline=None, print_blob=True)
if FULL:
    settings.load_profile("pager-full")


def size(suite: int, full: int) -> int:
    """Return ``full`` under ``PAGER_TEST_FULL=1``, else ``suite`` (a count of examples, calls, messages)."""
    assert 0 < suite <= full
    return full if FULL else suite


def examples(suite: int, full: int) -> int:
    """Return a hypothesis ``max_examples``: ``suite`` in the README's test command, ``full`` in the full one."""
    return size(suite, full)


def every(items: list, suite_step: int) -> list:
    """Return ``items`` whole under ``PAGER_TEST_FULL=1``, else one in ``suite_step`` of them, spread evenly."""
    assert suite_step >= 1
    return items if FULL else items[::suite_step]
