"""How fast this machine runs Python at the moment: ``python bench/machine_speed.py``.

Issue 23's per-call targets are times, and times on a shared machine move
with the machine: on the development VM the same code took 4.5 ms or over
9 ms a call in the same hour, the same tree's test command 130 s or 189 s.
A timing is only readable beside the machine's speed when it was taken, so
the timing benches (``bench_scale.py``, ``proxy_overhead.py``) print this
reading at their start and end, beside the load average, and keep it in
their ``--json``.

The reading is the CPU time one iteration of a fixed pure-Python loop takes
(``for i in range(n): s += i & 1023``: the interpreter's dispatch and small
integers, no memory to speak of), the best of a few runs, in nanoseconds:
lower is faster. The load average says how busy the machine is with other
work it can see; this says how fast it runs when it does run (a VM's host
can slow it without any load showing). The development VM (CPython 3.11.7
built ``--enable-shared``, without PGO) read 66-97 ns over an hour, at the
readings taken with its load average under 1.

``--seconds N`` samples every ``--every`` seconds for that long and prints
the lowest, median and highest: a look at how steady the machine is before
a campaign of timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

__all__ = ["describe", "loop_ns", "reading"]

ITERATIONS = 1_000_000
REPEATS = 3


def loop_ns(iterations: int = ITERATIONS, repeats: int = REPEATS) -> float:
    """Return the CPU nanoseconds per iteration of the fixed loop, the best of ``repeats`` runs."""
    if iterations < 1 or repeats < 1:
        raise ValueError(f"iterations and repeats must be at least 1, got {iterations!r} and {repeats!r}")
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time_ns()  # this thread's CPU: another thread of the process does not count
        s = 0
        for i in range(iterations):
            s += i & 1023
        best = min(best, time.thread_time_ns() - t)
    return best / iterations


def reading(iterations: int = ITERATIONS, repeats: int = REPEATS) -> dict[str, Any]:
    """Return the loop's speed and the load average now: ``{"loop_ns": float, "load": [1, 5, 15 min]}``."""
    return {"loop_ns": round(loop_ns(iterations, repeats), 1), "load": [round(x, 2) for x in os.getloadavg()]}


def describe(r: dict[str, Any]) -> str:
    """Return a reading as one line of text."""
    load = " ".join(f"{x:.2f}" for x in r["load"])
    return f"{r['loop_ns']:.1f} ns per loop iteration (lower is faster), load average {load} ({os.cpu_count()} CPUs)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.0, help="keep sampling for this long (default: one reading)")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between readings with --seconds (default 5)")
    args = ap.parse_args(argv)
    if args.seconds < 0 or args.every <= 0:
        ap.error("--seconds must be at least 0 and --every above 0")
    end = time.monotonic() + args.seconds
    seen: list[float] = []
    while True:
        r = reading()
        seen.append(r["loop_ns"])
        print(time.strftime("%H:%M:%S"), describe(r), flush=True)
        if time.monotonic() + args.every > end:
            break
        time.sleep(args.every)
    if len(seen) > 1:
        print(f"{len(seen)} readings: lowest {min(seen):.1f}, median {statistics.median(seen):.1f}, "
              f"highest {max(seen):.1f} ns ({max(seen) / min(seen):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
