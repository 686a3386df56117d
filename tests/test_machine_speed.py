"""``bench/machine_speed.py``: the machine's speed beside a timing (issue 23).

A reading is a positive number of nanoseconds and a load average; the
command prints one reading, or a series and its spread.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import machine_speed  # noqa: E402


def test_a_reading_is_nanoseconds_per_iteration_and_the_load() -> None:
    r = machine_speed.reading(iterations=20_000, repeats=2)
    assert r["loop_ns"] > 0
    assert len(r["load"]) == 3 and all(x >= 0 for x in r["load"])
    line = machine_speed.describe(r)
    assert line.startswith(f"{r['loop_ns']:.1f} ns per loop iteration") and "load average" in line


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (-5, 3)])
def test_nonsense_counts_are_refused(args: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        machine_speed.loop_ns(*args)


def test_the_command_prints_one_reading_or_a_series(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(machine_speed, "reading", lambda: {"loop_ns": 100.0, "load": [0.5, 0.4, 0.3]})
    assert machine_speed.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "100.0 ns per loop iteration" in lines[0]
    readings = iter([100.0, 150.0, 120.0])
    monkeypatch.setattr(machine_speed, "reading", lambda: {"loop_ns": next(readings), "load": [0.0] * 3})
    monkeypatch.setattr(machine_speed.time, "sleep", lambda s: None)
    clock = iter([0.0, 0.0, 1.0, 2.0, 3.0])
    monkeypatch.setattr(machine_speed.time, "monotonic", lambda: next(clock))
    assert machine_speed.main(["--seconds", "2.5", "--every", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4
    assert out[-1] == "3 readings: lowest 100.0, median 120.0, highest 150.0 ns (1.50x)"


def test_bad_intervals_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        machine_speed.main(["--every", "0"])
    assert "--every" in capsys.readouterr().err
