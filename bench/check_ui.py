"""Load every page of ``pager ui`` in a real headless browser and check it.

    python bench/check_ui.py                           # a demo store, made by running pager on a bundled-style session
    python bench/check_ui.py --store DIR_OR_URL        # an existing store (read-only)
    python bench/check_ui.py --screenshots docs/img    # also save the screenshots docs/ui.md shows

The viewer is served by a real uvicorn on 127.0.0.1 (``ServerThread``), over
a real store: by default one made here by running ``assemble`` and
``observe`` over a synthetic coding-agent session (``pager.lab.synth``), usage
figured as a provider with a prompt cache would report it, plus a second
session that reads a project pool and a page whose text is hostile HTML.

Checks, for each page (sessions, a session, a call, a page, search), at a
desktop width (1280 px) and a phone width (400 px): no script error, no
policy violation, no failed load; the elements that page must have are
present and drawn (the strip's bars, the page map's blocks, both columns of a
call); at 400 px nothing makes the page wider than the screen; the hostile
page's ``<script>`` never ran; and the live script polled its endpoint.

Measuring works as in ``bench/check_report.py``: Chromium prints the DOM after
load (``--dump-dom``), and a probe, added to each HTML response by a wrapper
around the app (as a same-origin script, so the page's policy is kept as
is), writes what it measured into the page. Headless Chromium makes no window
narrower than 500 px, so a page is shown in a frame of the width wanted.
Exit status: 0 checks passed, 1 a check failed, 2 no Chromium.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from check_report import FLAGS, find_chromium  # noqa: E402

WIDTHS = {"desktop": 1280, "phone": 400}
HEIGHT = 1500
# the screenshots docs/ui.md shows: (page, width)
SHOTS = {("sessions", "desktop"), ("session", "desktop"), ("call", "desktop"), ("search", "desktop"),
         ("session", "phone"), ("call", "phone")}
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">hostile page text'

PROBE_JS = """
(function(){
  var errors = [], polls = 0, start = Date.now();
  window.addEventListener('error', function(e){
    var t = e.target && e.target !== window ? (e.target.tagName + ' ' + (e.target.src || e.target.href || '')) : '';
    errors.push('error: ' + (e.message || t));
  }, true);
  document.addEventListener('securitypolicyviolation', function(e){
    errors.push('policy: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  var f = window.fetch;
  window.fetch = function(){ polls += 1; return f.apply(window, arguments).then(function(r){
    if (!r.ok && r.status !== 304) errors.push('fetch: HTTP ' + r.status + ' ' + r.url); return r; }); };
  var log = console.error;
  console.error = function(){ errors.push('console: ' + Array.prototype.join.call(arguments, ' ')); log.apply(console, arguments); };
  function count(sel){ return document.querySelectorAll(sel).length; }
  function drawn(sel){ var n = 0; document.querySelectorAll(sel).forEach(function(e){
    var r = e.getBoundingClientRect(); if (r.width > 0 && r.height > 0) n += 1; }); return n; }
  var panel = {opened: false, text: ''};
  window.addEventListener('load', function(){
    // select the second block of the page map (the first request), as a person would: its text must
    // open in the side panel, as text
    var blks = document.querySelectorAll('.pagemap a.blk');
    if (blks.length) setTimeout(function(){ blks[Math.min(1, blks.length - 1)].click(); }, 300);
    setTimeout(function(){
      var p = document.getElementById('panel');
      if (p) { panel.opened = !p.hidden; var t = p.querySelector('pre'); panel.text = t ? t.textContent : ''; }
    }, 2500);
    setTimeout(function(){
      var out = {errors: errors, polls: polls, pwned: window.__pwned || 0, page: document.body.getAttribute('data-page'),
                 innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
                 rows: count('#rows tr[data-href]'), bars: drawn('a.bar rect'), blocks: drawn('.pagemap a.blk'),
                 pageRows: count('#pages tr[data-href]'), request: drawn('.cols section:first-child li.msg'),
                 prompt: drawn('.cols section:last-child li.msg'), text: (document.getElementById('text') || {}).textContent || '',
                 hits: count('ol.hits li[data-href]'), live: !document.getElementById('live').hidden,
                 focusable: count('[tabindex="0"], a[href]'), panel: panel};
      var host = window.parent !== window ? window.parent.document : document;
      var pre = host.createElement('pre'); pre.id = '__check__'; pre.textContent = JSON.stringify(out);
      host.body.appendChild(pre);
    }, 4500);
  });
})();
"""


def _replay(where: str, session: str, seed: int, steps: int, usage: str, **options: Any) -> None:
    """Run pager over a synthetic session, observing the usage a provider with a prompt cache reports."""
    import pager
    from pager.lab.synth import generate_session

    _head, msgs = generate_session(seed, steps)
    p = pager.open(where, session, 64_000, high_watermark=14_000, low_watermark=5_000, **options)
    prev = 0
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or i < 2:
            continue
        p.assemble({"model": "m", "messages": msgs[:i]})
        r = p.last_report
        assert r is not None
        # the previous prompt is read back from the cache while the prefix is kept
        cached = min(prev if r.prefix_kept else r.layers["l1"], r.tokens)
        out = 40 + len(str(m.get("content") or "")) // 4
        if usage == "anthropic":
            tail = min(60, r.tokens - cached)
            p.observe({"input_tokens": tail, "cache_read_input_tokens": cached,
                       "cache_creation_input_tokens": r.tokens - cached - tail, "output_tokens": out},
                      format="anthropic-messages")
        else:
            p.observe({"prompt_tokens": r.tokens, "completion_tokens": out,
                       "prompt_tokens_details": {"cached_tokens": cached // 128 * 128}})
        prev = r.tokens
    if session == "fix-parser-bug":
        p.pin("The parser must keep accepting the old config format")
    p.close()


def demo_store(where: str) -> dict[str, Any]:
    """Make a real store at ``where`` by running pager over synthetic sessions; return what to visit."""
    import pager

    _replay(where, "fix-parser-bug", 7, 60, "anthropic", owner="alice")
    _replay(where, "migrate-cache-layer", 12, 36, "openai", owner="alice", scope="project", pool="web-repo")
    _replay(where, "explore-tests", 21, 14, "anthropic", owner="carol")
    q = pager.open(where, "review-notes", 64_000, owner="bob")
    q.assemble({"model": "gpt", "messages": [
        {"role": "system", "content": "You review pull requests."},
        {"role": "user", "content": "Review the parser fix. " + HOSTILE},
        {"role": "assistant", "content": "Looking at parse_config now."},
        {"role": "user", "content": "Any risk in the tokenizer change?"}]})
    q.observe({"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 0}})
    q.close()
    from pager.session import open_store

    store = open_store(where, must_exist=True)
    try:
        hostile = next(r.id for r in store.load_pages(store.branch_page_ids(store.ensure_session("review-notes")))
                       if "hostile" in str(store.message(r.id)[1].get("content")))
    finally:
        store.close()
    # the call to show: the last one that ran a demotion round, where the request and the prompt differ most
    from pager.report import ReportLog

    rounds = [r["call"] for r in ReportLog(where).read()
              if r.get("type") == "assemble" and r["session"] == "fix-parser-bug" and r.get("round")]
    return {"session": "fix-parser-bug", "call": rounds[-1] if rounds else 12, "hostile": ("review-notes", hostile),
            "query": "parse_config"}


def urls(visit: dict[str, Any]) -> dict[str, str]:
    s = quote(visit["session"], safe="")
    hs, hid = visit["hostile"]
    return {"sessions": "/pager/", "session": f"/pager/session?s={s}", "call": f"/pager/call?s={s}&n={visit['call']}",
            "page": f"/pager/page?s={quote(hs, safe='')}&id={hid}", "search": f"/pager/search?q={visit['query']}",
            "hostile-session": f"/pager/session?s={quote(hs, safe='')}"}


def probing(app: Any, probe: bool = True) -> Any:
    """Wrap an ASGI app: serve /__frame (a page at a given width) and, with ``probe``, the probe at
    /__probe.js, named first in every HTML page's <head>."""
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (not probe and scope["path"] != "/__frame"):
            return await app(scope, receive, send)
        if scope["path"] == "/__probe.js":
            body = PROBE_JS.encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/javascript"), (b"content-length", str(len(body)).encode())]})
            return await send({"type": "http.response.body", "body": body})
        if scope["path"] == "/__frame":
            from urllib.parse import parse_qs

            qs = parse_qs(scope["query_string"].decode())
            src, width = qs["src"][0], int(qs["w"][0])
            body = ('<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0;background:#9ca3af}'
                    'iframe{border:0;display:block;background:#fff}</style></head><body>'
                    f'<iframe width="{width}" height="{HEIGHT}" src="{html.escape(src, quote=True)}"></iframe>'
                    "</body></html>").encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/html"), (b"content-length", str(len(body)).encode())]})
            return await send({"type": "http.response.body", "body": body})
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            if any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers):
                body = body.replace(b"<head>", b'<head><script src="/__probe.js"></script>', 1)
            await send({**start, "headers": headers + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await app(scope, receive, capture)
    return wrapped


def _chromium(chromium: str, profile: str, width: int, *args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    cmd = [chromium, *FLAGS, "--disable-quic", f"--user-data-dir={profile}",
           f"--window-size={max(width, 500)},{HEIGHT}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


EXPECT = {  # what each page must show: (probe field, at least)
    "sessions": [("rows", 4)], "session": [("bars", 10), ("blocks", 10), ("pageRows", 10)],
    "call": [("request", 3), ("prompt", 3)], "page": [], "search": [("hits", 1)], "hostile-session": [("blocks", 1)],
}


def check(base: str, visit: dict[str, Any], chromium: str, tmp: str, shots: Path | None,
          plain: str | None = None) -> list[str]:
    """Load every page at every width through ``base`` (the probing server); screenshots through ``plain``."""
    problems = []
    for name, path in urls(visit).items():
        for label, width in WIDTHS.items():
            frame = f"{base}/__frame?w={width}&src={quote(path, safe='')}"
            proc = _chromium(chromium, os.path.join(tmp, f"p-{name}-{label}"), width,
                             "--virtual-time-budget=8000", "--dump-dom", frame)
            m = re.search(r'<pre id="__check__">(.*?)</pre>', proc.stdout, re.S)
            if not m:
                problems.append(f"{name} {label}: no measurement (exit {proc.returncode}) {proc.stderr[-300:]}")
                continue
            d = json.loads(html.unescape(m.group(1)))
            problems += [f"{name} {label}: {e}" for e in d["errors"]]
            if d["pwned"]:
                problems.append(f"{name} {label}: a page text's script ran ({d['pwned']})")
            if d["scrollWidth"] > d["innerWidth"] + 1:
                problems.append(f"{name} {label}: {d['scrollWidth']} px wide in {d['innerWidth']} px")
            for field, least in EXPECT[name]:
                if d[field] < least:
                    problems.append(f"{name} {label}: {field} = {d[field]}, expected at least {least}")
            if name == "page" and "<script>" not in d["text"]:
                problems.append(f"{name} {label}: the hostile text is not shown as text")
            if name in ("session", "hostile-session") and not (d["panel"]["opened"] and d["panel"]["text"]):
                problems.append(f"{name} {label}: selecting a page did not show its text in the panel")
            if name == "hostile-session" and "<script>" not in d["panel"]["text"]:
                problems.append(f"{name} {label}: the hostile text is not shown as text in the panel")
            if name in ("sessions", "session") and not (d["polls"] and d["live"]):
                problems.append(f"{name} {label}: the page did not poll its endpoint")
            print(f"{name:<16} {label:<7} ({width} px): bars {d['bars']}, blocks {d['blocks']}, rows {d['rows']}, "
                  f"request {d['request']}, prompt {d['prompt']}, hits {d['hits']}, polls {d['polls']}, "
                  f"panel {'open' if d['panel']['opened'] else '-'}, "
                  f"page {d['scrollWidth']} px in {d['innerWidth']}, {len(d['errors'])} errors")
            if shots is not None and (name, label) in SHOTS:
                out = shots / f"ui-{name}-{label}.png"
                _chromium(chromium, os.path.join(tmp, f"s-{name}-{label}"), width, "--virtual-time-budget=4000",
                          f"--screenshot={out}", f"--window-size={width if width >= 500 else 500},{1000}",
                          f"{plain}/__frame?w={width}&src={quote(path, safe='')}" if width < 500 else plain + path)
                print(f"wrote {out}" if out.exists() else f"no screenshot {out}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="an existing store (default: a demo store made here)")
    parser.add_argument("--visit", help="with --store: SESSION,CALL,PAGE_SESSION,PAGE_ID,QUERY to visit")
    parser.add_argument("--screenshots", metavar="DIR", help="save the screenshots docs/ui.md shows here "
                        "(ui-<page>-<desktop|phone>.png)")
    parser.add_argument("--chromium", metavar="PATH", help="the browser binary (default: found on PATH)")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("check_ui: no Chromium found; install it with: apt-get update && apt-get install -y chromium",
              file=sys.stderr)
        return 2
    from pager.proxy import ServerThread
    from pager.ui import open_view, standalone

    with tempfile.TemporaryDirectory(prefix="pager-ui-check-") as tmp:
        where = args.store or os.path.join(tmp, "store")
        if args.store:
            s, c, hs, hid, q = (args.visit or "").split(",")
            visit = {"session": s, "call": int(c), "hostile": (hs, int(hid)), "query": q}
        else:
            visit = demo_store(where)
        shots = Path(args.screenshots) if args.screenshots else None
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
        view = open_view(where)
        try:
            app = standalone(view, store_name="demo store" if not args.store else where)
            # the screenshots come from the app as served, without the probe (which selects a page)
            with ServerThread(probing(app)) as base, ServerThread(probing(app, probe=False)) as plain:
                problems = check(base, visit, chromium, tmp, shots, plain)
        finally:
            view.close()
    for p in problems:
        print(f"FAIL {p}")
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
