"""What ``pager proxy`` adds to a model call, on loopback: ``python bench/proxy_overhead.py``.

Issue 23's target: at most 5 ms median and 20 ms p99 added per request for a
1k-message conversation, and the first byte of a stream at most 5 ms later
than direct.

Three processes, as in production: the scripted model server
(tests/proxy_upstream.py) under uvicorn, ``pager proxy`` in front of it (fresh
store), and this one, the client. A synthetic agent conversation
(``pager.lab.synth``: tool calls, large outputs) is sent in each wire format
(OpenAI chat, OpenAI Responses, Anthropic Messages with Claude Code's cache
mark on the newest block), streaming and not, each mode its own conversation
and session (named by the proxy from the request, as a real client's is). The
conversation starts at ``--messages`` (default 1000) and grows by one
assistant turn and its tool results (two messages, sometimes three) per
request: the steady state of a long session, after the proxy has recorded its
history once (the ``--warm`` requests, not counted).

Every request goes once straight to the model server and once through the
proxy (and through each ``--also`` checkout's proxy: the code before a change,
say, under the same load), interleaved (which goes first rotates), so load on
the machine hits all alike; the paired difference is what the proxy adds. Reported per mode,
in milliseconds: direct and proxied latency (p50, p99), the added latency
(p50, p99), the same minus pager's ``assemble`` (its ``elapsed_ms`` in the
store's reports: the proxy's own share), and for streams the time to first
byte direct and proxied and its difference, and the proxy process's CPU time
per request (Linux: /proc), which load disturbs far less than latency, split
into its event loop's thread (what the proxy does itself: HTTP in and out,
body parsing, serialisation, relaying) and its worker threads (pager's
``assemble`` and ``observe``). Every mode is warmed before any is measured;
``--spy FILE`` samples the proxy with py-spy during the measured requests
only. The load average and the machine's speed (``bench/machine_speed.py``) are printed before and after. ``--json FILE`` keeps
every figure. ``--phases`` runs each proxy that has ``--timings`` with it and
prints, per mode, where the added time goes (body read and parse, the hop to
the worker, assemble, the hop back, serialising, the upstream, relaying, and
the garbage collector's pauses during the request; for streams also the
start of the response to the client and its first event), at p50 and p99,
and the breakdown of the slowest requests.

The scripted model answers at once by default, so a request arrives while the
previous one's background work (the index commit a demotion round starts, 20-50
ms on disk) may still run, and waits for it if it searches: a worst case no real
model allows. ``--model-ms N`` makes the model take N ms to its first byte,
direct and proxied alike, as a real model's time to its first token does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson

import machine_speed  # bench/ is this script's folder: first on sys.path

ROOT = Path(__file__).resolve().parents[1]
HEADERS = {"authorization": "Bearer sk-bench", "x-api-key": "sk-bench", "anthropic-version": "2023-06-01",
           "content-type": "application/json"}
PATHS = {"openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses",
         "anthropic-messages": "/v1/messages"}
BASH = {"name": "bash", "description": "Run a shell command in the workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


# -- the conversation ------------------------------------------------------------------------


def _tools(fmt: str) -> list[dict[str, Any]]:
    if fmt == "openai-chat":
        return [{"type": "function", "function": BASH}]
    if fmt == "openai-responses":
        return [{"type": "function", **BASH}]
    return [{"name": BASH["name"], "description": BASH["description"], "input_schema": BASH["parameters"]}]


def _mark_newest(req: dict[str, Any]) -> None:
    """Put a cache mark on the newest block, as Claude Code does on every request."""
    last = req["messages"][-1]
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    content = [dict(b) for b in content]
    content[-1]["cache_control"] = {"type": "ephemeral"}
    req["messages"][-1] = {**last, "content": content}


def conversation(fmt: str, seed: int, start: int, n: int) -> list[dict[str, Any]]:
    """Return ``n`` request bodies of one conversation in ``fmt``, from ``start`` messages on."""
    from pager.formats.base import get_format
    from pager.formats.export import export_request
    from pager.lab.synth import generate_session

    steps = start // 2 + n + 50
    _header, msgs = generate_session(seed, steps)
    # cut before an assistant message: the history an agent sends for its next turn
    cuts = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i >= start][:n]
    if len(cuts) < n:
        raise SystemExit(f"the synthetic session is too short for {n} requests from {start} messages")
    neutral = get_format("openai-chat").to_messages({"model": "m", "messages": msgs}).messages
    full = export_request(neutral, fmt, request={"model": "m"})  # its system prompt / instructions
    bodies = []
    for cut in cuts:
        if fmt == "openai-chat":
            req = {"model": "m", "messages": full["messages"][:cut], "tools": _tools(fmt)}
        elif fmt == "openai-responses":
            req = {"model": "m", "instructions": full.get("instructions"),
                   "input": export_request(neutral[:cut], fmt, request={"model": "m"})["input"], "tools": _tools(fmt)}
        else:
            req = {"model": "m", "max_tokens": 1024, "system": full.get("system"),
                   "messages": export_request(neutral[:cut], fmt, request={"model": "m"})["messages"], "tools": _tools(fmt)}
            _mark_newest(req)
        bodies.append(req)
    return bodies


# -- the servers -----------------------------------------------------------------------------


class _Nothing(list):  # type: ignore[type-arg]
    def append(self, _item: Any) -> None:  # the scripted server keeps no bodies here: hundreds of MB each run
        pass


MODEL_MS_ENV = "PROXY_OVERHEAD_MODEL_MS"  # --model-ms, handed to the model server's process


def make_upstream() -> Any:
    """The scripted model server (``uvicorn --factory proxy_overhead:make_upstream``), keeping no requests.

    With ``PROXY_OVERHEAD_MODEL_MS`` set, every POST waits that long before it is answered: the time a
    model takes to its first token, which the direct request and the proxied one wait alike.
    """
    from proxy_upstream import make_upstream as make

    app = make()
    app.state.seen = _Nothing()
    delay = float(os.environ.get(MODEL_MS_ENV) or 0) / 1000.0
    if delay <= 0:
        return app

    async def thinking(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            await asyncio.sleep(delay)
        await app(scope, receive, send)

    return thinking


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}")
        try:
            httpx.get(url + "/", timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not start in {timeout:g}s")


@contextlib.contextmanager
def _process(args: list[str], port: int, env: dict[str, str], cwd: Path = ROOT) -> Iterator[tuple[str, int]]:
    # cwd matters: ``python -m`` puts it first on sys.path, so it decides which pager is imported
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=None)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, proc)
        yield url, proc.pid
    finally:
        # SIGINT: uvicorn stops as on SIGTERM, and a profiler prefix (--proxy-cmd) writes its output
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env(src: Path) -> dict[str, str]:
    """The environment of a server process: ``src``'s pager first, this file's scripted upstream."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "tests"), str(ROOT / "bench")])
    return env


