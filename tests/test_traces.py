"""pager replay over every development session: no error, no invariant violation.

Runs only where ../shared/traces exists (the development machines and CI).

Each session is replayed up to its first ``CALLS`` calls: a prefix of a real
session is a real session, and an open-loop replay's call *i* sees only the
history before it, so these are exactly the first ``CALLS`` calls of the
whole replay (every session's shapes, its first paging rounds, recall and
handles; most development sessions are shorter than this and run whole). The
long tails, where a call costs the most, are the campaign
``python -m pager replay ../shared/traces --min-assistant 1`` (about 70 s of
CPU), and ``pager bench ../shared/traces`` checks the same invariants on every
call of every session (docs/bench.md).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pager.cli import main
from pager.lab.replay.session import discover, load_session

CALLS = 48  # per session; 1,350 of the 2,819 calls, a third of the whole replay's CPU


def write_prefixes(traces: Path, out: Path, calls: int) -> tuple[int, int]:
    """Write each session of ``traces`` cut before its ``calls + 1``-th assistant message.

    Return (sessions written, sessions cut).
    """
    written = cut = 0
    for i, path in enumerate(discover([traces])):
        session = load_session(path)
        assistants = [j for j, m in enumerate(session.messages) if m.get("role") == "assistant"]
        messages = session.messages
        if len(assistants) > calls:
            messages, cut = messages[: assistants[calls]], cut + 1
        lines = [orjson.dumps(dict(session.header)), *(orjson.dumps(m) for m in messages)]
        (out / f"{i:03d}-{path.name}").write_bytes(b"\n".join(lines) + b"\n")
        written += 1
    return written, cut


@pytest.mark.traces
def test_replay_every_trace_without_error_or_violation(traces_dir, tmp_path, capsys):
    written, cut = write_prefixes(traces_dir, tmp_path, CALLS)
    assert written >= 50 and cut >= 10  # the long sessions are there, and were cut
    # --jobs 1: in this process, which pytest-xdist already runs beside another
    status = main(["replay", str(tmp_path), "--min-assistant", "1", "--no-progress", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "failed" not in out
    assert status == 0, out[-2000:]
    sessions = int(out.split(" session(s)")[0].split()[-1])
    assert sessions == written
    assert "violations 0" in out
    # pager paged (its prompts are smaller than full resend's), so its rounds ran too
    mean = float(out.split("mean prompt ")[1].split()[0])
    assert mean < 0.95, out[-600:]
