"""``bench/bench_scale.py`` end to end at a small size, in each wire format it can send.

The figures are the bench's to report; this checks that each format's run
records its history, steadies, reopens and prints a row (a reopen that does
not match the recorded history would re-record it all: its new pages show
in the reopened store's size, not here, so the row's own fields are checked).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_scale  # noqa: E402


@pytest.mark.parametrize("fmt", ["anthropic-messages", "openai-responses"])  # chat: the default run
def test_a_small_run_prints_a_row_per_size(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scale.json"
    assert bench_scale.main(["--sizes", "100", "--calls", "3", "--warm", "1", "--format", fmt,
                             "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert len(rows) == 1 and report["format"] == fmt
    # the machine's speed at the start and the end, beside the load average (bench/machine_speed.py)
    assert [set(r) for r in report["machine"]] == [{"loop_ns", "load"}] * 2
    assert all(r["loop_ns"] > 0 for r in report["machine"])
    printed = capsys.readouterr().out
    assert "| 100 |" in printed
    assert f"{report['machine'][0]['loop_ns']:.1f} ns per loop iteration at the start" in printed
    row = rows[0]
    assert row["size"] == 100 and row["messages"] > 50  # in the format's own messages (Anthropic merges results)
    assert row["p50_ms"] > 0 and row["p99_ms"] >= row["p50_ms"]
    assert row["first_cpu_s"] >= row["reopen_cpu_s"] > 0
    assert row["peak_rss_mb"] > 0
    assert row["reopen_new_pages"] == 0  # the reopen matched the recorded history (its system prompt included)
    assert "| 100 |" in bench_scale.table(rows)
    # the other threads' work, by thread: what a commit's Tantivy threads and pager's own spent
    assert 0 <= row["calls_with_others"] <= row["calls"] == 3
    if sys.platform == "linux":  # /proc lists the threads
        means = row["others_mean_ms"]
        assert set(means) == set(bench_scale._GROUPS) and min(means.values()) >= 0
        assert "| 100 | " + f"{row['calls_with_others']} of 3 |" in bench_scale.table(rows)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench_scale.main(["--format", "gemini", "--sizes", "100"])
