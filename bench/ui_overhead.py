"""Does an open ``pager ui`` slow the proxy? ``python bench/ui_overhead.py``.

A canned model server (tests/proxy_upstream.py) and ``pager proxy`` run on
127.0.0.1 under uvicorn, with the viewer mounted at ``/pager/`` as always.
A synthetic agent session (``pager.lab.synth``) is replayed through the proxy
step by step, once with no viewer and once with viewers open: processes that
poll (as a browser's would be), as the page's script does, the sessions list and the page of the very
session being written (the costliest page: it changes on every call), with
``If-None-Match``. Phases alternate (off, on, off, on, ...: ``--rounds``) on
fresh sessions of one store, so drift shows. Reports, in milliseconds, the per-request latency
of the proxied calls in each phase (p50, p90), and what one poll costs when
nothing changed (304) and when something did (200).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from pager.lab.synth import generate_session  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

HEADERS = {"authorization": "Bearer sk-bench", "content-type": "application/json"}


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def _poll(base: str, session: str, interval: float, stop: Any, out: Any) -> None:
    """One open viewer, in a process of its own as a browser is: poll as the page's script does."""
    tags: dict[str, str] = {}
    times: dict[int, list[float]] = {}
    out.put("ready")  # imported and started: the phase's timing may begin
    with httpx.Client(timeout=30) as c:
        while not stop.wait(interval):
            for url in ("/pager/api/sessions?live=1", f"/pager/api/session?s={session}&live=1"):
                t0 = time.perf_counter()
                r = c.get(base + url, headers={"If-None-Match": tags.get(url, "")})
                times.setdefault(r.status_code, []).append((time.perf_counter() - t0) * 1000)
                if r.status_code == 200:
                    tags[url] = r.headers.get("etag", "")
    out.put(times)


class Poller:
    """A viewer process polling the sessions list and one session's page every ``interval`` seconds."""

    def __init__(self, base: str, session: str, interval: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop, self.out = ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=_poll, args=(base, session, interval, self.stop, self.out), daemon=True)
        self.times: dict[int, list[float]] = {}

    def start(self) -> None:
        self.proc.start()
        assert self.out.get(timeout=120) == "ready"

    def finish(self) -> None:
        self.stop.set()
        self.times = self.out.get(timeout=60)
        self.proc.join(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=80, help="steps of the synthetic session per phase (default 80)")
    ap.add_argument("--viewers", type=int, default=2, help="open viewers in the 'on' phases (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs of phases (default 3)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between a viewer's polls (default 2, "
                    "as the page polls)")
    args = ap.parse_args(argv)
    _h, msgs = generate_session(11, args.steps)
    steps = [msgs[:i] for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 1]
    upstream = make_upstream()
    results: dict[str, list[float]] = {}
    polls: dict[int, list[float]] = {200: [], 304: []}
    with tempfile.TemporaryDirectory() as tmp, ServerThread(upstream) as up:
        cfg = ProxyConfig(store=str(Path(tmp) / "store"), upstream_openai=up,
                          options={"context_window": 64_000, "high_watermark": 14_000, "low_watermark": 5_000})
        with ServerThread(create_app(cfg)) as proxy, httpx.Client(timeout=60) as client:
            for phase in [f"{w}-{k}" for k in range(1, args.rounds + 1) for w in ("off", "on")]:
                session = f"bench-{phase}"
                pollers = [Poller(proxy, session, args.interval) for _ in range(args.viewers if "on" in phase else 0)]
                for p in pollers:  # started (and their imports done) before the phase is timed
                    p.start()
                lat = []
                for history in steps:
                    body = orjson.dumps({"model": "echo", "messages": history})
                    t0 = time.perf_counter()
                    r = client.post(proxy + "/v1/chat/completions", content=body,
                                    headers={**HEADERS, "x-pager-session": session})
                    lat.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
                for p in pollers:
                    p.finish()
                    for code, xs in p.times.items():
                        polls.setdefault(code, []).extend(xs)
                results[phase] = lat[1:]  # the first call creates the session (and the store, the first time)
                print(f"{phase:<6} {len(lat) - 1} proxied calls: p50 {_pct(lat[1:], 0.5):6.2f} ms  "
                      f"p90 {_pct(lat[1:], 0.9):6.2f} ms  mean {statistics.mean(lat[1:]):6.2f} ms  "
                      f"({len(pollers)} viewers)", flush=True)
    off = [x for k, xs in results.items() if k.startswith("off") for x in xs]
    on = [x for k, xs in results.items() if k.startswith("on") for x in xs]
    print(f"\nviewer off: p50 {_pct(off, 0.5):.2f} ms, p90 {_pct(off, 0.9):.2f} ms")
    print(f"viewer on ({args.viewers} polling every {args.interval:g} s): p50 {_pct(on, 0.5):.2f} ms, "
          f"p90 {_pct(on, 0.9):.2f} ms; difference of medians {_pct(on, 0.5) - _pct(off, 0.5):+.2f} ms")
    for code in (304, 200):
        xs = polls.get(code) or []
        if xs:
            print(f"one poll answered {code}: p50 {_pct(xs, 0.5):.2f} ms, p90 {_pct(xs, 0.9):.2f} ms ({len(xs)} polls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
