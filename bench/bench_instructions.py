"""Instructions per steady-state ``assemble``, counted by valgrind: ``python bench/bench_instructions.py``.

    python bench/bench_instructions.py [--sizes 1000,50000] [--calls 30] [--format anthropic-messages]
                                       [--phases | --ready]

``bench/bench_scale.py`` times the calls, and on a shared machine the same
calls take from 1x to 2.5x the CPU time from one minute to the next. Counted
instructions do not move with the machine: ``valgrind --tool=callgrind``
counts every instruction of every thread of the process, the same for the
same work whatever else runs. This counts each steady-state call that way,
at each size, so that two versions of the code (or two sizes) compare from
one run each.

For each size, the session is built natively as ``bench_scale`` builds it
(its "steady" phase, with one measured call); then one process, under
callgrind, reopens the session, assembles the recorded history once, makes
``--warm`` steady-state calls and then ``--calls`` more (the same two-message
steps as ``bench_scale``'s, the ones after the step its run used). Before each
counted call and after the last, the process calls ``os.getppid()``, and
callgrind (``--dump-before=getppid``, ``--separate-threads=yes``) writes out
what the calling thread did since the last dump: one count per call, the
calling thread's alone (its own work, as ``bench_scale``'s calling-thread
p50; where Tantivy's commits and merges land would move a count of every
thread from run to run by several percent). Reported: the p50, the p99
(nearest rank) and the mean per call, the p50 against the first size, and
the other threads' instructions over the whole run (the reopen and warm-up
included) divided by the counted calls. Under valgrind a
process runs some 50 times slower: a size took 1-1.5 minutes at 1,000 messages
and 4-5 at 50,000 here (the native build of the session included).

``--ready`` runs each counted call as ``pager proxy`` does (``Pager._assemble``
with ``ready``: the request is forwarded before the rest of the call, the
store's COMMIT among it) and marks the moment its request is ready: a third
and fourth column give the calling thread's instructions up to it, what the
proxy adds to a request.

``--phases`` also counts each call function by function: the counting
process marks the entry to and the return from each function of
``instruction_phases.PHASES`` during the counted calls, and the medians of
each phase (nested: ``record/prepare/terms``; ``other`` outside them) over the
calls that were not demotion rounds are printed as a second table. The marks
cost a little themselves (``bench/instruction_phases.py`` says how much).

Needs ``valgrind`` on the PATH (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale  # noqa: E402
import instruction_phases  # noqa: E402
from scale_steps import PRELUDE  # noqa: E402

# The counting process: after the prelude (imports, steady_steps: bench/scale_steps.py), reopen the session and run
# ``warm`` then ``calls`` steady steps after the ``skip`` that the build's run used, marking each counted
# call's start and the last one's end with a call callgrind dumps at (``MARK``, in ``instruction_phases.WRAP``);
# with ``phased``, also each entry to and return from a function of ``instruction_phases.PHASES``.
COUNT = PRELUDE + r"""
store, hist_file, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
skip, warm, calls, phased = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1"
split = sys.argv[8] == "1"  # mark the moment each counted call's request is ready to forward
{phases}
if phased:
    install(PHASES)
with open(hist_file, "rb") as f:
    request = orjson.loads(f.read())
key = history_key(fmt)
history = request[key]
extra = {{k: v for k, v in request.items() if k != key}}
steps = steady_steps(skip + warm + calls, fmt)[skip:]
p = pager.open(store, session="scale", context_window=200_000, log_reports=False)
p.assemble({{**extra, key: list(history)}}, format=fmt)  # the reopen: the recorded history, matched
reopened = p.last_report.new_pages
was_round = []
for s, step in enumerate(steps):
    history.extend(step)
    req = {{**extra, key: list(history)}}
    if s >= warm:
        mark("call")
        ON[0] = phased
    if split and s >= warm:
        p._assemble(req, format=fmt, ready=lambda out: mark("ready"))  # what the proxy forwards at
    else:
        p.assemble(req, format=fmt)
    ON[0] = False
    if s >= warm:
        was_round.append(bool(p.last_report.round))
if LOG:
    mark("end")
