"""What ``pager proxy`` does with real clients' conversations: ``python bench/proxy_clients.py``.

Replays each client's request sequence (the hand-made shapes of
``tests/client_shapes.py``, and any capture of the real clients in
``tests/data/clients/``) on loopback, once straight to a canned model server
and once through a fresh proxy, request by request in the client's order.
Reports per client: requests, conversations and the sessions pager made of
them, forks and "history diverged" reports, prompts showing a handle without
``expand``, refused re-reads served, prompt tokens the client sent and the
model got (cl100k over every string of the history, system and tools), the
proxy's overhead per request (paired: proxied minus direct, median and p95),
and the first request's latency.
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pager  # noqa: E402
from pager.core.tokens import default_counter  # noqa: E402
from pager.proxy import ProxyConfig, ServerThread, create_app  # noqa: E402
from client_shapes import HAND_MADE  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

HANDLE = re.compile(r"\bpg:\d+-[0-9a-f]{6}\b")
MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "accept-encoding"})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def prompt_tokens(body: dict[str, Any]) -> int:
    count = default_counter().count
    keys = ("system", "instructions", "messages", "input", "tools")
    return sum(count(s) for k in keys for s in _strings(body.get(k)))


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    lines = [orjson.loads(x) for x in (gzip.decompress(raw) if path.suffix == ".gz" else raw).splitlines() if x.strip()]
    records = [r for r in lines[1:] if r.get("method", "POST") == "POST" and r.get("path") in MODEL_ROUTES]
    return {"header": lines[0], "records": records}


def _count(value: Any) -> Any:
    return len(value) if isinstance(value, list) else value


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _send(client: httpx.Client, r: dict[str, Any]) -> float:
    auth = {"x-api-key": "sk-bench"} if r["path"] == "/v1/messages" else {"authorization": "Bearer sk-bench"}
    t0 = time.perf_counter()
    headers = {k: v for k, v in r["headers"].items() if k.lower() not in HOP}
    resp = client.post(r["path"], content=orjson.dumps(r["body"]), headers={**headers, **auth})
    resp.read()
    resp.raise_for_status()
    return (time.perf_counter() - t0) * 1000.0


def run(name: str, capture: dict[str, Any], window: int, up: Any, up_url: str) -> dict[str, Any]:
    records = capture["records"]
    with httpx.Client(base_url=up_url, timeout=120) as direct:
        t_direct = [_send(direct, r) for r in records]
    up.state.seen.clear()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "ctx"
        cfg = ProxyConfig(store=str(store), upstream_openai=up_url, upstream_anthropic=up_url,
                          options={"context_window": window})
        with ServerThread(create_app(cfg)) as base, httpx.Client(base_url=base, timeout=120) as proxied:
            t_proxy = [_send(proxied, r) for r in records]
        seen = [b for _p, _h, b in up.state.seen]
        reps = [orjson.loads(x) for x in (store / "reports.jsonl").read_bytes().splitlines()] \
            if (store / "reports.jsonl").exists() else []
        reps = [r for r in reps if r.get("type") == "assemble"]
        sessions = pager.store_sessions(store)
        forks = 0
        if sessions:
            with pager.open(store, sessions[0]) as p:
                forks = sum(len(p.store.branches(s)) - 1 for s in sessions)
    unopenable = sum(1 for b in seen if HANDLE.search("\n".join(_strings(b.get("messages") or b.get("input"))))
                     and "expand" not in {(t.get("function") or t).get("name") for t in b.get("tools") or ()})
    served = sum(1 for b in seen if "answered this read from its cache" in "\n".join(_strings(b)))
    sent = sum(prompt_tokens(r["body"]) for r in records)
    got = sum(prompt_tokens(b) for b in seen)
    overhead = [p - d for p, d in zip(t_proxy, t_direct)]
    return {
        "client": name, "requests": len(records),
        "conversations": _count(capture["header"].get("conversations")), "sessions": len(sessions),
        "forks": forks, "diverged": sum(1 for r in reps if r["reason"] == "history diverged"),
        "unopenable": unopenable, "served": served,
        "passed_untouched": sum(1 for r, b in zip(records, seen) if r["body"] == b),
        "tokens_sent": sent, "tokens_model": got, "ratio": round(got / sent, 3) if sent else None,
        "overhead_p50": round(statistics.median(overhead), 1), "overhead_p95": round(_pct(overhead, 0.95), 1),
        "first_ms": round(t_proxy[0], 1), "first_direct_ms": round(t_direct[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=200_000, help="the proxy's context window (default 200000)")
    ap.add_argument("--captures", type=Path, default=ROOT / "tests" / "data" / "clients")
    args = ap.parse_args(argv)
    todo = [(name, make()) for name, make in HAND_MADE.items()]
    todo += [(p.name.split(".")[0], load(p)) for p in sorted(args.captures.glob("*.jsonl*"))]
    up = make_upstream()
    with ServerThread(up, graceful=1.0) as up_url:
        rows = [run(name, cap, args.window, up, up_url) for name, cap in todo]
    for row in rows:
        print(orjson.dumps(row).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
