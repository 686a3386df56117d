"""Run the chaos harness: SIGKILLs, many writers, fuzzing, bit flips. Prints the counts; exit 1 on any fault.

    python bench/chaos/run.py            # the full campaign (~15 minutes on a loaded 2-core machine)
    python bench/chaos/run.py --quick    # a minute or two
    python bench/chaos/run.py --only kills --kills 200

Full: >= 1,000 SIGKILLs (in parallel lanes, each its own stores), 4 processes
x 4 threads on mixed sessions for 3 minutes, >= 10,000 fuzzed calls (1 MB
commands every 500 calls and one 50 MB command), 108 bit flips over the
recall index's 9 file types (bench/chaos/chaos_bitflip.py). See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos_common  # noqa: E402,F401  (puts the worktree's pager first on sys.path)

# faults that must be zero, per part
MUST_BE_ZERO = {
    "kills": ("unopenable", "lost", "duplicates", "wrong_content", "missing_from_index", "child_errors",
              "lane_errors"),
    "load": ("errors", "illegit_behind", "dead_workers", "lost", "duplicates", "wrong_content",
             "page_count_mismatch", "missing_from_index"),
    "fuzz": ("untyped_errors", "hangs", "invalid_prompts", "crashed_workers"),
    "bitflip": ("untyped_errors", "not_healed"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short run: 60 kills, 20 s of load, 1,000 calls")
    ap.add_argument("--only", choices=("kills", "load", "fuzz", "bitflip"), action="append")
    ap.add_argument("--kills", type=int)
    ap.add_argument("--lanes", type=int, default=3, help="kill campaigns run side by side")
    ap.add_argument("--load-seconds", type=float)
    ap.add_argument("--fuzz-calls", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the counts here")
    a = ap.parse_args(argv)
    kills = a.kills or (60 if a.quick else 1000)
    load_s = a.load_seconds or (20.0 if a.quick else 180.0)
    calls = a.fuzz_calls or (1000 if a.quick else 10_000)
    parts = a.only or ["kills", "load", "fuzz", "bitflip"]
    out: dict = {}
    log = lambda s: print(f"  {s}", file=sys.stderr, flush=True)  # noqa: E731
    for part in parts:
        t0 = time.monotonic()
        print(f"== {part}", file=sys.stderr, flush=True)
        if part == "kills":
            import chaos_kills

            counts = chaos_kills.run_lanes(kills, a.lanes, seed=a.seed, max_delay=0.8)
        elif part == "load":
            import chaos_load

            counts = chaos_load.run(load_s, processes=4, threads=4, seed=a.seed, log=log)
        elif part == "fuzz":
            import chaos_fuzz

            counts = chaos_fuzz.run(calls, seed=a.seed, big_every=500, huge=not a.quick, log=log)
        else:
            import chaos_bitflip

            got = chaos_bitflip.campaign(per_type=2 if a.quick else 12, seed=a.seed, log=log)
            counts = {**got["counts"], "failures": [json.dumps(f) for f in got["failures"]]}
        counts["wall_seconds"] = round(time.monotonic() - t0, 1)
        out[part] = counts
        shown = {k: v for k, v in counts.items() if k not in ("failures", "samples", "error_samples")}
        print(f"{part}: {json.dumps(shown)}", flush=True)
        for line in (counts.get("failures") or counts.get("samples") or counts.get("error_samples") or [])[:10]:
            print(f"  ! {line[:600]}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1, default=str))
    bad = {p: {k: out[p].get(k) for k in MUST_BE_ZERO[p] if out[p].get(k)} for p in out}
    bad = {p: v for p, v in bad.items() if v}
    print("FAULTS: " + json.dumps(bad) if bad else "no faults", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
