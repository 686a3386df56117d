"""Run the real agent CLIs through ``pager proxy`` against a strict scripted upstream: ``python bench/clients/run.py``.

Installs the pinned Claude Code, Codex CLI and opencode from npm into a temp
prefix, starts the scripted upstream (``upstream.py``) on 127.0.0.1, and runs
each client through a 40-50-turn scripted coding session twice: straight at
the upstream, and through ``python -m pager proxy`` (from ``--pager-src``,
default this repository) with a fresh store. Codex also runs two
conversations at once in one directory (``pair``). Then it checks the proxied
run against the direct one (``checks.py``), prints a table, writes JSON, and
exits 1 if a check failed.

    python bench/clients/run.py                                  # everything, against this checkout's proxy
    python bench/clients/run.py --pager-src /work/wt-proxy-identity --json out.json
    python bench/clients/run.py --clients codex --scenarios pair
    python bench/clients/run.py --capture /work/scratch/captures --no-proxy   # only (re)write the captures

Nothing here runs in the test suite: it needs node, npm and the clients.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture import write_capture  # noqa: E402
from checks import compare, metrics  # noqa: E402
from clients import CLIENTS, PINS, install  # noqa: E402
from harness import RunResult, run_scenario, start_upstream  # noqa: E402
from validate import self_test  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# serial: the main session, but the model opens what pager hid one handle per turn (more than the proxy's
# 4 tool rounds per client turn)
SCENARIOS = {"claude": ["main", "serial"], "codex": ["main", "pair", "serial"], "opencode": ["main"]}
CHECK_COLUMNS = ("clients_ok", "no_violations", "same_outcome", "same_tool_calls", "sessions_are_conversations",
                 "no_forks", "handles_openable", "refusals_served", "codex_file_pages")


def _capture(dir: Path, run: RunResult, versions: dict[str, str], suffix: str = "") -> Path:
    name = f"{run.client}-{run.scenario}{suffix}.jsonl.gz"
    return write_capture(dir / name, run.records, {
        "client": run.client, "version": versions.get(run.client), "scenario": run.scenario, "mode": run.mode,
        "conversations": [t.rsplit("-", 1)[0] for t in run.tags], "repo": str(run.repo),
        "note": "requests as the client sent them to the scripted upstream (mode direct) or as the proxy "
                "forwarded them (mode proxy); system prompts and tool descriptions redacted to placeholders",
    })


def _revision(src: Path) -> str:
    """The commit of the pager checkout under test, with "+dirty" when its work tree has changes."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "pager"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return "-"
    return "ok" if check["ok"] else "FAIL"


def table(results: list[dict[str, Any]]) -> str:
    head = ["run", "turns d/p", "prompt tok d", "prompt tok p", "ratio", "in-proxy ms med/p95", "gap ovh ms med/p95",
            "1st req ms", *[c.replace("_", " ") for c in CHECK_COLUMNS]]
    rows = [head]
    for r in results:
        m, c = r["metrics"], r["checks"]
        rows.append([
            f"{r['client']}-{r['scenario']}", f"{m['requests']['direct']}/{m['requests']['proxy']}",
            str(m["prompt_tokens"]["direct"]), str(m["prompt_tokens"]["proxy"]), str(m["prompt_tokens"]["ratio"]),
            f"{m['proxy_ms']['median']}/{m['proxy_ms']['p95']}", f"{m['overhead_ms']['median']}/{m['overhead_ms']['p95']}",
            str(m["proxy_ms"]["first"]),
            *[_cell(c.get(k)) for k in CHECK_COLUMNS],
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [" | ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    ap.add_argument("--scenarios", nargs="+", choices=("main", "pair", "serial"),
                    default=["main", "pair", "serial"])
    ap.add_argument("--pager-src", type=Path, default=REPO, help="the pager checkout whose proxy is tested")
    ap.add_argument("--prefix", type=Path, default=Path(tempfile.gettempdir()) / "pager-bench-clients-npm",
                    help="npm prefix the pinned clients are installed into (reused when present)")
    ap.add_argument("--work", type=Path, help="where repos, homes and stores go (default: a new temp dir)")
    ap.add_argument("--capture", type=Path, help="write each run's redacted request sequence here (JSONL)")
    ap.add_argument("--no-proxy", action="store_true", help="direct runs only (with --capture: just the captures)")
    ap.add_argument("--context-window", type=int, default=60000,
                    help="the window the proxy pages to (small enough that the fixture's files get paged)")
    ap.add_argument("--proxy-arg", action="append", default=[], help="one more argument for `pager proxy`")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds each client process may run")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    self_test()  # a lenient upstream would let any proxy pass
    revision = _revision(args.pager_src)
    print(f"pager under test: {args.pager_src} at {revision}", flush=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="pager-bench-clients-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"installing {', '.join(f'{p}@{v}' for p, v in PINS.values())} into {args.prefix}", flush=True)
    versions = install(args.prefix)
    print("versions:", versions, flush=True)
    up, port, server = start_upstream()
    proxy_args = ("--context-window", str(args.context_window), *args.proxy_arg)
    results: list[dict[str, Any]] = []
    failed = False
    try:
        for client in args.clients:
            for scenario in [s for s in SCENARIOS[client] if s in args.scenarios]:
                t = time.time()
                direct = run_scenario(up, port, client, scenario, "direct", args.prefix, work, args.pager_src,
                                      proxy_args, args.timeout)
                print(f"{client}-{scenario} direct: {len(direct.records)} requests, {time.time() - t:.0f}s", flush=True)
                if args.capture:
                    print("  capture:", _capture(args.capture, direct, versions), flush=True)
                if args.no_proxy:
                    continue
                t = time.time()
                proxy = run_scenario(up, port, client, scenario, "proxy", args.prefix, work, args.pager_src,
                                     proxy_args, args.timeout)
                print(f"{client}-{scenario} proxy: {len(proxy.records)} requests, {time.time() - t:.0f}s", flush=True)
                if args.capture:
                    _capture(args.capture, proxy, versions, "-via-proxy")
                checks = compare(direct, proxy, args.pager_src)
                store = checks.pop("_store")
                res = {"client": client, "version": versions[client], "scenario": scenario,
                       "metrics": metrics(direct, proxy), "checks": checks, "store": store,
                       "proxy_log_tail": proxy.proxy_log[-2000:]}
                failed |= not all(c["ok"] for c in checks.values())
                results.append(res)
                print(json.dumps({k: v for k, v in checks.items()}, default=str)[:3000], flush=True)
    finally:
        server.should_exit = True
    out = {"pager_src": str(args.pager_src), "pager_revision": revision, "versions": versions, "pins": PINS, "work": str(work),
           "context_window": args.context_window, "proxy_args": list(proxy_args), "results": results}
    if results:
        print()
        print(table(results))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
        print(f"\nwrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
