"""The HTML report in a real headless browser: charts drawn, no errors, fits a phone.

Run with ``python -m pytest bench/test_report_browser.py`` (bench/ is not in
the default test run). Skipped when no Chromium is installed; on Debian or
Ubuntu: ``apt-get update && apt-get install -y chromium``. The checks are
``bench/check_report.py``'s; ``PAGER_REPORT_SHOTS=DIR`` also keeps the
screenshots there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_report  # noqa: E402

CHROMIUM = check_report.find_chromium()

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: apt-get update && apt-get install -y chromium")


def test_report_in_a_browser(tmp_path: Path) -> None:
    report = check_report.bundled_report(tmp_path)
    shots = Path(os.environ.get("PAGER_REPORT_SHOTS") or tmp_path / "shots")
    problems = check_report.check(report, CHROMIUM, shots)
    assert problems == []
    for name in ("desktop", "phone", "desktop-cards", "phone-cards"):
        assert (shots / f"{name}.png").stat().st_size > 10_000


def test_the_check_catches_a_broken_page(tmp_path: Path) -> None:
    page = check_report.bundled_report(tmp_path).read_text(encoding="utf-8")
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace(
        '<section id="summary">',
        '<img src="https://example.com/x.png"><svg width="0" height="0"><title>empty</title></svg>'
        '<div style="width:900px">too wide</div><section id="summary">', 1), encoding="utf-8")
    problems = check_report.check(broken, CHROMIUM)
    text = "\n".join(problems)
    assert "chart 'empty' is 0x0" in text
    assert "policy: img-src https://example.com/x.png" in text
    assert "phone: the page is" in text
