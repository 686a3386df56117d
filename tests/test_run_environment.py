"""The environment ``tests/conftest.py`` gives the run's interpreters (docs/testing.md).

One OpenBLAS thread and glibc's malloc thresholds are read when a process
starts, so they help only if the workers were started with them: the worker's
own start-up environment (``/proc/self/environ``) is checked, not ``os.environ``,
which conftest could have set after the fact.
"""

from __future__ import annotations

import os
import sys

import pytest

SETTINGS = ("OPENBLAS_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/environ")
@pytest.mark.skipif("PYTEST_XDIST_WORKER" not in os.environ,
                    reason="-n 0: the tests' own process started before conftest set them")
def test_the_workers_started_with_the_settings() -> None:
    with open("/proc/self/environ", "rb") as f:
        started = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    for name in SETTINGS:
        assert name.encode() in started, name
        assert started[name.encode()].decode() == os.environ[name]  # what conftest set, or the user's own value
