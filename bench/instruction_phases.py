"""Where a steady call's instructions go, function by function: ``bench_instructions.py --phases``.

The counting process (``bench_instructions.COUNT``) wraps each function of
``PHASES`` so that, during a counted call, it calls the marker (``os.getppid``,
at which callgrind writes out what the calling thread did since the last
marker) on entry and on return, and logs ``+label`` / ``-label``; a counted
call starts with ``call`` and the last ends with ``end``. Dump *k* (1-based)
is what the thread did between marks *k-1* and *k*, so the labels open at
mark *k-1* name it: a nested phase's path (``record/prepare/terms``), or
``other`` outside every phase (``assemble``'s own lines, the transaction's
commit, the loop's list building). ``attribute`` turns the log and the dumps
into each call's instructions by path; ``table`` gives the median of each over
the calls that were not demotion rounds, at each size.

Each mark costs a Python call, a list append and a system call (a few
thousand instructions), counted in the enclosing phase: the totals are a little
above the plain run's. A function named here that pager no longer has makes
the counting process fail at its start, not the phase vanish.
"""

from __future__ import annotations

import statistics

__all__ = ["PHASES", "WRAP", "attribute", "medians", "table"]

# (module, attribute in it, label): wrapped in the module where the call is made, so a function imported by
# name into another module is wrapped there (``pager.recording.hash_messages``)
PHASES: tuple[tuple[str, str, str], ...] = (
    ("pager.intake", "Intake.convert", "convert"),
    ("pager.pager", "validate", "validate"),
    ("pager.recording", "Recorder.same_prefix", "match"),
    ("pager.recording", "Recorder.record", "record"),
    ("pager.recording", "hash_messages", "hash"),
    ("pager.recording", "classify", "classify"),
    ("pager.core.history", "History.prepare", "prepare"),
    ("pager.core.history", "message_tokens", "tokens"),
    ("pager.core.history", "_page_terms", "terms"),
    ("pager.storage.sqlite", "SQLiteStore.record", "store"),
    ("pager.storage.sqlite_terms", "TermVocab.encode_many", "term numbers"),
    ("pager.core.history", "History.append", "mirror"),
    ("pager.storage.indexing", "IndexFeeder.add", "index feed"),
    ("pager.pager", "Pager._schedule", "schedule"),
    ("pager.sharing", "Pools.search_recall", "recall search"),
    ("pager.schedulers.paging", "PagingScheduler.plan", "plan"),
    ("pager.core.history", "History.columns", "columns"),
    ("pager.schedulers.paging", "plan", "planner"),
    ("pager.schedulers.paging", "PagingScheduler._render", "prompt"),
    ("pager.pager", "Pager._persist", "persist"),
    ("pager.formats.openai_chat", "OpenAIChat.render", "wire render"),  # the request out, in the caller's format
    ("pager.formats.anthropic_messages", "AnthropicMessages.render", "wire render"),
    ("pager.formats.openai_responses", "OpenAIResponses.render", "wire render"),
    ("pager.pager", "Pager._report", "report"),
)

# Run in the counting process after its prelude (inserted by str.format, so taken as it is); ``mark`` is its
# one marker.
WRAP = r"""
import importlib
LOG = []
ON = [False]  # True during a counted call when phases are asked for
def mark(label):
    LOG.append(label)
    os.getppid()  # MARK: callgrind writes out what it counted since the last one
def _wrap(modname, attr, label):
    obj = importlib.import_module(modname)
    *path, name = attr.split(".")
    for part in path:
        obj = getattr(obj, part)
    f = getattr(obj, name)  # a function pager no longer has: the process fails here
    def wrapped(*a, **k):
        if not ON[0]:
            return f(*a, **k)
        mark("+" + label)
        try:
            return f(*a, **k)
        finally:
            mark("-" + label)
    setattr(obj, name, wrapped)
def install(phases):
    for modname, attr, label in phases:
        _wrap(modname, attr, label)
"""


def attribute(log: list[str], counts: list[int]) -> list[dict[str, int]]:
    """Return each counted call's instructions by phase path, from the marks' log and the dumps in order.

    ``counts[0]`` is what came before the first mark (start-up, reopen, warm-up: not a call's);
    ``counts[k]`` what came between marks ``k`` and ``k + 1`` (``log[k - 1]`` and ``log[k]``).
    """
    if len(counts) != len(log):
        raise SystemExit(f"{len(counts)} dumps for {len(log)} marks")
    calls: list[dict[str, int]] = []
    stack: list[str] = []
    cur: dict[str, int] | None = None
    for k in range(1, len(log)):
        opened = log[k - 1]
        if opened == "call":
            if stack:
                raise SystemExit(f"a call began inside {'/'.join(stack)}")
            cur = {}
            calls.append(cur)
        elif opened.startswith("+"):
            stack.append(opened[1:])
        elif opened.startswith("-"):
            if not stack or stack[-1] != opened[1:]:
                raise SystemExit(f"mark {k}: {opened} closes {'/'.join(stack) or 'nothing'}")
            stack.pop()
        else:
            raise SystemExit(f"mark {k}: {opened!r} before the last")
        if cur is None:
            raise SystemExit("a phase's mark before the first call's")
        label = "/".join(stack) or "other"
        cur[label] = cur.get(label, 0) + counts[k]
    if log and log[-1] != "end":
        raise SystemExit(f"the last mark is {log[-1]!r}, not the end of the last call")
    return calls


def medians(calls: list[dict[str, int]], rounds: list[bool]) -> dict[str, float]:
    """Return each path's median over the calls that were not demotion rounds (0 where a call lacks it), and "total"."""
    steady = [c for c, r in zip(calls, rounds, strict=True) if not r]
    if not steady:
        return {}
    paths = sorted({p for c in steady for p in c})
    out = {p: float(statistics.median(c.get(p, 0) for c in steady)) for p in paths}
    out["total"] = float(statistics.median(sum(c.values()) for c in steady))
    return out


def table(rows: list[dict]) -> str:
    """Return the phases' medians (millions of instructions) as a Markdown table, a column per size."""
    paths = sorted({p for r in rows for p in r["phases_m"]} - {"total"}) + ["total"]
    out = ["| phase (calls that were not rounds, median) | " + " | ".join(f"{r['size']:,} messages" for r in rows)
           + " |", "|---|" + "---:|" * len(rows)]
    for p in paths:
        out.append(f"| {p} | " + " | ".join(f"{r['phases_m'].get(p, 0.0):.3f}" for r in rows) + " |")
    return "\n".join(out)