# -- measuring -------------------------------------------------------------------------------


def _send(client: httpx.Client, url: str, body: bytes, stream: bool) -> tuple[float, float]:
    """Return (time to first byte, total) in ms for one request, the response read to its end."""
    t0 = time.perf_counter()
    with client.stream("POST", url, content=body, headers=HEADERS) as r:
        first = None
        head = b""
        for chunk in r.iter_raw():
            if first is None:
                first = time.perf_counter()
                head = chunk[:300]
        if r.status_code >= 400:
            raise SystemExit(f"{url}: {r.status_code} {head!r}")
    end = time.perf_counter()
    return ((first or end) - t0) * 1000.0, (end - t0) * 1000.0


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs), 3), "p99": round(_pct(xs, 0.99), 3), "n": len(xs)}


def _assemble_ms(store: Path) -> dict[str, list[float]]:
    """Each session's assemble times, in call order, from the store's reports."""
    out: dict[str, list[float]] = {}
    path = store / "reports.jsonl"
    for line in path.read_bytes().splitlines() if path.exists() else ():
        rec = orjson.loads(line)
        if rec.get("type") == "assemble":
            out.setdefault(rec["session"], []).append(float(rec["elapsed_ms"]))
    return out


def _cpu_ms(pid: int) -> tuple[float, float]:
    """CPU time (user + system) a process has used, in ms: (its event loop's thread, all its other threads).

    The main thread runs the event loop: everything the proxy does itself
    (HTTP, body parsing, serialisation, relaying). Worker threads run pager's
    ``assemble`` and ``observe``. Linux only (/proc); (0, 0) elsewhere.
    """
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")

    def read(path: Path) -> float:
        fields = path.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * tick

    try:
        total = read(Path(f"/proc/{pid}/stat"))
        main = read(Path(f"/proc/{pid}/task/{pid}/stat"))
    except OSError:
        return 0.0, 0.0
    return main, total - main