p.close()
print(json.dumps({{"messages": len(history), "calls": len(steps) - warm, "marks": len(LOG), "rounds": sum(was_round),
                  "was_round": was_round, "log": LOG if phased else None, "reopen_new_pages": reopened}}))
"""
MARK = "getppid"

_SUMMARY = re.compile(rb"^summary: (\d+)", re.MULTILINE)  # in a dump's header: its instructions (event Ir)


def read_dumps(folder: Path, stem: str) -> tuple[list[int], int]:
    """Return (the calling thread's count in each numbered dump, in order; the other threads' in all).

    With ``--separate-threads=yes`` a dump the calling thread triggers is that thread's alone
    (``stem.<n>-01``); every other thread's count comes in the dump at exit (``stem-<t>``, t > 1).
    """
    name = re.compile(re.escape(stem) + r"(?:\.(\d+))?-(\d+)")
    parts: dict[int, int] = {}
    others = 0
    for f in folder.iterdir():
        m = name.fullmatch(f.name)
        if m is None:
            continue
        with open(f, "rb") as fh:
            found = _SUMMARY.search(fh.read(65536))
        if found is None:
            raise SystemExit(f"{f}: no callgrind summary line")
        part, thread = m.group(1), int(m.group(2))
        if thread != 1:
            others += int(found.group(1))
        elif part is not None:
            parts[int(part)] = int(found.group(1))
    if sorted(parts) != list(range(1, len(parts) + 1)):
        raise SystemExit(f"callgrind's dumps in {folder} are not numbered 1 to {len(parts)}")
    return [parts[k] for k in sorted(parts)], others


def count(store: str, hist: str, fmt: str, skip: int, warm: int, calls: int, valgrind: str | None,
          dumps: Path | None = None, phases: bool = False, ready: bool = False) -> tuple[list[int], int, dict]:
    """Run the counting process; return (each counted call's instructions, the other threads', its JSON).

    Under callgrind when ``valgrind`` names it (its dumps go to ``dumps``); natively, with no counts, otherwise.
    ``phases``: the functions of ``instruction_phases.PHASES`` marked too; the JSON's ``phases`` then holds
    each counted call's instructions by phase (``instruction_phases.attribute``). ``ready``: each counted
    call runs as the proxy's does (``Pager._assemble`` with ``ready``) and is marked when its request is
    ready to forward; the JSON's ``until_ready`` holds each call's instructions up to that mark.
    """
    if phases and ready:
        raise ValueError("count by phase or up to the request's forwarding, not both")
    cmd = [sys.executable, "-c", COUNT.format(root=str(bench_scale.ROOT), phases=instruction_phases.WRAP
                                              + f"PHASES = {instruction_phases.PHASES!r}\n"),
           store, hist, fmt, str(skip), str(warm), str(calls), "1" if phases else "0", "1" if ready else "0"]
    if valgrind is not None:
        assert dumps is not None
        cmd = [valgrind, "--tool=callgrind", "--separate-threads=yes", f"--dump-before={MARK}", "--dump-instr=no",
               "--dump-line=no", f"--callgrind-out-file={dumps / 'cg.out'}", *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": str(bench_scale.ROOT)})
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if valgrind is None:
        return [], 0, out
    mine, others = read_dumps(dumps, "cg.out")  # type: ignore[arg-type]
    # dump 1: start-up, reopen and warm-up, up to the first mark; then one a call (the last mark's dump
    # ends the last call; the dump at exit is the close), or one a stretch between two marks with phases
    if len(mine) != out["marks"]:
        raise SystemExit(f"callgrind wrote {len(mine)} dumps for {out['marks']} marks")
    if phases:
        out["phases"] = instruction_phases.attribute(out["log"], mine)
        return [sum(c.values()) for c in out["phases"]], others, out
    if ready:  # two stretches a call: up to its request's forwarding, and the rest
        before, after = mine[1::2], mine[2::2]
        out["until_ready"] = before
        return [a + b for a, b in zip(before, after)], others, out
    return mine[1:], others, out


def run(sizes: list[int], calls: int, warm: int, fmt: str, valgrind: str | None, phases: bool = False,
        ready: bool = False) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as d:
        for n in sizes:
            store, hist = str(Path(d) / f"ctx-{n}"), str(Path(d) / f"history-{n}.json")
            dumps = Path(d) / f"dumps-{n}"
            dumps.mkdir()
            t = time.perf_counter()
            built = bench_scale._child("steady", store, hist, str(n), "1", "0", "0", fmt)
            per_call, others, out = count(store, hist, fmt, 1, warm, calls, valgrind, dumps, phases, ready)
            if out["reopen_new_pages"]:
                raise SystemExit(f"{n} messages: the reopened session recorded its history again")
            row = {"size": n, "messages": built["messages"], "calls": out["calls"], "rounds": out["rounds"], "warm": warm,
                   "instructions": per_call, "others_run": others, "seconds": round(time.perf_counter() - t)}
            if per_call:
                m = [c / 1e6 for c in per_call]
                row.update(p50_m=round(bench_scale._pct(m, 0.5), 2), p99_m=round(bench_scale._pct(m, 0.99), 2),
                           mean_m=round(sum(m) / len(m), 2), others_per_call_m=round(others / len(m) / 1e6, 2))
            if out.get("until_ready"):
                m = [c / 1e6 for c in out["until_ready"]]
                row.update(until_ready_p50_m=round(bench_scale._pct(m, 0.5), 2),
                           until_ready_p99_m=round(bench_scale._pct(m, 0.99), 2))
            if phases:
                row["phases_m"] = {k: round(v / 1e6, 3)
                                   for k, v in instruction_phases.medians(out["phases"], out["was_round"]).items()}
            rows.append(row)
            print(f"  {n:>6} messages: p50 {row.get('p50_m')} M instructions a call, p99 {row.get('p99_m')} M, "
                  f"mean {row.get('mean_m')} M, other threads {row.get('others_per_call_m')} M, "
                  f"{row['rounds']} demotion rounds ({row['seconds']} s)",
                  file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Return the rows as a Markdown table, with each row's p50 against the first row's."""
    base = rows[0]["p50_m"]
    out = ["| messages | calling thread p50 (M instructions a call) | p99 | mean | p50 against the first row "
           "| other threads, whole run, per counted call | demotion rounds among the calls |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    split = all("until_ready_p50_m" in r for r in rows)
    if split:
        out[0] += " up to the request's forwarding: p50 | p99 |"
        out[1] += "---:|---:|"
    for r in rows:
        out.append(f"| {r['size']:,} | {r['p50_m']:.2f} | {r['p99_m']:.2f} | {r['mean_m']:.2f} "
                   f"| {r['p50_m'] / base:.2f}x | {r['others_per_call_m']:.2f} | {r['rounds']} of {r['calls']} |"
                   + (f" {r['until_ready_p50_m']:.2f} | {r['until_ready_p99_m']:.2f} |" if split else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,50000", help="comma-separated history sizes (default 1000,50000)")
    ap.add_argument("--calls", type=int, default=30, help="steady-state calls counted per size (default 30)")
    ap.add_argument("--warm", type=int, default=5, help="calls after the reopen, not counted (default 5)")
    ap.add_argument("--format", default="openai-chat",
                    choices=bench_scale.FORMATS,
                    help="the wire format the history is sent in (default openai-chat)")
    ap.add_argument("--phases", action="store_true",
                    help="also count each call function by function (instruction_phases.PHASES) and print the "
                         "medians by phase")
    ap.add_argument("--ready", action="store_true",
                    help="run each counted call as the proxy does and also count it up to the moment its request "
                         "is ready to forward (what the proxy adds to a request)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    if args.calls < 1:
        ap.error("--calls must be at least 1")
    if args.phases and args.ready:
        ap.error("--phases and --ready count the calls two ways: one at a time")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not on the PATH: it counts the instructions (Debian: apt-get install valgrind)")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    t = time.perf_counter()
    rows = run(sizes, args.calls, args.warm, args.format, valgrind, args.phases, args.ready)
    print(table(rows))
    if args.phases:
        print()
        print(instruction_phases.table(rows))
    print(f"\n{args.calls} calls per size after {args.warm} warm-up calls, two new messages each; "
          f"sent as {args.format}; {time.perf_counter() - t:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "format": args.format}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
