"""The collector's full sweep waits for a moment when no model call is in flight (issue 23's p99).

The policy runs on this process's own ``gc`` (restored after); the proxy and the
scripted upstream are real uvicorn servers on loopback. No test reads a clock.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import httpx
import pytest

pytest.importorskip("uvicorn")

from pager.proxy import ProxyConfig, ServerThread, create_app, gcpolicy  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402


from gc_fixtures import Node as _Node, grow, policy  # noqa: E402,F401  (a fixture)


def test_a_deferred_sweep_waits_for_sweep_if_due(policy: gcpolicy.GcPolicy) -> None:
    policy.after_startup()
    policy.defer_sweeps()
    sweeps = policy.sweeps
    node = _Node()
    ref = weakref.ref(node)
    gc.collect()  # alive: frozen
    del node
    grown = grow(policy, 1.5)  # mid-band: past regrow, not past twice it
    gc.collect()  # the heap has grown past regrow: a sweep is due from now ...
    assert policy.due and policy.sweeps == sweeps
    gc.collect()  # ... but this collection, on some request's path, does not walk everything
    assert ref() is not None and policy.sweeps == sweeps and policy.due
    assert policy.sweep_if_due()  # the idle moment: now it does
    assert ref() is None and policy.sweeps == sweeps + 1 and not policy.due
    assert not policy.sweep_if_due()  # nothing due: nothing walked
    del grown


def test_an_idle_moment_runs_the_next_full_collection_early(policy: gcpolicy.GcPolicy) -> None:
    policy.after_startup()
    gc.disable()  # no automatic collection in between: the counts below are this test's
    try:
        gc.collect()  # the last full collection: count[2] starts at 0
        fulls, idle = policy.fulls, policy.idle_fulls
        for _ in range(policy.idle_full_after - 1):
            gc.collect(1)  # a middle-generation collection
        assert not policy.sweep_if_due() and policy.fulls == fulls  # not yet, and not before deferring
        gc.collect(1)
        assert not policy.sweep_if_due() and policy.fulls == fulls  # a server that never says it is idle
        policy.defer_sweeps()
        node = _Node()
        ref = weakref.ref(node)
        del node  # cyclic garbage the next full collection frees
        assert not policy.sweep_if_due()  # no sweep: the frozen heap is not walked ...
        assert policy.fulls == fulls + 1 and policy.idle_fulls == idle + 1 and policy.sweeps == 0
        assert ref() is None and gc.get_count()[2] == 0  # ... but the full collection ran
        assert not policy.sweep_if_due() and policy.fulls == fulls + 1  # counts start again
    finally:
        gc.enable()


def test_the_proxy_sweeps_once_no_call_is_in_flight(policy: gcpolicy.GcPolicy, tmp_path: Path) -> None:
    with ServerThread(make_upstream(), graceful=1.0) as up:
        cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=up, options={"context_window": 32_000})
        with ServerThread(create_app(cfg)) as url:
            assert policy.deferring  # the app's lifespan asked for it
            sweeps = policy.sweeps
            policy.due = True  # as a collection during a request leaves it when the heap has grown by regrow
            body = {"model": "m", "messages": [{"role": "user", "content": "hello"}],
                    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}
            r = httpx.post(url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-t"}, timeout=20)
            assert r.status_code == 200
            # the sweep was queued on the event loop as the call ended: a later request is served after it
            assert httpx.get(url + "/", timeout=20).status_code == 200
            assert policy.sweeps == sweeps + 1 and not policy.due
