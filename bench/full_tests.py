"""Run the property tests and long campaigns at their full size (PAGER_TEST_FULL=1). Exit 1 on any failure.

    python bench/full_tests.py                 # every test file that has two sizes (tests/sizes.py)
    python bench/full_tests.py -n 0 -x         # any further arguments go to pytest

The README's test command runs these tests at the suite's size: fewer
hypothesis examples, shorter sessions, one trace message in three. This runs
the same files with ``PAGER_TEST_FULL=1``, the sizes they ran at before the
split (docs/testing.md), on the workers pytest-xdist starts (``-n auto``), and
prints how many tests ran and the time they took.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USES_SIZES = re.compile(r"^from sizes import ", re.M)


def full_size_files(tests: Path) -> list[str]:
    """Return the test files, relative to the checkout, whose sizes depend on PAGER_TEST_FULL."""
    return sorted(str(p.relative_to(ROOT)) for p in tests.glob("test_*.py") if USES_SIZES.search(p.read_text()))


def main(argv: list[str]) -> int:
    files = full_size_files(ROOT / "tests")
    env = {**os.environ, "PAGER_TEST_FULL": "1", "PYTHONPATH": str(ROOT)}  # this checkout's pager, not an install
    print(f"PAGER_TEST_FULL=1 on {len(files)} files: {' '.join(Path(f).stem for f in files)}", flush=True)
    wall = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files, *argv],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - wall
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    sys.stdout.write(proc.stdout)
    summary = re.findall(r"(\d+) (passed|failed|error|errors|skipped|deselected)", proc.stdout.splitlines()[-1]
                         if proc.stdout.strip() else "")
    counts = ", ".join(f"{n} {what}" for n, what in summary) or "no summary line"
    print(f"full-size tests: {counts} in {wall:.1f} s wall, "
          f"{children.ru_utime + children.ru_stime:.1f} s CPU (pytest and its workers)")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