def warm_mode(client: httpx.Client, direct: str, proxies: list[tuple[str, str, int]], fmt: str, stream: bool,
              bodies: list[bytes]) -> None:
    """Send the warm-up bodies direct and through each proxy: each session records its history once."""
    for b in bodies:
        for url in [direct] + [u for _, u, _ in proxies]:
            _send(client, url + PATHS[fmt], b, stream)


def run_mode(client: httpx.Client, direct: str, proxies: list[tuple[str, str, int]], fmt: str, stream: bool,
             bodies: list[bytes]) -> list[dict[str, Any]]:
    """Send each body direct and through each proxy, in rotating order; return each proxy's paired rows."""
    path = PATHS[fmt]
    targets = [direct] + [url for _, url, _ in proxies]
    cpu0 = [_cpu_ms(pid) for _, _, pid in proxies]
    rows: list[list[tuple[float, float]]] = []
    for i, b in enumerate(bodies):
        k = i % len(targets)
        order = targets[k:] + targets[:k]  # who goes first rotates: load falls on every target alike
        got = {url: _send(client, url + path, b, stream) for url in order}
        rows.append([got[url] for url in targets])
    n = max(1, len(bodies))
    cpu = [[(a - b) / n for a, b in zip(_cpu_ms(pid), c)] for (_, _, pid), c in zip(proxies, cpu0)]
    return [{"label": label, "rows": [(r[0], r[j + 1]) for r in rows], "cpu_ms": cpu[j]}
            for j, (label, _, _) in enumerate(proxies)]


@contextlib.contextmanager
def _spy(pid: int, out: str | None) -> Iterator[None]:
    """Sample ``pid`` with py-spy (threads, GIL holders only) while the block runs, into ``out`` (raw format)."""
    if not out:
        yield
        return
    cmd = ["py-spy", "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--threads", "--gil",
           "--output", out]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


# the phases of pager.proxy.timings, as spans: (name, from mark, to mark)
SPANS = [("read", None, "read"), ("parse", "read", "parse"), ("session", "parse", "session"),
         ("hop", "session", "worker"), ("assemble", "worker", "worked"), ("back", "worked", "assembled"),
         ("serialise", "assembled", "serialised"), ("upstream", "serialised", "headers"),
         ("relay", "headers", "done"),
         # streams: the response started to the client, then the first event relayed (within "relay")
         ("start", "headers", "streaming"), ("to first", "streaming", "first")]


def _spans(line: dict[str, Any]) -> dict[str, float]:
    marks = line.get("phases") or {}
    out = {}
    for name, a, b in SPANS:
        if b in marks and (a is None or a in marks):
            out[name] = marks[b] - (marks[a] if a else 0.0)
    out["gc"] = float(line.get("gc_ms") or 0.0)
    return out


def _timings(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(ln) for ln in path.read_bytes().splitlines()] if path.exists() else []


