"""How assemble's cost grows with the history: steady-state CPU per call, reopen time and memory.

    python bench/bench_scale.py [--sizes 100,1000,10000,50000] [--calls 60] [--json out.json] [--fresh]
    python bench/bench_scale.py --format anthropic-messages   # or openai-responses: the history in that shape
    BENCH_SCALE_PROFILE=cumulative python bench/bench_scale.py --sizes 10000   # and a cProfile of the calls

The same calls' instructions, counted by valgrind (what the machine's speed does not move):
``bench/bench_instructions.py``; both draw the session and its steps with ``bench/scale_steps.py``.

For each size N a synthetic session (``pager.lab.synth``) of about N messages is
recorded through the public API, as a harness would (a few hundred growing
calls), into a store in a temporary directory kept for the run. Then, in the
same process, ``calls`` steady-state calls each append two new messages (an
assistant message with one tool call and its result: the same steps at every
size, drawn from a synthetic session of their own, so that the rows differ by
the history alone) and the CPU time of each ``assemble`` is taken, once the
background work the build left has ended (Tantivy's merges of the pages it
indexed in a few hundred calls, a backlog a session recorded over hours does
not carry: the process idles until its CPU time stops growing) (``time.process_time``: every thread of the process,
not wall time, so the other load on the machine counts less). Work a call
leaves to a background thread (the index commit) is counted in whichever calls
it overlaps, so two more figures stand beside the p50: the mean, every
thread's CPU over the measured calls divided by their number (what the calls
cost in all, wherever it ran), and the calling thread's own p50
(``time.thread_time``); the ratios beside the p50's add the calling thread's
p50 and what the other threads spent during the median call (process CPU
minus the calling thread's, the median over the calls): at 10k pages and more,
Tantivy's merges after the commit every ``COMMIT_EVERY`` pages rewrite up to
about 17,000 documents, and they run behind the calls that follow. A last
table says which threads those are (Linux: each thread's CPU from
``/proc/self/task/*/schedstat`` before and after every measured call, grouped
by the names Tantivy gives its indexing and merge threads; a Python thread,
pager's background commit, carries the process's name; a thread that ended
during the call counts in the process's CPU alone) and how many measured calls
they worked during (over ``OVERLAP_MS``). With
``--fresh`` each call's history is first decoded anew from JSON, untimed: equal values in new objects, as a harness that
rebuilds its history sends them. Finally a fresh
process reopens the store and assembles once with the whole history as new
objects (what a restarted harness sends): its CPU time and peak RSS (with the
RSS the history itself holds before ``pager.open``, for comparison). What
every process pays once whatever the store (importing the facade, loading
the tokenizer's BPE table) is timed apart, before the clock starts, in the
"imports" column. The peak is the high-water mark from the moment the
history is loaded (reset through ``/proc/self/clear_refs``; where that file
cannot be written, the process's lifetime peak, which then includes
``orjson.loads`` of the history file: at 50k messages about 440 MB alone).

With ``--format`` the conversation is sent in that wire format's own shape
(``pager.formats.export``: an Anthropic history holds its tool results in
user messages), each step converted on its own and appended, through
``assemble(..., format=...)``.

Prints one row per size and the ratios against the 1k row, with the load
average and the machine's speed (``bench/machine_speed.py``) at the start and
the end. Each size runs in its own process, so one
size's memory does not count in the next.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine_speed  # noqa: E402 - bench/ is a folder of scripts, not a package
from scale_steps import PRELUDE  # noqa: E402

CHILD = PRELUDE + r"""

# the process's other threads by name (Linux: /proc/self/task/<tid>/comm): Tantivy names its own; a
# Python thread (pager's background commit) and numpy's BLAS workers carry the process's name
def thread_group(comm):
    if comm.startswith(("thrd-tantivy", "thread-tantivy")):
        return "indexing"
    if comm.startswith(("merge_thread", "segment_updater", "docstore")):
        return "merges"
    return "python"

def threads_ns():  # {{tid: (group, CPU ns)}} of this process's threads; None where /proc cannot tell
    out = {{}}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{{tid}}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{{tid}}/comm") as f:
                comm = f.read().strip()
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile: its CPU shows as an exited thread's
        out[int(tid)] = (thread_group(comm), ns)
    return out

def rss_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0

