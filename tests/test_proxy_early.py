"""The proxy forwards a request before its call is committed (issue 23), end to end on loopback.

``pager proxy`` hands the rendered request upstream as soon as ``assemble`` has
it; the COMMIT, the checkpoint files and the report line finish in the same
worker while the request is upstream (``Pager._assemble``'s ``ready``,
``AsyncPager.aassemble_early``). These tests hold that rest back (or make it
fail) at the one point between the two, through the ``ready`` the proxy
gives: a real uvicorn proxy, the real SQLite store, the scripted upstream.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import orjson
import pytest

import pager
from helpers import committed_pages
from pager.errors import StoreError
from pager.pager import Pager
from pager.proxy import ProxyConfig, ServerThread, create_app
from proxy_upstream import make_upstream

KEY = "sk-test-early"
WAIT = 20.0  # seconds before a condition that never comes true fails the test (never a sleep to wait)
BIG = "\n".join(f"line {i}: compiled module_{i}.o with ZEBRA-{i}" for i in range(400))


def history(n_turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a build agent."},
                                  {"role": "user", "content": "Fix the build."}]
    for i in range(n_turns):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"make\"}"}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": f"run {i}\n{BIG}"}]
    return msgs


def until(cond: Callable[[], bool], what: str) -> None:
    """Wait for ``cond`` (polled), failing after ``WAIT`` seconds: a condition, not a time, is waited for."""
    end = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Gate:
    """Hold back (or fail) the rest of an ``assemble`` whose request the proxy already has."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail: BaseException | None = None
        self.armed = True

    def __call__(self) -> None:
        if not self.armed:
            return
        self.armed = False  # once: the next calls go through
        self.entered.set()
        if self.fail is not None:
            raise self.fail
        assert self.release.wait(WAIT), "the test never released the gate"


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    """Run ``Gate`` in the worker right after the proxy got its request, before the COMMIT."""
    g = Gate()
    real = Pager._assemble

    def held(self: Pager, request: Any, *, ready: Any = None, **kw: Any) -> Any:
        if ready is None:
            return real(self, request, **kw)

        def handed(out: Any) -> None:
            ready(out)  # the proxy has the request now
            g()

        return real(self, request, ready=handed, **kw)

    monkeypatch.setattr(Pager, "_assemble", held)
    yield g
    g.release.set()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    app = make_upstream()
    with ServerThread(app, graceful=1.0) as url:
        yield app, url


@pytest.fixture
def proxy(upstream: Any, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    app_up, url = upstream
    app_up.state.seen.clear()
    cfg = ProxyConfig(store=str(tmp_path / "ctx"), upstream_openai=url, options={"context_window": 32_000})
    app = create_app(cfg)
    server = ServerThread(app)
    server.start()
    try:
        yield app, server.url
    finally:
        server.stop()


def post(url: str, body: dict[str, Any], out: dict[str, Any]) -> None:
    """POST a chat request and read it to its end (in a thread), keeping the first chunk's arrival apart."""
    with httpx.Client(timeout=WAIT) as c, c.stream(
            "POST", url + "/v1/chat/completions", content=orjson.dumps(body),
            headers={"authorization": f"Bearer {KEY}", "x-pager-session": "s1"}) as r:
        chunks = []
        for chunk in r.iter_raw():
            if not chunks:
                out["first"] = threading.Event()
                out["first"].set()
            chunks.append(chunk)
            if "done_at" not in out and b"[DONE]" in b"".join(chunks[-2:]):
                out["done_at"] = time.perf_counter()  # the proxy runs in this process: the same clock
        out["status"] = r.status_code
        out["body"] = b"".join(chunks)


def start(url: str, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    t = threading.Thread(target=post, args=(url, body, out), daemon=True)
    t.start()
    return t, out


def recorded(store: Path, session: str = "s1") -> tuple[int, list[dict[str, Any]]]:
    """Return the pages the store holds for ``session`` and its assemble reports (read with the proxy stopped)."""
    with pager.open(store, session=session) as p:
        pages = len(p.history)
    lines = (store / "reports.jsonl").read_bytes().splitlines() if (store / "reports.jsonl").exists() else []
    reports = [r for r in map(orjson.loads, lines) if r.get("type") == "assemble" and r["session"] == session]
    return pages, reports


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_the_request_is_upstream_before_the_commit_and_the_next_waits_for_it(
        proxy: tuple[Any, str], upstream: Any, gate: Gate, tmp_path: Path, stream: bool) -> None:
    app, url = proxy
    seen = upstream[0].state.seen
    first = {"model": "m", "messages": history(3), "stream": stream}
    t1, out1 = start(url, first)
    # the upstream has the request while its call is still held before the COMMIT
    until(lambda: len(seen) == 1 and gate.entered.is_set(), "the request upstream with its call unfinished")
    assert committed_pages(tmp_path / "ctx") == 0  # upstream before its pages were committed
    if stream:  # the first byte does not wait for the rest of assemble ...
        until(lambda: "first" in out1, "the stream's first bytes")
    assert "status" not in out1  # ... but the answer ends only once the call is recorded
    second = {"model": "m", "messages": history(4), "stream": stream}
    t2, out2 = start(url, second)
    # the session's next request has come in (it holds the session) and waits for the previous call's rest
    until(lambda: app.state.proxy.pool._busy.get("s1") == 2, "the next request in the proxy")
    assert len(seen) == 1 and not gate.release.is_set()  # not upstream while the previous call is unfinished
    released = time.perf_counter()
    gate.release.set()
    t1.join(WAIT)
    t2.join(WAIT)
    assert out1["status"] == out2["status"] == 200
    if stream:  # an SSE client stops reading at the terminal event: it too waits for the call to be recorded
        assert out1["done_at"] > released
    assert [len(b["messages"]) for _p, _h, b in seen] == [len(first["messages"]), len(second["messages"])]
    pages, reports = recorded(tmp_path / "ctx")
    assert pages == len(second["messages"])
    assert [r["call"] for r in reports] == [1, 2] and [r["messages_in"] for r in reports] == [8, 10]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_failed_finish_is_logged_and_the_next_request_records_the_whole_history(
        proxy: tuple[Any, str], upstream: Any, gate: Gate, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        stream: bool) -> None:
    app, url = proxy
    gate.fail = StoreError("the disk went away")
    caplog.set_level(logging.ERROR, logger="pager.proxy")
    first = {"model": "m", "messages": history(3), "stream": stream}
    t1, out1 = start(url, first)
    t1.join(WAIT)
    assert out1["status"] == 200 and (b"[DONE]" if stream else b"tool said: run 2") in out1["body"]  # its answer
    failed = [r for r in caplog.records if "recording it failed" in r.getMessage()]
    assert failed and "StoreError" in failed[0].getMessage() and "s1" in failed[0].getMessage()
    pages, reports = recorded(tmp_path / "ctx")
    assert pages == 0 and reports == []  # rolled back: nothing of that call was kept
    second = {"model": "m", "messages": history(4), "stream": stream}
    t2, out2 = start(url, second)
    t2.join(WAIT)
    assert out2["status"] == 200
    pages, reports = recorded(tmp_path / "ctx")
    assert pages == len(second["messages"])  # the whole history, the failed call's messages with it
    assert [r["new_pages"] for r in reports] == [len(second["messages"])]
