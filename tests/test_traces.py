"""pager replay over every development session: no error, no invariant violation.

Runs only where ../shared/traces exists (the development machines and CI).
"""

from __future__ import annotations

import pytest

from pager.cli import main


@pytest.mark.traces
def test_replay_every_trace_without_error_or_violation(traces_dir, capsys):
    status = main(["replay", str(traces_dir), "--min-assistant", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert "failed" not in out
    assert status == 0, out[-2000:]
    sessions = int(out.split(" session(s)")[0].split()[-1])
    assert sessions >= 50
    assert "violations 0" in out
