"""Shared pieces of the chaos harness: deterministic conversations and store checks.

Every conversation is a pure function of its session name, so a parent that
only knows "session s was acknowledged up to message n" can say exactly which
messages the store must hold, and a child killed at any point can be
replaced by another that continues from what the store holds.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the worktree's pager, not an installed one
    sys.path.insert(0, str(ROOT))

import pager  # noqa: E402

__all__ = ["ROOT", "conversation", "boundaries", "check_store"]

_WORDS = ("parse_config", "load_yaml", "retry_budget", "tantivy", "segment", "watermark", "handle",
          "src/app/config.py", "tests/test_io.py", "KeyError", "timeout", "assert", "migrate")


def _rng(session: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "big"))


@functools.lru_cache(maxsize=64)
def conversation(session: str, steps: int = 120) -> list[dict[str, Any]]:
    """Return session ``session``'s whole conversation: the same list every time, which callers must not change.

    Memoised: drawing one (~30 ms) was most of what a chaos child did before its first call, and the
    checks draw each session's again after every round.
    """
    r = _rng(session)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"[{session}] fix {r.choice(_WORDS)} in src/app/config.py"},
    ]
    for i in range(steps):
        cid = f"{session}-call-{i}"
        kind = r.random()
        if kind < 0.15:
            msgs.append({"role": "assistant", "content": f"step {i}: done with {r.choice(_WORDS)}"})
            msgs.append({"role": "user", "content": f"[{session}] now look at {r.choice(_WORDS)} ({i})"})
            continue
        cmd = f"cat src/mod_{r.randrange(9)}.py" if kind < 0.5 else f"pytest -k {r.choice(_WORDS)}_{i}"
        args = '{"command": "%s"}' % cmd
        msgs.append({"role": "assistant", "content": f"step {i}",
                     "tool_calls": [{"id": cid, "type": "function", "function": {"name": "bash", "arguments": args}}]})
        lines = r.randrange(3, 60)
        out = "".join(f"{session} {i}.{j}: {r.choice(_WORDS)} = {r.random():.6f}\n" for j in range(lines))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
    return msgs


def boundaries(history: list[dict[str, Any]]) -> list[int]:
    """Return the lengths at which a harness sends a request: after a tool result or a user message."""
    return [i + 1 for i, m in enumerate(history) if i >= 1 and m["role"] in ("tool", "user")]


def next_boundary(history: list[dict[str, Any]], have: int) -> int | None:
    """Return the first request length past ``have`` (None when the conversation is over)."""
    for b in boundaries(history):
        if b > have:
            return b
    return None


def check_store(store: str | os.PathLike[str], acked: dict[str, int], notes: dict[str, set[str]],
                steps: int) -> dict[str, int]:
    """Reopen ``store`` and compare it with what was acknowledged; return the fault counts.

    ``acked[s]`` is the longest history of session ``s`` whose ``assemble``
    returned; ``notes[s]`` the notes whose ``note`` returned. Counts: lost
    acknowledged messages and notes, duplicate pages (a page not on the head
    branch, a second branch, a note stored twice), wrong content, stored pages
    missing from the recall index, and index documents of no stored page.
    """
    faults = {"lost": 0, "duplicates": 0, "wrong_content": 0, "missing_from_index": 0, "phantoms": 0}
    sessions = set(acked) | set(notes)
    first = sorted(sessions)[0] if sessions else "check"
    with pager.open(store, session=first, log_reports=False) as p:
        st = p.store
        known = set(st.sessions())
        for s in sessions:
            if s not in known:
                faults["lost"] += acked.get(s, 0) + len(notes.get(s, ()))
                continue
            head = st.ensure_session(s)
            ids = st.branch_page_ids(head)
            # every pin and note is also one page beside the history (pager.core.aside)
            aside = len(st.notes(s)) + len(st.pins(s))
            faults["duplicates"] += st.count_pages(s) - len(ids) - aside + len(st.branches(s)) - 1
            want = conversation(s, steps)
            same = 0
            for pid in ids:
                if same < len(want) and st.message(pid)[1] == want[same]:
                    same += 1
                else:
                    break
            faults["wrong_content"] += len(ids) - same
            faults["lost"] += max(0, acked.get(s, 0) - same)
            stored = st.notes(s)
            for text in notes.get(s, ()):
                c = stored.count(text)
                faults["lost"] += c == 0
                faults["duplicates"] += max(0, c - 1)
        store_ids = {rec.id for rec, _ in st.iter_pages(0)}
        index_ids = p._feeder.index.page_ids()
        faults["missing_from_index"] = len(store_ids - index_ids)
        faults["phantoms"] = len(index_ids - store_ids)
    return faults
