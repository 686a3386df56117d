"""Compare a proxied run with its direct run, inspect the proxy's store, and measure.

Checks (each a name, a pass flag and the evidence):

- ``clients_ok``: every client process exited 0 within its timeout, in both runs;
- ``no_violations``: the upstream answered no request 400 (provider rules, see ``validate``);
- ``same_outcome``: same final answer and same final files as the direct run;
- ``same_tool_calls``: the client executed the same sequence of tool calls (name and arguments);
- ``sessions_are_conversations``: each conversation's prompt is in exactly one pager session, and no session
  holds two conversations;
- ``no_forks``: every session has one branch and no call was assembled as "history diverged";
- ``handles_openable``: no request carries a pager handle (``pg:N-xxxxxx``) without offering ``expand``;
- ``refusals_served``: no "file unchanged, refer to the earlier result" reply (a client's read cache) reaches the
  model while the content it refers to is not in the prompt;
- ``codex_file_pages`` (Codex only): its ``cat`` / ``sed -n`` reads are recorded as file pages.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from fixture import BIG_FILES, SENTINELS
from harness import RunResult
from upstream import prompt_tokens

__all__ = ["compare", "metrics"]

HANDLE = re.compile(r"\bpg:\d+-[0-9a-f]{6}\b")
REFUSALS = (
    "File unchanged since last read",
    "Wasted call — file unchanged",
    "<system-reminder>This file is already in your context",
)
_TAG = re.compile(r"\[bed-task:([a-z0-9-]+)\]")


def _main(records: Iterable[Mapping[str, Any]], tag: str | None = None) -> list[Mapping[str, Any]]:
    return [r for r in records if r["kind"] == "main" and (tag is None or r["tag"] == tag)]


def _norm(value: Any, run: RunResult) -> Any:
    text = orjson.dumps(value).decode().replace(str(run.repo), "<repo>")
    for t in run.tags:
        text = text.replace(t, t.rsplit("-", 1)[0])
    return orjson.loads(text)


def tool_calls(run: RunResult, tag: str) -> list[Any]:
    """The client-tool calls the scripted model made in conversation ``tag``, normalised across runs."""
    out = []
    for r in _main(run.records, tag):
        for c in (r["reply"] or {}).get("calls", []):
            if c["name"] in ("expand", "recall", "note"):
                continue  # pager's own tools: answered by the proxy, never seen by the client
            out.append(_norm([c["name"], c["args"]], run))
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def client_answer(stdout: str) -> str:
    """The final answer a client printed (the scripted model's report starts with "Report:"; else its last line)."""
    text = _ANSI.sub("", stdout)
    try:
        text = str(json.loads(text).get("result", ""))  # claude -p --output-format json
    except (ValueError, AttributeError):
        pass
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    reports = [ln for ln in lines if ln.startswith("Report:")]
    return reports[-1] if reports else (lines[-1] if lines else "")


def _pager(pager_src: Path, *args: str, timeout: float = 120) -> str:
    env = {**os.environ, "PYTHONPATH": str(pager_src)}
    out = subprocess.run([sys.executable, "-m", "pager", *args], cwd=pager_src, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"pager {' '.join(args)} failed: {out.stderr[-800:]}")
    return out.stdout


def _system_snippet(run: RunResult) -> str:
    """A piece of the client's own system prompt (its longest string there), to tell its sessions from side ones."""
    m = _main(run.records)
    if not m:
        return ""
    body = m[0]["body"]
    parts = list(_texts(body.get("system"))) + list(_texts(body.get("instructions")))
    for item in body.get("messages") or body.get("input") or []:
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            parts += list(_texts(item.get("content")))
    longest = max(parts, key=len, default="")
    return longest[len(longest) // 2: len(longest) // 2 + 120]


def store_view(store: Path, pager_src: Path, snippet: str = "") -> dict[str, Any]:
    """Sessions of a proxy store: branches, page kinds, file paths, the bed tags in each, call reasons.

    ``main`` says whether the session's history holds the client's own system prompt (``snippet``): a
    session without it holds side requests only (a title, a summary).
    """
    summary = json.loads(_pager(pager_src, "inspect", str(store), "--json"))
    tags: dict[str, set[str]] = {}
    main: dict[str, bool] = {}
    for line in _pager(pager_src, "inspect", str(store), "--format", "openai-chat").splitlines():
        if line.strip():
            d = json.loads(line)
            text = "\n".join(_texts(d["request"]))
            tags[d["session"]] = set(_TAG.findall(text))
            main[d["session"]] = bool(snippet) and snippet in text
    reasons: dict[str, Counter[str]] = {}
    rep = store / "reports.jsonl"
    for line in rep.read_text().splitlines() if rep.exists() else ():
        d = json.loads(line)
        if d.get("type") == "assemble":
            reasons.setdefault(d["session"], Counter())[d.get("reason") or ""] += 1
    out = {}
    for s in summary:
        name = s["session"]
        out[name] = {
            "main": main.get(name, False),
            "branches": s.get("branches"), "pages": s.get("pages"), "pages_by_kind": s.get("pages_by_kind"),
            "file_paths": sorted({r["path"] for r in s.get("rows", []) if r.get("kind") == "file" and r.get("path")}),
            "tags": sorted(tags.get(name, ())), "reasons": dict(reasons.get(name, {})),
        }
    return out


_MS = re.compile(r"session=(\S+) status=(\d+) .*?ms=([\d.]+)")


def proxy_timings(log: str) -> list[tuple[str, float]]:
    """(session, ms) of each request in the proxy's log, in the order they ended."""
    return [(m.group(1), float(m.group(3))) for m in _MS.finditer(log)]


def _texts(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _handles_without_tool(records: Iterable[Mapping[str, Any]]) -> list[int]:
    bad = []
    for i, r in enumerate(records):
        body = r["body"] if isinstance(r["body"], dict) else {}
        raw = orjson.dumps({k: v for k, v in body.items() if k != "tools"}).decode()
        names = {t.get("name") or (t.get("function") or {}).get("name") for t in body.get("tools") or ()
                 if isinstance(t, dict)}
        if HANDLE.search(raw) and "expand" not in names:
            bad.append(i)
    return bad


def _refusals(records: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(refusal results seen in the last request of each conversation, those whose file content is absent)."""
    last: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r["kind"] == "main":
            last[r["tag"]] = r
    seen = unserved = 0
    for r in last.values():
        raw = orjson.dumps(r["body"]).decode()
        calls: dict[str, str] = {}
        for m in (r["body"].get("messages") or r["body"].get("input") or []):
            for b in (m.get("content") if isinstance(m.get("content"), list) else [m]):
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_use":
                    calls[b.get("id")] = str((b.get("input") or {}).get("file_path", ""))
                if b.get("type") == "tool_result":
                    text = " ".join(_texts(b.get("content")))
                    if any(text.lstrip().startswith(p) for p in REFUSALS):
                        seen += 1
                        path = calls.get(b.get("tool_use_id"), "")
                        rel = next((p for p in BIG_FILES if path.endswith(p)), None)
                        if rel and SENTINELS[rel] not in raw:
                            unserved += 1
    return seen, unserved


def compare(direct: RunResult, proxy: RunResult, pager_src: Path) -> dict[str, Any]:
    """Run every check of the module docstring on one scenario; return {check: {"ok": bool, ...}}."""
    checks: dict[str, Any] = {}
    bad_runs = [f"{r.client} rc={r.returncode}{' TIMEOUT' if r.timed_out else ''}" for run in (direct, proxy)
                for r in run.runs if r.returncode != 0 or r.timed_out]
    checks["clients_ok"] = {"ok": not bad_runs, "failed": bad_runs}
    v_direct = [r["violations"] for r in direct.records if r["violations"]]
    v_proxy = [r["violations"] for r in proxy.records if r["violations"]]
    checks["no_violations"] = {"ok": not v_direct and not v_proxy, "direct": len(v_direct), "proxy": len(v_proxy),
                               "examples": [v[0][:300] for v in (v_direct + v_proxy)[:3]]}
    tags = [(d, p) for d, p in zip(direct.tags, proxy.tags)]
    # what each client process printed as its final answer (runs are in the order of the tags)
    texts = {d.rsplit("-", 1)[0]: (_norm(client_answer(rd.stdout), direct), _norm(client_answer(rp.stdout), proxy))
             for (d, p), rd, rp in zip(tags, direct.runs, proxy.runs)}
    files_same = direct.files == proxy.files
    checks["same_outcome"] = {
        "ok": files_same and all(a == b and a for a, b in texts.values()),
        "files_differ": sorted(k for k in set(direct.files) | set(proxy.files)
                               if direct.files.get(k) != proxy.files.get(k)),
        "answers": {k: {"direct": a, "proxy": b} for k, (a, b) in texts.items() if a != b},
    }
    seq = {d.rsplit("-", 1)[0]: (tool_calls(direct, d), tool_calls(proxy, p)) for d, p in tags}
    checks["same_tool_calls"] = {
        "ok": all(a == b for a, b in seq.values()),
        "counts": {k: {"direct": len(a), "proxy": len(b)} for k, (a, b) in seq.items()},
        "first_difference": {k: _first_diff(a, b) for k, (a, b) in seq.items() if a != b},
    }
    view = store_view(proxy.store, pager_src, _system_snippet(proxy)) if proxy.store else {}
    mains = {s: v for s, v in view.items() if v["main"]}
    holders = {t: [s for s, v in mains.items() if t in v["tags"]] for t in proxy.tags}
    mixed = [s for s, v in mains.items() if len([t for t in v["tags"] if t in proxy.tags]) > 1]
    checks["sessions_are_conversations"] = {
        "ok": all(len(h) == 1 for h in holders.values()) and not mixed and len(mains) == len(proxy.tags),
        "conversations": len(proxy.tags), "sessions": len(mains), "side_sessions": len(view) - len(mains),
        "sessions_per_conversation": {t.rsplit("-", 1)[0]: len(h) for t, h in holders.items()},
        "sessions_holding_two": len(mixed),
    }
    forks = {s: v["branches"] for s, v in view.items() if (v["branches"] or 1) > 1}
    diverged = {s: v["reasons"].get("history diverged", 0) for s, v in view.items()
                if v["reasons"].get("history diverged")}
    checks["no_forks"] = {"ok": not forks and not diverged, "branches": forks, "diverged_calls": diverged}
    bad_handles = _handles_without_tool(_main(proxy.records))
    checks["handles_openable"] = {"ok": not bad_handles, "requests_with_handle_but_no_expand": len(bad_handles),
                                  "of_requests": len(_main(proxy.records))}
    seen_d, _ = _refusals(direct.records)
    seen_p, unserved = _refusals(proxy.records)
    checks["refusals_served"] = {"ok": unserved == 0, "refusals_direct": seen_d, "refusals_proxy": seen_p,
                                 "unserved": unserved}
    if direct.client == "codex":
        calls = orjson.dumps([tool_calls(direct, t) for t in direct.tags]).decode()
        read = sorted(p for p in BIG_FILES if f"cat {p}" in calls)
        paths = sorted({p for v in view.values() for p in v["file_paths"]})
        got = [p for p in read if any(x.endswith(p) for x in paths)]
        checks["codex_file_pages"] = {"ok": bool(got), "file_pages_for": got, "of_files_read": len(read)}
    checks["_store"] = view
    return checks


def _first_diff(a: list[Any], b: list[Any]) -> dict[str, Any]:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return {"index": i, "direct": str(x)[:160], "proxy": str(y)[:160]}
    return {"index": min(len(a), len(b)), "direct": str(a[len(b):][:1])[:160], "proxy": str(b[len(a):][:1])[:160]}


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _gaps(run: RunResult) -> dict[tuple[str, int], float]:
    """Per (conversation, step): seconds from the end of the previous answer to this request's arrival."""
    out: dict[tuple[str, int], float] = {}
    for tag in run.tags:
        recs = _main(run.records, tag)
        for prev, cur in zip(recs, recs[1:]):
            step = (cur["reply"] or {}).get("step", -1)
            key = (tag.rsplit("-", 1)[0], step)
            if prev["t1"] and key not in out:
                out[key] = cur["t0"] - prev["t1"]
    return out


def metrics(direct: RunResult, proxy: RunResult) -> dict[str, Any]:
    """Prompt tokens, per-request overhead and first-request latency, proxy against direct."""
    tok_d = sum(prompt_tokens(r) for r in _main(direct.records))
    tok_p = sum(prompt_tokens(r) for r in _main(proxy.records))
    gd, gp = _gaps(direct), _gaps(proxy)
    diffs = [1000 * (gp[k] - gd[k]) for k in gd if k in gp]
    served = [1000 * (r["t1"] - r["t0"]) for r in _main(direct.records) if r["t1"]]
    timings = proxy_timings(proxy.proxy_log)
    in_proxy = [ms for _, ms in timings]
    first = {}
    for name, run in (("direct", direct), ("proxy", proxy)):
        starts = [r.t_start for r in run.runs]
        m = _main(run.records)
        first[name] = round(1000 * (min(r["t0"] for r in m) - min(starts)), 1) if m and starts else None
    return {
        "requests": {"direct": len(_main(direct.records)), "proxy": len(_main(proxy.records))},
        "side_requests": {"direct": sum(r["kind"] != "main" for r in direct.records),
                          "proxy": sum(r["kind"] != "main" for r in proxy.records)},
        "prompt_tokens": {"direct": tok_d, "proxy": tok_p, "ratio": round(tok_p / tok_d, 3) if tok_d else None},
        "overhead_ms": {"median": _r(statistics.median(diffs) if diffs else None), "p95": _r(_pct(diffs, 0.95)),
                        "paired_steps": len(diffs),
                        "direct_gap_median": _r(1000 * statistics.median(gd.values()) if gd else None),
                        "proxy_gap_median": _r(1000 * statistics.median(gp.values()) if gp else None)},
        "first_request_ms": first,
        # the proxy's own log: milliseconds from a request's arrival to its response's end (upstream included)
        "proxy_ms": {"median": _r(statistics.median(in_proxy) if in_proxy else None), "p95": _r(_pct(in_proxy, 0.95)),
                     "first": _r(in_proxy[0] if in_proxy else None), "requests": len(in_proxy),
                     "upstream_alone_median": _r(statistics.median(served) if served else None)},
        "client_seconds": {"direct": round(max((r.seconds for r in direct.runs), default=0), 1),
                           "proxy": round(max((r.seconds for r in proxy.runs), default=0), 1)},
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