def _print_phases(report: dict[str, Any], worst: int = 3) -> None:
    """Print each mode's spans at p50 / p99 and its slowest requests' spans (``--phases``)."""
    names = [n for n, _a, _b in SPANS] + ["gc"]
    print("\nphases (ms; from pager proxy --timings): p50 / p99 per span; then the slowest requests by added time")
    print(f"{'mode':<26}{'proxy':<12}" + "".join(f"{n:>13}" for n in names))
    for mode in report["modes"]:
        rows = mode.get("phases")
        if not rows:
            continue
        name = f"{mode['format']} {'stream' if mode['stream'] else 'plain'}"
        cells = []
        for n in names:
            xs = [r[n] for r in rows if n in r]
            cells.append(f"{statistics.median(xs):>6.2f}/{_pct(xs, 0.99):<6.1f}" if xs else f"{'':>13}")
        print(f"{name:<26}{mode['proxy'][:11]:<12}" + "".join(cells))
        for r in sorted(rows, key=lambda r: -r["added"])[:worst]:
            print(f"{'':<26}{'slow':<12}" + "".join(f"{r.get(n, 0.0):>13.1f}" for n in names)
                  + f"   added {r['added']:.1f}, assemble {r['assemble_ms'] or 0:.1f} (CPU {r['cpu'] or 0:.1f}), "
                    f"round {r['round']}, full GCs {r['gc_full']}, GC since the last call {r['gc_between']:.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1000, help="messages in the first request (default 1000)")
    ap.add_argument("--requests", type=int, default=60, help="measured requests per mode (default 60)")
    ap.add_argument("--warm", type=int, default=3, help="requests per mode sent before measuring (default 3)")
    ap.add_argument("--formats", default="openai-chat,openai-responses,anthropic-messages")
    ap.add_argument("--modes", default="plain,stream", help="plain, stream or both (default both)")
    ap.add_argument("--context-window", type=int, default=200_000, help="the proxy's --context-window")
    ap.add_argument("--also", action="append", default=[], metavar="CHECKOUT",
                    help="also measure the proxy of another pager checkout, side by side (e.g. the code before a change)")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--spy", metavar="FILE", help="sample this checkout's proxy with py-spy during the measured "
                                                  "requests (GIL holders, per thread) into FILE (raw format)")
    ap.add_argument("--phases", action="store_true", help="record each request's phases in the proxies that can "
                                                          "(pager proxy --timings) and print where the time goes")
    ap.add_argument("--proxy-cmd", default="", help="run this checkout's proxy under this prefix "
                                                    "(e.g. 'python -m cProfile -o FILE')")
    ap.add_argument("--model-ms", type=float, default=0.0,
                    help="the scripted model answers each request after this many ms, direct and proxied "
                         "alike (a model's time to its first token; default 0: at once)")
    args = ap.parse_args(argv)

    formats = [f for f in args.formats.split(",") if f]
    modes = [m == "stream" for m in args.modes.split(",") if m]
    n = args.warm + args.requests
    speed0 = machine_speed.reading()
    load0 = speed0["load"]
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} ({os.cpu_count()} cores); "
          f"machine speed {speed0['loop_ns']:.1f} ns per loop iteration (bench/machine_speed.py)")
    plans = []
    for k, fmt in enumerate(formats):
        for stream in modes:
            reqs = conversation(fmt, 100 + 2 * k + stream, args.messages, n)
            for r in reqs:
                if stream:
                    r["stream"] = True
            plans.append((fmt, stream, [orjson.dumps(r) for r in reqs]))
    checkouts = [("this", ROOT)] + [(Path(a).name, Path(a).resolve()) for a in args.also]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        up_port = _free_port()
        up_cmd = [sys.executable, "-m", "uvicorn", "--factory", "proxy_overhead:make_upstream", "--port", str(up_port),
                  "--log-level", "warning", "--no-access-log"]
        up, _ = stack.enter_context(_process(up_cmd, up_port, {**_env(ROOT), MODEL_MS_ENV: str(args.model_ms)}))
        proxies = []
        for j, (label, src) in enumerate(checkouts):
            port = _free_port()
            prefix = args.proxy_cmd.split() if args.proxy_cmd and j == 0 else [sys.executable]
            cmd = [*prefix, "-m", "pager", "proxy", "--store", str(Path(tmp) / f"store{j}"), "--port", str(port),
                   "--upstream-openai", up, "--upstream-anthropic", up, "--context-window", str(args.context_window),
                   "--log-level", "warning"]
            if args.phases and "--timings" in (src / "pager" / "cli" / "proxy.py").read_text():
                cmd += ["--timings", str(Path(tmp) / f"timings{j}.jsonl")]
            url, pid = stack.enter_context(_process(cmd, port, _env(src), src))
            proxies.append((label, url, pid))
        client = stack.enter_context(httpx.Client(timeout=120))
        # every session warm before any is measured: a profile (--spy) then holds the steady state only
        for fmt, stream, bodies in plans:
            warm_mode(client, up, proxies, fmt, stream, bodies[:args.warm])
        with _spy(proxies[0][2], args.spy):
            for fmt, stream, bodies in plans:
                t = time.perf_counter()
                for res in run_mode(client, up, proxies, fmt, stream, bodies[args.warm:]):
                    res.update(format=fmt, stream=stream, bytes=(len(bodies[args.warm]), len(bodies[-1])))
                    results.append(res)
                print(f"  {fmt} {'stream' if stream else 'plain'}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        stack.close()  # the proxies stop: their reports are complete
        assembles = {label: _assemble_ms(Path(tmp) / f"store{j}") for j, (label, _) in enumerate(checkouts)}
        # one line per model call, in the order sent: the warm-up requests of every mode, then each mode's
        timings = {label: _timings(Path(tmp) / f"timings{j}.jsonl")[len(plans) * args.warm:]
                   for j, (label, _) in enumerate(checkouts)}
    speed1 = machine_speed.reading()
    load1 = speed1["load"]
    report: dict[str, Any] = {"load_before": load0, "load_after": load1, "machine": [speed0, speed1],
                              "messages": args.messages,
                              "model_ms": args.model_ms,
                              "requests": args.requests, "checkouts": [str(src) for _, src in checkouts], "modes": []}
    print(f"conversation: {args.messages} messages at the first measured request, +2 per request, "
          f"{args.requests} requests per mode (after {args.warm} warm-up); the model answers after "
          f"{args.model_ms:g} ms; times in ms")
    print(f"{'mode':<26}{'proxy':<12}{'KiB':>5}  {'direct':>7} {'proxied':>8}  {'added p50':>9} {'p99':>7}"
          f"  {'-assemble p50':>13} {'p99':>7}  {'assemble':>8}  {'TTFB added p50':>14} {'p99':>7}"
          f"  {'CPU/req loop':>12} {'workers':>7}")
    seen: dict[str, int] = {}
    for res in results:
        rows, label = res["rows"], res["label"]
        # sessions were opened in mode order: a proxy's k-th session is its k-th mode
        k = seen[label] = seen.get(label, -1) + 1
        sessions = list(assembles.get(label, {}).values())
        asm = sessions[k][args.warm:args.warm + len(rows)] if k < len(sessions) else []
        if len(asm) != len(rows):
            asm = [0.0] * len(rows)  # reports off or missing: no split
        added = [p[1] - d[1] for d, p in rows]
        own = [a - s for a, s in zip(added, asm)]
        mode = {"format": res["format"], "stream": res["stream"], "proxy": label, "bytes": res["bytes"],
                "direct": _stats([d[1] for d, _ in rows]), "proxied": _stats([p[1] for _, p in rows]),
                "added": _stats(added), "added_minus_assemble": _stats(own), "assemble": _stats(asm),
                "ttfb_direct": _stats([d[0] for d, _ in rows]), "ttfb_proxied": _stats([p[0] for _, p in rows]),
                "ttfb_added": _stats([p[0] - d[0] for d, p in rows]), "proxy_cpu_ms_per_request": {"loop": round(res["cpu_ms"][0], 2), "workers": round(res["cpu_ms"][1], 2)}}
        lines = timings.get(label, [])[k * args.requests:(k + 1) * args.requests]
        if len(lines) == len(rows):
            mode["phases"] = [{**_spans(ln), "added": a, "assemble_ms": ln.get("assemble_ms"),
                               "cpu": ln.get("worker_cpu_ms"), "round": ln.get("round"),
                               "gc_full": ln.get("gc_full", 0), "gc_between": ln.get("gc_between_ms", 0.0),
                               "marks": ln.get("phases"), "finish_cpu": ln.get("finish_cpu_ms")}
                              for ln, a in zip(lines, added)]
        report["modes"].append(mode)
        name = f"{res['format']} {'stream' if res['stream'] else 'plain'}"
        tt = (f"{mode['ttfb_added']['p50']:>14.2f} {mode['ttfb_added']['p99']:>7.2f}" if res["stream"]
              else f"{'':>14} {'':>7}")
        print(f"{name:<26}{label[:11]:<12}{res['bytes'][1] // 1024:>5}  {mode['direct']['p50']:>7.2f} "
              f"{mode['proxied']['p50']:>8.2f}  {mode['added']['p50']:>9.2f} {mode['added']['p99']:>7.2f}  "
              f"{mode['added_minus_assemble']['p50']:>13.2f} {mode['added_minus_assemble']['p99']:>7.2f}  "
              f"{mode['assemble']['p50']:>8.2f}  {tt}  {res['cpu_ms'][0]:>12.2f} {res['cpu_ms'][1]:>7.2f}")
    if args.phases:
        _print_phases(report)
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; "
          f"machine speed {speed1['loop_ns']:.1f} ns per loop iteration")
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
