"""Open a ``pager bench --html`` report in a real headless browser and check it.

    python bench/check_report.py                      # a report of the bundled sessions
    python bench/check_report.py report.html --screenshots shots/

Checks, at a desktop width (1280 px) and a phone width (400 px): every chart
(``<svg>``) is drawn with a non-zero size, the page logs no error (no blocked
or failed load, no script error), and at 400 px nothing makes the page wider
than the screen (wide tables scroll inside their own box). With
``--screenshots DIR`` it also saves ``desktop.png`` and ``phone.png`` (the top
of the report) and ``desktop-cards.png`` and ``phone-cards.png`` (the session
cards, everything above them hidden).

The browser is Chromium from the system's packages. On Debian or Ubuntu::

    apt-get update && apt-get install -y chromium

The report has no script and its Content-Security-Policy forbids one, so the
measuring is done on a copy: the same page with a small script added first in
``<head>`` (and ``script-src 'unsafe-inline'`` added to its policy, nothing
else). The script records every error event and policy violation, then, once
the page has loaded, writes what it measured into the page, which Chromium
prints with ``--dump-dom``. Headless Chromium will not make a window narrower
than 500 px, so the page is shown in a frame of the width wanted (400 px, and
1280 px alike) inside a wider window; the phone screenshot therefore has a
grey margin on its right. Exit status: 0 checks passed, 1 a check failed, 2
no Chromium (or it would not start).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {"desktop": 1280, "phone": 400}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--disable-dev-shm-usage"]

PROBE = """<script>
(function(){
  var errors = [];
  window.addEventListener('error', function(e){
    var t = e.target && e.target !== window ? (e.target.tagName + ' ' + (e.target.src || e.target.href || '')) : '';
    errors.push('error: ' + (e.message || t));
  }, true);
  document.addEventListener('securitypolicyviolation', function(e){
    errors.push('policy: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  var log = console.error;
  console.error = function(){ errors.push('console: ' + Array.prototype.join.call(arguments, ' ')); log.apply(console, arguments); };
  window.addEventListener('load', function(){
    setTimeout(function(){
      var charts = [];
      document.querySelectorAll('svg').forEach(function(s){
        var r = s.getBoundingClientRect();
        var t = s.querySelector('title');
        charts.push({title: t ? t.textContent : '', width: r.width, height: r.height});
      });
      var out = {charts: charts, errors: errors, innerWidth: window.innerWidth,
                 scrollWidth: document.documentElement.scrollWidth,
                 cards: document.querySelectorAll('.card').length};
      var host = window.parent !== window ? window.parent.document : document;
      var pre = host.createElement('pre');
      pre.id = '__check__';
      pre.textContent = JSON.stringify(out);
      host.body.appendChild(pre);
    }, 50);
  });
})();
</script>"""


def find_chromium(explicit: str | None = None) -> str | None:
    """Return the path of a Chromium (or Chrome) binary, or None."""
    if explicit:
        return explicit if shutil.which(explicit) or Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def probe_copy(report: str) -> str:
    """Return the report's HTML with the measuring script first in ``<head>``."""
    page = re.sub(r"(<meta http-equiv=\"Content-Security-Policy\" content=\"[^\"]*)\"",
                  lambda m: m.group(1) + "; script-src 'unsafe-inline'\"", report, count=1)
    return page.replace("<head>", "<head>" + PROBE, 1)


HEIGHT = 2400
CARDS_ONLY = ("<style>header,nav,section:not(#sessions),#sessions>.scroll,#sessions>p"
              "{display:none}</style>")


def framed(page: str, width: int) -> str:
    """Return a page showing ``page`` in a frame ``width`` pixels wide (same origin: srcdoc)."""
    import html

    return ('<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0;'
            'background:#9ca3af}iframe{border:0;display:block;background:#fff}</style></head>'
            f'<body><iframe width="{width}" height="{HEIGHT}" srcdoc="{html.escape(page, quote=True)}">'
            "</iframe></body></html>")


def _run(chromium: str, profile: str, width: int, *args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    window = max(width, 500)  # headless Chromium's narrowest window
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={window},{HEIGHT}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def measure(chromium: str, page: Path, width: int, profile: str) -> dict[str, Any]:
    """Load ``page`` (a probe copy) at ``width`` and return what the probe measured."""
    proc = _run(chromium, profile, width, "--virtual-time-budget=15000", "--dump-dom",
                page.as_uri())
    m = re.search(r'<pre id="__check__">(.*?)</pre>', proc.stdout, re.S)
    if not m:
        raise RuntimeError(f"Chromium printed no measurement (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-500:]}")
    import html

    data = json.loads(html.unescape(m.group(1)))
    # the browser's own log: console messages of the page, when it prints them
    data["log"] = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    return data


def check(report: Path, chromium: str, screenshots: Path | None = None) -> list[str]:
    """Return the problems found in ``report`` (empty: every check passed)."""
    problems: list[str] = []
    text = report.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="pager-report-check-") as tmp:
        for label, width in WIDTHS.items():
            page = Path(tmp) / f"probe-{label}.html"
            page.write_text(framed(probe_copy(text), width), encoding="utf-8")
            data = measure(chromium, page, width, os.path.join(tmp, f"profile-{label}"))
            charts = data["charts"]
            if not charts:
                problems.append(f"{label}: no chart in the page")
            for c in charts:
                if not (c["width"] > 0 and c["height"] > 0):
                    problems.append(f"{label}: chart {c['title']!r} is {c['width']}x{c['height']}")
            problems += [f"{label}: {e}" for e in data["errors"]]
            problems += [f"{label}: {line}" for line in data["log"]]
            if data["scrollWidth"] > data["innerWidth"] + 1:
                problems.append(f"{label}: the page is {data['scrollWidth']} px wide in a "
                                f"{data['innerWidth']} px window")
            print(f"{label} ({width} px): {len(charts)} charts, smallest "
                  f"{min((c['width'] for c in charts), default=0):.0f} x "
                  f"{min((c['height'] for c in charts), default=0):.0f} px, "
                  f"{data['cards']} cards, page {data['scrollWidth']} px wide in "
                  f"{data['innerWidth']} px, "
                  f"{len(data['errors']) + len(data['log'])} errors")
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            # the top of the page, then the session cards alone (the rest hidden by a style)
            cards_only = text.replace("</head>", CARDS_ONLY + "</head>", 1)
            for label, width in WIDTHS.items():
                for name, page_text in ((label, text), (f"{label}-cards", cards_only)):
                    out = screenshots / f"{name}.png"
                    page = Path(tmp) / f"shot-{name}.html"
                    page.write_text(framed(page_text, width), encoding="utf-8")
                    _run(chromium, os.path.join(tmp, f"shot-{name}"), width,
                         f"--screenshot={out}", page.as_uri())
                    if not out.exists():
                        problems.append(f"{name}: no screenshot written")
                    else:
                        print(f"wrote {out}")
    return problems


def bundled_report(directory: Path) -> Path:
    """Write a report of the bundled sessions (every strategy, pager included) into ``directory``."""
    sys.path.insert(0, str(ROOT))
    from pager.cli import main

    out = directory / "report.html"
    rc = main(["bench", "--no-progress", "--min-assistant", "1", "--jobs", "1",
               "--html", str(out), str(ROOT / "pager" / "data")])
    if rc != 0 or not out.exists():
        raise RuntimeError(f"pager bench exited {rc}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="?", help="the HTML report (default: one of the bundled sessions)")
    parser.add_argument("--screenshots", metavar="DIR", help="save desktop.png and phone.png here")
    parser.add_argument("--chromium", metavar="PATH", help="the browser binary (default: found on PATH)")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("check_report: no Chromium found; install it with: "
              "apt-get update && apt-get install -y chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pager-report-") as tmp:
        report = Path(args.report) if args.report else bundled_report(Path(tmp))
        try:
            problems = check(report, chromium, Path(args.screenshots) if args.screenshots else None)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"check_report: {exc}", file=sys.stderr)
            return 2
    for p in problems:
        print(f"FAIL {p}")
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
