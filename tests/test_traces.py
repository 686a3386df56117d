"""pager replay over the development sessions: no error, no invariant violation.

Runs only where ../shared/traces exists (the development machines and CI).

A fixed, representative subset, each session up to its first ``CALLS`` calls. A
prefix of a real session is a real session, and an open-loop replay's call *i*
sees only the history before it, so these are exactly the first ``CALLS`` calls of
the whole replay (every session's shapes, its first paging rounds, recall and
handles; most development sessions are shorter than this and run whole).

Which sessions (``representative``): every session of every source but one, and of
mini-swe-agent one per model configuration (the file name up to its first ``__``:
``deepseek_chat_dev``, ``deepseek_chat_dev_rerun``, ``deepseek_lite_dev_noparallel``,
``deepseek_reasoner_dev``; the first of each by name). Why: mini-swe-agent's 15
sessions are the same agent (one bash call a turn, plain-text observations) run
by four configurations on seven repositories; none of them pages within its first
48 calls, and they were over half of this test's CPU (~0.5 s each) for the shapes
four of them already bring. Every other source's sessions differ in shape
(Claude Code's compaction resets, subagents and the sessions that page here;
OpenHands; SWE-agent's function-calling, XML and cursor-window formats) and are
all kept.

The whole of every session, long tails included, is the campaign
``python -m pager replay ../shared/traces --min-assistant 1`` (exits 1 on any
failure or violation; about 70 s of CPU), and ``pager bench ../shared/traces``
checks the same invariants on every call of every session (docs/bench.md).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pager.cli import main
from pager.lab.replay.session import Session, discover, load_session

CALLS = 48  # per session; 801 of the 2,819 calls
ONE_PER_CONFIGURATION = {"mini-swe-agent"}  # sources whose sessions are one agent's runs, by configuration


def representative(sessions: list[tuple[Path, Session]]) -> list[tuple[Path, Session]]:
    """Return the sessions this test replays, in order (see the module docstring)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for path, session in sessions:
        if session.source in ONE_PER_CONFIGURATION:
            config = (session.source, path.name.split("__", 1)[0])
            if config in seen:
                continue
            seen.add(config)
        out.append((path, session))
    return out


def write_prefixes(sessions: list[tuple[Path, Session]], out: Path, calls: int) -> int:
    """Write each session cut before its ``calls + 1``-th assistant message; return how many were cut."""
    cut = 0
    for i, (path, session) in enumerate(sessions):
        assistants = [j for j, m in enumerate(session.messages) if m.get("role") == "assistant"]
        messages = session.messages
        if len(assistants) > calls:
            messages, cut = messages[: assistants[calls]], cut + 1
        lines = [orjson.dumps(dict(session.header)), *(orjson.dumps(m) for m in messages)]
        (out / f"{i:03d}-{path.name}").write_bytes(b"\n".join(lines) + b"\n")
    return cut


def test_the_subset_keeps_every_source_and_one_of_each_configuration(tmp_path):
    def session(source: str) -> Session:
        return Session(id="s", header={"type": "session", "id": "s", "source": source}, messages=(), path="")

    names = ["a__x.jsonl", "a__y.jsonl", "b__x.jsonl", "a__z.jsonl"]
    corpus = [(tmp_path / n, session("mini-swe-agent")) for n in names]
    corpus += [(tmp_path / n, session("swe-agent")) for n in names]
    kept = [(p.name, s.source) for p, s in representative(corpus)]
    assert kept == [("a__x.jsonl", "mini-swe-agent"), ("b__x.jsonl", "mini-swe-agent"),
                    *((n, "swe-agent") for n in names)]


@pytest.mark.traces
def test_replay_representative_traces_without_error_or_violation(traces_dir, tmp_path, capsys):
    corpus = [(path, load_session(path)) for path in discover([traces_dir])]
    chosen = representative(corpus)
    sources = {s.source for _, s in corpus}
    assert len(corpus) >= 50 and {s.source for _, s in chosen} == sources  # every source is there
    assert sum(s.source in ONE_PER_CONFIGURATION for _, s in chosen) >= 4  # the configurations
    cut = write_prefixes(chosen, tmp_path, CALLS)
    assert cut >= 5  # the long sessions are there, and were cut
    # --jobs 1: in this process, which pytest-xdist already runs beside another
    status = main(["replay", str(tmp_path), "--min-assistant", "1", "--no-progress", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "failed" not in out
    assert status == 0, out[-2000:]
    sessions = int(out.split(" session(s)")[0].split()[-1])
    assert sessions == len(chosen)
    assert "violations 0" in out
    # pager paged (its prompts are smaller than full resend's), so its rounds ran too
    mean = float(out.split("mean prompt ")[1].split()[0])
    assert mean < 0.95, out[-600:]