phase, store, hist_file = sys.argv[1], sys.argv[2], sys.argv[3]
if phase == "steady":
    n, calls, warm, fresh, fmt = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1", sys.argv[8]
    msgs = stitched(7, n + 50, "")
    # the first N messages, cut at a step boundary (the next message is an assistant one)
    cut = n
    while cut < len(msgs) and msgs[cut]["role"] != "assistant":
        cut += 1
    history = msgs[:cut]
    steps = steady_steps(calls + warm, fmt)
    key = history_key(fmt)
    if fmt != "openai-chat":
        # the same conversation in the format's own shape, the history, then each step on its own
        body, history = native(history, fmt)
        extra = {{k: v for k, v in body.items() if k not in ("messages", "input")}}
        if fmt == "anthropic-messages":
            extra.setdefault("max_tokens", 1024)
    else:
        extra = {{}}
    p = pager.open(store, session="scale", context_window=200_000, log_reports=False)
    t = time.perf_counter()
    # build: a few hundred growing calls, each up to a step boundary
    bounds = [k for k in range(1, len(history)) if history[k].get("role") == "assistant"
              and history[k - 1].get("role") != "assistant"] + [len(history)]
    every = max(1, len(bounds) // 300)
    ends = bounds[every - 1 :: every]
    if ends[-1] != len(history):
        ends.append(len(history))
    for k in ends:
        p.assemble({{**extra, key: history[:k]}}, format=fmt)
    build_s = time.perf_counter() - t
    # the background work the build left (Tantivy's merges of the pages it indexed in a few hundred calls, a
    # backlog no session recorded over hours has) ends before the steady calls are measured: the process
    # idles until its CPU time stops growing (at most a minute)
    settle = time.perf_counter()
    while time.perf_counter() - settle < 60:
        c0 = time.process_time()
        time.sleep(0.5)
        if time.process_time() - c0 < 0.005:
            break
    settle_s = time.perf_counter() - settle
    cpu = []
    gc.collect()
    prof = None
    if os.environ.get("BENCH_SCALE_PROFILE"):
        import cProfile
        prof = cProfile.Profile()
    own = []
    groups = []  # per measured call: the other threads' CPU by group (ms), and what ended threads spent
    me = threading.get_native_id()
    span0 = None
    decoding = 0.0
    for s, step in enumerate(steps):
        history.extend(step)
        # --fresh: the history as new objects each call (decoded anew, as a harness that rebuilds it sends)
        d0 = time.process_time()
        req = {{**extra, key: orjson.loads(orjson.dumps(history)) if fresh else list(history)}}
        if s >= warm:
            decoding += time.process_time() - d0  # not the call's: taken out of the mean
        if prof is not None and s >= warm:
            prof.enable()
        if s == warm:
            span0 = time.process_time()
        l0 = time.thread_time()  # this thread's alone: the other threads' work meanwhile stays in the mean
        before = threads_ns() if s >= warm else None
        if s >= warm:
            decoding += time.thread_time() - l0  # the listing (~0.4 ms) is the bench's, not the call's
        t0, m0 = time.process_time(), time.thread_time()
        p.assemble(req, format=fmt)
        dt, dm = time.process_time() - t0, time.thread_time() - m0
        if prof is not None:
            prof.disable()
        if s >= warm:
            cpu.append(dt * 1000.0)
            own.append(dm * 1000.0)
            l0 = time.thread_time()
            after = threads_ns()
            decoding += time.thread_time() - l0
            if before is not None and after is not None:
                g = {{"indexing": 0.0, "merges": 0.0, "python": 0.0}}
                for tid, (name, ns) in after.items():
                    if tid != me:
                        g[name] += max(0, ns - before.get(tid, (name, 0))[1]) / 1e6
                # a thread that ended during the call (Tantivy's per-commit writer threads): the process's CPU
                # counts it, the listing no longer does
                g["exited"] = max(0.0, (dt - dm) * 1000.0 - sum(g.values()))
                groups.append(g)
    # every thread's CPU over the measured calls (a background index commit included wherever it ran), per call,
    # less the bench's own decoding and thread listing
    mean = (time.process_time() - span0 - decoding) * 1000.0 / len(cpu)
    if prof is not None:
        import pstats
        pstats.Stats(prof, stream=sys.stderr).sort_stats(os.environ["BENCH_SCALE_PROFILE"]).print_stats(int(os.environ.get("BENCH_SCALE_PROFILE_N", "35")))
    p.close()
    with open(hist_file, "wb") as f:
        f.write(orjson.dumps({{**extra, key: history}}))  # the whole request: its system prompt is message 0
    print(json.dumps({{"messages": len(history), "start": cut, "build_s": build_s, "settle_s": settle_s,
                      "cpu_ms": cpu, "own_ms": own, "groups": groups, "mean_ms": mean}}))
else:
    with open(hist_file, "rb") as f:
        request = orjson.loads(f.read())  # new objects: nothing is known by identity
    gc.collect()
    # what any process pays once, whatever the store: importing the facade and loading the tokenizer
    t0 = time.process_time()
    import pager.pager
    from pager.core.tokens import default_counter
    default_counter().count("warm")
    imports = time.process_time() - t0
    gc.collect()
    before = rss_mb("VmRSS")
    try:  # the high-water mark from here: orjson.loads of the history file peaked above what it keeps
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        peak_field = "VmHWM"
    except OSError:
        peak_field = None
    t0 = time.process_time()
    p = pager.open(store, session="scale")
    reopen = time.process_time() - t0
    p.assemble(request, format=sys.argv[4])
    first = time.process_time() - t0
    peak = rss_mb(peak_field) if peak_field else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the reopened session matched the whole history: a first call that records pages has forked it
    new_pages = p.last_report.new_pages
    p.close()
    print(json.dumps({{"imports_cpu_s": imports, "reopen_cpu_s": reopen, "first_cpu_s": first,
                      "peak_rss_mb": peak, "history_rss_mb": before, "reopen_new_pages": new_pages}}))
"""


def _child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), *args],
                         capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    if os.environ.get("BENCH_SCALE_PROFILE"):
        sys.stderr.write(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


FORMATS = ["openai-chat", "anthropic-messages", "openai-responses"]  # what the history can be sent as

# other threads' CPU during a call above this counts the call as overlapping their work
OVERLAP_MS = 0.1
_GROUPS = {"indexing": "Tantivy indexing", "merges": "Tantivy merges", "python": "Python threads",
           "exited": "threads that ended in the call"}


def _group_means(groups: list[dict]) -> dict[str, float] | None:
    """Return each thread group's mean CPU per measured call (ms); None where threads cannot be listed."""
    if not groups:
        return None
    return {g: round(sum(c.get(g, 0.0) for c in groups) / len(groups), 3) for g in _GROUPS}


def _pct(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (nearest rank) of ``values``."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def run(sizes: list[int], calls: int, warm: int, fresh: bool = False, fmt: str = "openai-chat") -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
        for n in sizes:
            store, hist = str(Path(d) / f"ctx-{n}"), str(Path(d) / f"history-{n}.json")
            steady = _child("steady", store, hist, str(n), str(calls), str(warm), "1" if fresh else "0", fmt)
            reopen = _child("reopen", store, hist, fmt)
            row = {
                "size": n, "messages": steady["messages"], "build_s": round(steady["build_s"], 1),
                "settle_s": round(steady.get("settle_s", 0.0), 1),
                "p50_ms": round(_pct(steady["cpu_ms"], 0.5), 2), "p99_ms": round(_pct(steady["cpu_ms"], 0.99), 2),
                "own_p50_ms": round(_pct(steady["own_ms"], 0.5), 2), "mean_ms": round(steady["mean_ms"], 2),
                # what other threads (Tantivy's commits and merges, behind) spent during the median call
                "others_p50_ms": round(_pct([max(0.0, c - o) for c, o in zip(steady["cpu_ms"], steady["own_ms"])],
                                            0.5), 2),
                # how many measured calls other threads worked during, and what they spent per call, by thread
                "calls": len(steady["cpu_ms"]),
                "calls_with_others": sum(1 for c, o in zip(steady["cpu_ms"], steady["own_ms"]) if c - o > OVERLAP_MS),
                "others_mean_ms": _group_means(steady.get("groups") or []),
                "imports_cpu_s": round(reopen["imports_cpu_s"], 3), "reopen_cpu_s": round(reopen["reopen_cpu_s"], 3),
                "first_cpu_s": round(reopen["first_cpu_s"], 3), "reopen_new_pages": reopen["reopen_new_pages"],
                "peak_rss_mb": round(reopen["peak_rss_mb"]), "history_rss_mb": round(reopen["history_rss_mb"]),
            }
            rows.append(row)
            if row["reopen_new_pages"]:
                print(f"  {n} messages: the reopened session recorded {row['reopen_new_pages']} pages again "
                      "(its history did not match the recorded one): the reopen figures are not a reopen's",
                      file=sys.stderr, flush=True)
            print(f"  {n:>6} messages: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, mean {row['mean_ms']} ms, "
                  f"calling thread p50 {row['own_p50_ms']} ms, reopen+first "
                  f"{row['first_cpu_s']} s CPU, peak {row['peak_rss_mb']} MB (built in {row['build_s']} s, "
                  f"settled in {row['settle_s']} s)",
                  file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Return the rows as a Markdown table, then the ratios against the 1k row (or the first)."""
    out = [
        "| messages | assemble p50 (ms CPU) | p99 (ms CPU) | mean, all work (ms CPU) | calling thread p50 (ms CPU) "
        "| imports (s CPU) | reopen (s CPU) "
        "| reopen + first assemble (s CPU) | peak RSS (MB) | before the reopen: history + imports (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(f"| {r['size']:,} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r.get('mean_ms', 0):.2f} "
                   f"| {r.get('own_p50_ms', 0):.2f} | {r['imports_cpu_s']:.3f} "
                   f"| {r['reopen_cpu_s']:.3f} | {r['first_cpu_s']:.3f} | {r['peak_rss_mb']} | {r['history_rss_mb']} |")
    base = next((r for r in rows if r["size"] == 1000), rows[0])
    out += ["", f"Ratios against the {base['size']:,}-message row:", "",
            "| messages | p50 | calling thread p50 | other threads in the median call (ms CPU) | p99 "
            "| reopen + first assemble | peak RSS |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        own = r.get("own_p50_ms", 0) / base["own_p50_ms"] if base.get("own_p50_ms") else 0.0
        out.append(f"| {r['size']:,} | {r['p50_ms'] / base['p50_ms']:.2f}x | {own:.2f}x "
                   f"| {r.get('others_p50_ms', 0):.2f} | {r['p99_ms'] / base['p99_ms']:.2f}x "
                   f"| {r['first_cpu_s'] / base['first_cpu_s']:.2f}x | {r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x |")
    split = [r for r in rows if r.get("others_mean_ms")]
    if split:
        out += ["", "Other threads: the measured calls they worked during (over "
                f"{OVERLAP_MS} ms of CPU), and their CPU per call (mean, ms) by thread:", "",
                "| messages | calls with other threads' work | " + " | ".join(_GROUPS.values()) + " | in all |",
                "|---:|---:|" + "---:|" * (len(_GROUPS) + 1)]
        for r in split:
            m = r["others_mean_ms"]
            out.append(f"| {r['size']:,} | {r['calls_with_others']} of {r['calls']} | "
                       + " | ".join(f"{m[g]:.2f}" for g in _GROUPS) + f" | {sum(m.values()):.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000,50000", help="comma-separated history sizes")
    ap.add_argument("--calls", type=int, default=60, help="steady-state calls measured per size (default 60)")
    ap.add_argument("--warm", type=int, default=5, help="calls run first and not measured (default 5)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--fresh", action="store_true",
                    help="send each steady-state call's history as new objects (decoded anew), not the same list")
    ap.add_argument("--format", default="openai-chat",
                    choices=FORMATS,
                    help="the wire format the history is sent in (default openai-chat)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    speed0 = machine_speed.reading()
    load0 = speed0["load"]
    t = time.perf_counter()
    rows = run(sizes, args.calls, args.warm, args.fresh, args.format)
    speed1 = machine_speed.reading()
    load1 = speed1["load"]
    print(table(rows))
    print(f"\nload average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end (1-minute; {os.cpu_count()} CPUs); "
          f"{time.perf_counter() - t:.0f} s in all; {args.calls} calls per size, two new messages each"
          + ("; each call's history decoded anew (--fresh)" if args.fresh else "")
          + (f"; sent as {args.format}" if args.format != "openai-chat" else ""))
    print(f"machine speed (bench/machine_speed.py): {speed0['loop_ns']:.1f} ns per loop iteration at the start, "
          f"{speed1['loop_ns']:.1f} at the end (lower is faster)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "load": [load0, load1], "calls": args.calls,
                                               "format": args.format, "machine": [speed0, speed1]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
