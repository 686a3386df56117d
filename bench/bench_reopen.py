"""Reopen and first assemble of a long session: seconds, not minutes; memory bounded.

    python bench/bench_reopen.py [--messages 50000]

Builds a synthetic session of about N messages (pager.lab.synth) in a temporary
store, recording it as a harness would (one call per step), then measures in
fresh processes: reopening the session, the first assemble after the reopen
(the harness resends its whole history, as new objects), and each process's
peak memory. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
import pager
from pager.lab.synth import generate_session
store, steps, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
_header, history = generate_session(7, steps)
out = {{"messages": len(history)}}
if phase == "build":
    t = time.perf_counter()
    with pager.open(store, session="long", context_window=200_000, log_reports=False) as p:
        step = max(1, len(history) // 400)  # ~400 calls: the mirror grows as a harness's would
        for n in range(step, len(history), step):
            while n < len(history) and history[n]["role"] == "tool":
                n += 1
            p.assemble({{"messages": history[:n]}})
        p.assemble({{"messages": history}})
    out["build_s"] = time.perf_counter() - t
else:
    t = time.perf_counter()
    p = pager.open(store, session="long")
    out["reopen_s"] = time.perf_counter() - t
    fresh = json.loads(json.dumps(history))  # new objects: nothing is known by identity
    t = time.perf_counter()
    p.assemble({{"messages": fresh}})
    out["first_assemble_s"] = time.perf_counter() - t
    fresh.append({{"role": "user", "content": "one more thing: check README.md"}})
    t = time.perf_counter()
    p.assemble({{"messages": fresh}})
    out["next_assemble_s"] = time.perf_counter() - t
    p.close()
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def _child(store: str, steps: int, phase: str) -> dict:
    code = CHILD.format(root=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code, store, str(steps), phase],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000, help="about how many messages (default 50000)")
    args = ap.parse_args(argv)
    steps = max(10, int(args.messages / 2.2))  # synth makes about 2.2 messages a step
    with tempfile.TemporaryDirectory() as d:
        store = str(Path(d) / "ctx")
        t = time.perf_counter()
        built = _child(store, steps, "build")
        print(f"built {built['messages']} messages in {time.perf_counter() - t:.1f} s "
              f"(peak {built['peak_rss_mb']:.0f} MB)", flush=True)
        got = _child(store, steps, "reopen")
        print(f"reopen            {got['reopen_s']:8.2f} s")
        print(f"first assemble    {got['first_assemble_s']:8.2f} s   (the whole history as new objects)")
        print(f"next assemble     {got['next_assemble_s']:8.3f} s")
        print(f"peak memory       {got['peak_rss_mb']:8.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
