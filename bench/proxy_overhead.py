"""What ``pager proxy`` adds to a model call, on loopback: ``python bench/proxy_overhead.py``.

A canned model server (tests/proxy_upstream.py) and the proxy run on
127.0.0.1 under uvicorn, in this process's threads. A synthetic agent session
(``pager.lab.synth``, 200 steps, large tool outputs) is replayed step by step:
each request carries the history before one assistant message, as an agent
sends it. Every step is sent twice, straight to the model server and through
the proxy (fresh store), and the paired difference is the proxy's cost:
reading the request, ``assemble`` (recording, scheduling), forwarding,
``observe``.

Reports, in milliseconds: per-request latency direct and proxied (p50, p99)
and the paired overhead; for streaming, time to the first event direct and
proxied and the first-byte latency the proxy adds (target: < 10 ms median);
throughput (requests/s) with ``--concurrency`` clients, each in its own
session, direct and proxied.
"""

from __future__ import annotations

import argparse
import asyncio
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


def _steps(seed: int, steps: int) -> list[list[dict[str, Any]]]:
    _header, msgs = generate_session(seed, steps)
    return [msgs[:i] for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 1]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _row(name: str, xs: list[float]) -> str:
    return f"{name:<34} p50 {statistics.median(xs):8.2f}   p99 {_pct(xs, 0.99):8.2f}   (n={len(xs)})"


def _timed(client: httpx.Client, url: str, body: bytes, session: str) -> float:
    t0 = time.perf_counter()
    r = client.post(url, content=body, headers={**HEADERS, "x-pager-session": session})
    r.raise_for_status()
    return (time.perf_counter() - t0) * 1000.0


def _first_byte(client: httpx.Client, url: str, body: bytes, session: str) -> float:
    t0 = time.perf_counter()
    with client.stream("POST", url, content=body, headers={**HEADERS, "x-pager-session": session}) as r:
        r.raise_for_status()
        chunks = r.iter_raw()
        next(chunks)
        first = (time.perf_counter() - t0) * 1000.0
        for _chunk in chunks:
            pass
    return first


async def _throughput(url: str, bodies: list[list[bytes]]) -> float:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256)) as client:
        async def one(i: int, seq: list[bytes]) -> None:
            for body in seq:
                r = await client.post(url, content=body, headers={**HEADERS, "x-pager-session": f"tp-{i}"})
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, seq) for i, seq in enumerate(bodies)))
        return sum(len(s) for s in bodies) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps of the synthetic session (default 200)")
    ap.add_argument("--concurrency", type=int, default=16, help="clients (sessions) for the throughput run")
    ap.add_argument("--per-client", type=int, default=20, help="requests per client in the throughput run")
    args = ap.parse_args(argv)

    history = _steps(0, args.steps)
    bodies = [orjson.dumps({"model": "m", "messages": h}) for h in history]
    streams = [orjson.dumps({"model": "m", "messages": h, "stream": True}) for h in history]
    with tempfile.TemporaryDirectory() as tmp, ServerThread(make_upstream()) as up, httpx.Client(timeout=60) as client:
        direct_url = up + "/v1/chat/completions"

        def proxy(name: str) -> ServerThread:
            # one store per phase: each phase measures a fresh session
            cfg = ProxyConfig(store=str(Path(tmp) / name), upstream_openai=up, options={"context_window": 128_000})
            return ServerThread(create_app(cfg))

        with proxy("plain") as px:
            proxy_url = px + "/v1/chat/completions"
            for _ in range(3):  # warm both paths: connections, tokenizer, the session's first open
                _timed(client, direct_url, bodies[0], "s1")
                _timed(client, proxy_url, bodies[0], "s1")
            direct = [_timed(client, direct_url, b, "s1") for b in bodies]
            proxied = [_timed(client, proxy_url, b, "s1") for b in bodies]
        with proxy("stream") as px:
            proxy_url = px + "/v1/chat/completions"
            for _ in range(3):
                _first_byte(client, direct_url, streams[0], "s2")
                _first_byte(client, proxy_url, streams[0], "s2")
            s_direct = [_first_byte(client, direct_url, b, "s2") for b in streams]
            s_proxied = [_first_byte(client, proxy_url, b, "s2") for b in streams]
        # pager's own share of the proxied time: assemble, as its reports time it
        assemble = [r["elapsed_ms"] for r in map(orjson.loads, (Path(tmp) / "stream" / "reports.jsonl").read_bytes().splitlines())
                    if r.get("type") == "assemble"][3:]
        per = max(1, args.per_client)
        tp_bodies = [
            [orjson.dumps({"model": "m", "messages": h}) for h in _steps(i + 1, per + 2)[:per]]
            for i in range(args.concurrency)
        ]
        tp_direct = asyncio.run(_throughput(direct_url, tp_bodies))
        with proxy("throughput") as px:
            try:
                tp_proxied = asyncio.run(_throughput(px + "/v1/chat/completions", tp_bodies))
            except httpx.HTTPStatusError as exc:
                tp_proxied = float("nan")
                print(f"throughput through the proxy failed: {exc.response.status_code} {exc.response.text[:300]}")

    sizes = [len(b) for b in bodies]
    print(f"session: {len(bodies)} requests, {min(sizes) // 1024}-{max(sizes) // 1024} KiB of JSON each")
    print("non-streaming, per request (ms)")
    print(_row("  direct to the model server", direct))
    print(_row("  through pager proxy", proxied))
    print(_row("  overhead (paired difference)", [p - d for p, d in zip(proxied, direct)]))
    print("streaming, time to first event (ms)")
    print(_row("  direct", s_direct))
    print(_row("  through pager proxy", s_proxied))
    print(_row("  first-byte latency added", [p - d for p, d in zip(s_proxied, s_direct)]))
    print(_row("  of which pager's assemble", assemble))
    print(f"throughput, {args.concurrency} clients x {args.per_client} requests, one session each (req/s)")
    print(f"  direct {tp_direct:8.1f}   through pager proxy {tp_proxied:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
