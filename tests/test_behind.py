"""A request behind the recorded branch (issue 20): planned read-only, nothing recorded twice, no fork.

Threads sharing one ``Pager`` (the docs endorse it), two writers of one
session, and concurrent requests of one conversation through a real uvicorn
proxy: an older request served after a newer one is a strict prefix of what
is recorded. It must neither fork a branch nor record the newer rows again
when the newer request comes back. On SQLite and on a real PostgreSQL.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import pytest

import pager

from helpers import coding_session, run_threads, user


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> str:
    """A store folder or a PostgreSQL URL (a schema of this test's own)."""
    return str(tmp_path / "ctx") if request.param == "sqlite" else request.getfixturevalue("pg_dsn")


def _in_order(steps: list[tuple[int, Callable[[], Any]]], workers: int) -> list[Any]:
    """Run each step on its thread (``steps[i][0]``), strictly one after another, in list order.

    Step ``i`` waits for step ``i - 1`` to finish (an event, no sleep), so
    the order the shared ``Pager`` sees is exactly the list's.
    """
    done = [threading.Event() for _ in steps]
    results: list[Any] = [None] * len(steps)
    errors: list[BaseException] = []

    def worker(me: int) -> None:
        for i, (who, fn) in enumerate(steps):
            if who != me:
                continue
            if i and not done[i - 1].wait(60):
                errors.append(TimeoutError(f"step {i - 1} never finished"))
                return
            try:
                results[i] = fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                done[i].set()

    run_threads(worker, workers)
    assert not errors, errors
    return results


def test_threads_sharing_one_pager_give_it_older_requests_after_newer_ones(where):
    history = coding_session(12)
    with pager.open(where, session="s", context_window=200_000, log_reports=False) as p:
        def ask(n: int) -> Callable[[], Any]:
            return lambda: (p.assemble({"messages": history[:n]}), p.last_report)

        # thread 0 serves the newer requests, thread 1 the ones they overtook
        steps = [(0, ask(6)), (0, ask(10)), (1, ask(8)), (0, ask(14)), (1, ask(12)), (1, ask(4)),
                 (0, ask(20)), (1, ask(20)), (0, ask(len(history))), (1, ask(18))]
        results = _in_order(steps, 2)
        assert p.store.count_pages("s") == len(history)  # each message once
        assert len(p.store.branches("s")) == 1  # and no branch
        assert len(p.history) == len(history)
        behind = {n: report.behind for (_, report), (_, fn) in zip(results, steps)
                  for n in [report.messages_in]}
        assert behind == {6: 0, 10: 0, 8: 2, 14: 0, 12: 2, 4: 10, 20: 0, len(history): 0, 18: len(history) - 18}
        out, report = results[2]
        assert report.new_pages == 0
        # the older request gets its own history planned, not the newer rows
        assert out["messages"][-1] == history[7] and len(out["messages"]) <= 8
        # the newer request after an older one finds its prompt prefix as it left it (the cache holds)
        assert results[3][1].prefix_kept


def test_a_request_behind_changes_no_layout_and_a_diverging_one_still_forks(where):
    history = coding_session(8)
    with pager.open(where, session="s", context_window=200_000, log_reports=False) as p:
        p.assemble({"messages": history})
        layout = p._mirror.state.scheduler
        p.assemble({"messages": history[:9]})
        assert p._mirror.state.scheduler is layout and p.store.count_pages("s") == len(history)
        # a rewound conversation with a new message diverges: a branch, as ever
        p.assemble({"messages": history[:9] + [user("no, do it differently")]})
        assert len(p.store.branches("s")) == 2 and p.store.count_pages("s") == len(history) + 1


def test_an_empty_history_after_a_recorded_one_is_behind_too(tmp_path):
    history = coding_session(3)
    with pager.open(tmp_path / "ctx", session="s", log_reports=False) as p:
        p.assemble({"messages": history})
        out = p.assemble({"messages": []})
        assert p.last_report.behind == len(history) and out["messages"] == []
        assert p.store.count_pages("s") == len(history) and len(p.store.branches("s")) == 1


def test_two_writers_one_behind_the_other_record_nothing_twice(where):
    history = coding_session(6)
    with pager.open(where, session="s", log_reports=False) as a, pager.open(where, session="s",
                                                                            log_reports=False) as b:
        a.assemble({"messages": history[:4]})
        b.assemble({"messages": history})
        a.assemble({"messages": history[:6]})  # behind what b recorded: planned read-only, no error
        assert a.last_report.behind == len(history) - 6 and a.last_report.new_pages == 0
        a.assemble({"messages": history})
        assert len(a.store.branches("s")) == 1 and a.store.count_pages("s") == len(history)


def test_a_rollover_session_behind_is_planned_on_its_prefix_and_keeps_its_window(tmp_path):
    history = coding_session(10)
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000, mode="rollover",
                    log_reports=False) as p:
        p.assemble({"messages": history})
        state = p._mirror.state.scheduler
        out = p.assemble({"messages": history[:8]})
        assert out["messages"][-1] == history[7]
        assert p._mirror.state.scheduler == state and p.store.count_pages("s") == len(history)
        p.assemble({"messages": history})
        assert len(p.store.branches("s")) == 1 and p.store.count_pages("s") == len(history)


# -- through a real uvicorn proxy -----------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    pytest.importorskip("uvicorn")
    from proxy_upstream import make_upstream

    from pager.proxy import ServerThread

    with ServerThread(make_upstream(), graceful=1.0) as url:
        yield url


def test_older_requests_of_one_conversation_through_the_proxy_record_nothing_twice(upstream, where):
    openai = pytest.importorskip("openai")
    from pager.proxy import ProxyConfig, ServerThread, create_app

    cfg = ProxyConfig(store=where, upstream_openai=upstream, upstream_anthropic=upstream,
                      options={"context_window": 64_000})
    history = coding_session(10, output_lines=5) + [user("and now?")]
    with ServerThread(create_app(cfg)) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=30)

        def send(n: int) -> None:
            client.chat.completions.create(model="m", messages=history[:n],
                                           extra_headers={"x-pager-session": "conv"})

        # in order first: each older request after a newer one (as the session's lock serialises them)
        for n in (8, 12, 10, 16, 6, 14):
            send(n)
        # then all at once, in whatever order the pool serves them
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(send, [len(history), 18, 20, 12, len(history) - 1, 4]))
    with pager.open(where, session="conv") as p:
        assert p.store.count_pages("conv") == len(history)
        assert len(p.store.branches("conv")) == 1
