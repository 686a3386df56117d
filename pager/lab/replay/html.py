"""Render a benchmark result as one self-contained HTML page.

No scripts, no stylesheets or fonts from elsewhere: charts are inline SVG, so
the file opens anywhere, offline, and can be mailed. A Content-Security-Policy
in the page forbids scripts and any load from outside it, so a browser holds
the page to that. Every string that came from data (session ids, strategy
names, paths) is escaped.

The page, top to bottom: a table of contents; the summary table; bar charts
of cost and effective cost relative to full resend, of need coverage (all /
long-range) and of the fault rate per strategy; a glossary of the columns;
any failed runs; a table of sessions linking to their cards; then one card per
session with prompt tokens per call for every strategy, and pager's layers
over time as a stacked area.

Colours: each strategy has one colour everywhere on the page (``colors``);
pager's layers have their own family of colours (violets), used for nothing
else. Every card carries its own legend. The layout is fluid down to a
400-pixel screen: charts scale to their card, wide tables scroll inside their
own box, long names wrap.

This module owns the page: its style sheet, colours, legends, tables and
sections. The charts themselves (SVG, thinned to ``MAX_POINTS`` points, with
hover values) are drawn by ``pager.lab.replay.svg``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from pager.lab.replay.metrics import SESSION_FLOOR, StrategySummary
from pager.lab.replay.runner import BenchResult
from pager.lab.replay.svg import bar_chart, line_chart, stacked_area
from pager.lab.replay.svg import escape as _e
from pager.ui.palette import LAYER_COLORS  # the layers' colours: no strategy colour is one of them

__all__ = ["colors", "render"]

FULL_COLOR = "#4b5563"
# Strategy colours (after full resend's grey): distinct hues, none of them violet.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#e69f00", "#56b4e9", "#a0522d", "#c2185b",
           "#7cb342", "#00838f", "#b8860b", "#1f3a93", "#ef6c00")
# Pager's layers (LAYER_COLORS...): violets only, so a layer never reads as a strategy.

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
padding:0 16px;max-width:1280px;color:#111827;background:#f9fafb}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
a{color:#1d4ed8}
.meta{color:#4b5563;margin-bottom:12px}
nav ol{margin:4px 0;padding-left:20px}
nav summary{cursor:pointer;color:#4b5563;font-size:13px}
nav .sessions{columns:16em;column-gap:24px;font-size:13px}
nav .sessions li{break-inside:avoid;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #e5e7eb;border-radius:6px;background:#fff}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{padding:4px 9px;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap}
th{white-space:normal;min-width:60px;max-width:110px;vertical-align:bottom}
th:first-child,td:first-child{text-align:left;white-space:normal;min-width:140px;
overflow-wrap:anywhere}
th{background:#f3f4f6;font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:16px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:10px 12px;
flex:1 1 520px;min-width:0;max-width:100%}
.card h3{font-size:14px;margin:0 0 2px;overflow-wrap:anywhere}
.card h3 a.self{color:#9ca3af;text-decoration:none;margin-left:6px;font-weight:400}
.card .sub{color:#6b7280;font-size:12px;margin-bottom:4px;overflow-wrap:anywhere}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;margin:6px 0 6px;font-size:12px}
.legend span{overflow-wrap:anywhere}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;
vertical-align:-1px}
.sw.dash{height:0;border-top:3px dashed;border-radius:0;vertical-align:3px}
.sw.pale{opacity:.4}
svg{display:block;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#374151}
.note{color:#6b7280;font-size:12px;max-width:900px}
dl.glossary{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px;
max-width:900px}
dl.glossary dt{font-weight:600}dl.glossary dd{margin:0}
.failed{color:#b91c1c}
td.low{color:#b91c1c;font-weight:600}
@media (max-width:600px){
body{margin:12px auto;padding:0 8px}
.card{flex-basis:100%;padding:8px}
dl.glossary{grid-template-columns:1fr}dl.glossary dd{margin:0 0 6px}
}
"""



def colors(names: Sequence[str]) -> dict[str, str]:
    """Return each strategy's colour: full resend grey, the others from ``PALETTE`` in order."""
    out: dict[str, str] = {}
    k = 0
    for n in names:
        if n == "full":
            out[n] = FULL_COLOR
        else:
            out[n] = PALETTE[k % len(PALETTE)]
            k += 1
    return out


def _legend(items: Sequence[tuple[str, str]], *, dashed: Sequence[str] = (),
            pale: Sequence[str] = ()) -> str:
    out = []
    for n, c in items:
        cls = "sw dash" if n in dashed else "sw pale" if n in pale else "sw"
        style = f"border-color:{c}" if n in dashed else f"background:{c}"
        out.append(f'<span><span class="{cls}" style="{style}"></span>{_e(n)}</span>')
    return '<div class="legend">' + "".join(out) + "</div>"


def _strategy_legend(names: Sequence[str], color: Mapping[str, str]) -> str:
    return _legend([(n, color[n]) for n in names], dashed=[n for n in names if n == "full"])


def _fmt(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _swatch(c: str) -> str:
    return f'<span class="sw" style="background:{c}"></span>'


SUMMARY_HEAD = ("strategy", "cost / full (re-read)", "effective cost / full (excerpt)",
                "cost / full", "fault rate", "coverage", "names coverage", "worst session",
                "sessions < 0.90", "long-range coverage", "mean prompt / full", "mean prompt",
                "max prompt", "median prompt / completion", "growth", "violations",
                "latency p50 ms", "latency p99 ms")

GLOSSARY = (
    ("cost / full (re-read)", "the honest price: cost plus, for each fault, one more call on "
     "the cached prompt and each page that last held a missed need written again at the write "
     "price (whole, or capped): read × prompt + write × pages + output price × output tokens; "
     "over full resend's"),
    ("effective cost / full (excerpt)", "the miss priced as an excerpt: cost plus, for each "
     "fault, one more call on the cached prompt with a recall result: read × prompt + write × "
     "recall tokens + output price × output tokens; over full resend's"),
    ("cost / full", "cache-adjusted input cost (cached tokens at the read price, the rest at the "
     "write price) over full resend's, pooled over sessions; misses not priced"),
    ("fault rate", "share of calls whose prompt missed at least one need of the next assistant "
     "message"),
    ("coverage", "share of the identifiers, paths, numbers and rare words of six letters or "
     "more the next assistant message used (and that appeared earlier) which were in the "
     "prompt built for it"),
    ("names coverage", "coverage of the needs that name a thing: paths, identifiers, numbers"),
    ("worst session", "the coverage of the strategy's worst session (hover for its name)"),
    ("sessions < 0.90", "sessions whose coverage is under 0.90, of the sessions with needs"),
    ("long-range coverage", "coverage of the needs last seen long before (see the header)"),
    ("mean prompt / full", "prompt tokens over full resend's, pooled over sessions"),
    ("mean prompt, max prompt", "prompt tokens per call: mean over all calls, and the largest"),
    ("median prompt / completion", "median over sessions of prompt tokens over completion "
     "tokens (the seed's target: at most 50)"),
    ("growth", "mean prompt of a session's second half over its first half, median over "
     "sessions; 1.0 means a late call costs what an early one does"),
    ("violations", "broken invariants: unanswered tool calls, orphan results, history order, "
     "over budget, missing L1; should be 0"),
    ("latency p50 / p99 ms", "time to build one prompt"),
)


def _summary_table(summary: Sequence[StrategySummary], color: Mapping[str, str]) -> str:
    rows = []
    for s in summary:
        name = s.strategy + (f" ({s.errors} failed)" if s.errors else "")
        cells = (
            _fmt(s.reread_vs_full, ".3f"), _fmt(s.effective_vs_full, ".3f"),
            _fmt(s.cost_vs_full, ".3f"), _fmt(s.fault_rate, ".3f"), _fmt(s.coverage, ".3f"),
            _fmt(s.names_coverage, ".3f"), _fmt(s.worst_coverage, ".3f"),
            f"{s.sessions_below} of {s.sessions_measured}", _fmt(s.long_coverage, ".3f"),
            _fmt(s.mean_vs_full, ".2f"), f"{s.mean_prompt:,.0f}", f"{s.max_prompt:,}",
            _fmt(s.median_ratio, ".0f"), _fmt(s.growth, ".2f"), str(s.violations),
            _fmt(s.latency_p50_ms, ".2f"), _fmt(s.latency_p99_ms, ".2f"),
        )
        tips = {6: f"worst: {s.worst_session}" if s.worst_session else ""}
        rows.append(f"<tr><td>{_swatch(color[s.strategy])}{_e(name)}</td>"
                    + "".join(f'<td title="{_e(tips[i])}">{_e(c)}</td>' if tips.get(i)
                              else f"<td>{_e(c)}</td>" for i, c in enumerate(cells)) + "</tr>")
    return ('<div class="scroll"><table><thead><tr>'
            + "".join(f"<th>{_e(h)}</th>" for h in SUMMARY_HEAD)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _slugs(ids: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    used: set[str] = set()
    for sid in ids:
        base = "s-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", sid).strip("-")[:60] or "session")
        slug, k = base, 2
        while slug in used:
            slug, k = f"{base}-{k}", k + 1
        used.add(slug)
        out[sid] = slug
    return out


def _sessions_table(result: BenchResult, names: Sequence[str], color: Mapping[str, str],
                    slug: Mapping[str, str]) -> str:
    shown = [n for n in names if n != "full"]
    head = ["session", "source", "calls", "full mean prompt"]
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    cells += "".join(f"<th>{_swatch(color[n])}{_e(n)}<br>re-read / full · coverage</th>"
                     for n in shown)
    rows = []
    for r in result.runs:
        ms = result.metrics_for(r.id)
        full = ms.get("full")
        tds = [f'<td><a href="#{slug[r.id]}">{_e(r.id)}</a></td>', f"<td>{_e(r.source or '–')}</td>",
               f"<td>{r.assistant}</td>",
               f"<td>{full.mean_prompt:,.0f}</td>" if full is not None and not full.error
               else "<td>–</td>"]
        for n in shown:
            m = ms.get(n)
            if m is None or m.error:
                tds.append('<td class="failed" title="failed on this session">failed</td>')
                continue
            tip = (f"{n}: cost / full {_fmt(m.cost_vs_full, '.2f')}, excerpt "
                   f"{_fmt(m.effective_vs_full, '.2f')}, names coverage "
                   f"{_fmt(m.names_coverage, '.3f')}, fault rate {_fmt(m.fault_rate, '.3f')}, "
                   f"{m.reread_pages} pages re-read")
            low = ' class="low"' if m.coverage is not None and m.coverage < SESSION_FLOOR else ""
            tds.append(f'<td title="{_e(tip)}"{low}>{_fmt(m.reread_vs_full, ".2f")} · '
                       f'{_fmt(m.coverage, ".3f")}</td>')
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return ('<div class="scroll"><table><thead><tr>' + cells + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def _contents(result: BenchResult, slug: Mapping[str, str]) -> list[str]:
    """Return the table of contents' items."""
    toc = ['<li><a href="#summary">Summary</a></li>',
           '<li><a href="#charts">Cost, coverage and faults</a></li>',
           '<li><a href="#glossary">What the columns mean</a></li>']
    if result.failures:
        toc.append(f'<li><a href="#failures">Failed runs ({len(result.failures)})</a></li>')
    toc.append(f'<li><a href="#sessions">Sessions ({len(result.runs)})</a><details>'
               f"<summary>every session</summary><ol class=\"sessions\">"
               + "".join(f'<li><a href="#{slug[r.id]}">{_e(r.id)}</a></li>' for r in result.runs)
               + "</ol></details></li>")
    if result.skipped:
        toc.append('<li><a href="#skipped">Skipped files</a></li>')
    return toc


def _head(result: BenchResult, title: str) -> list[str]:
    """Return the document's head and the page header: what was replayed, and how it is priced."""
    calls = max((s.calls for s in result.summary), default=0)
    p = result.pricing
    fc = result.fault
    cap = "whole" if fc.reread_cap is None else f"at most {fc.reread_cap:g} tokens of"
    return [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{_e(title)}</h1>",
        f'<div class="meta">{len(result.runs)} sessions, {calls:,} calls replayed open-loop; '
        f"pricing {_e(p.name)} (cached reads {p.read:g}x, writes {p.write:g}x base); "
        f"a fault costs {p.read:g} × prompt + {p.write:g} × (each page re-read, {cap} it) + "
        f"{fc.output_price:g} × {fc.output_tokens:g} tokens (as an excerpt: {p.write:g} × "
        f"{fc.recall_tokens:g} for the pages); "
        f"long-range = last seen {result.long_gap}+ messages before; "
        f"{result.seconds:.1f} s</div></header>",
    ]


def _charts(result: BenchResult, names: Sequence[str], color: Mapping[str, str]) -> list[str]:
    """Return the charts section: cost, coverage and fault rate per strategy."""
    summ = {s.strategy: s for s in result.summary}
    return [
        '<section id="charts"><h2>Cost, coverage and faults</h2><div class="row">',
        '<div class="card" id="chart-cost"><h3>Input cost relative to full resend</h3>',
        _strategy_legend(names, color),
        _legend([("solid: cost, faults priced as re-reads", "#6b7280"),
                 ("pale: cost, faults not priced", "#6b7280")],
                pale=["pale: cost, faults not priced"]),
        bar_chart([(n, [(summ[n].reread_vs_full, color[n], "cost / full (re-read)"),
                        (summ[n].cost_vs_full, color[n], "cost / full")])
                   for n in names], y_label="relative to full", reference=1.0,
                  title="cost and effective cost relative to full resend"),
        '</div><div class="card" id="chart-coverage"><h3>Need coverage</h3>',
        _strategy_legend(names, color),
        _legend([("solid: all needs", "#6b7280"), ("pale: names", "#6b7280")],
                pale=["pale: names"]),
        bar_chart([(n, [(summ[n].coverage, color[n], "coverage"),
                        (summ[n].names_coverage, color[n], "names coverage")])
                   for n in names], y_label="coverage", reference=1.0,
                  title="need coverage per strategy"),
        '</div><div class="card" id="chart-faults"><h3>Fault rate: calls missing a need</h3>',
        _strategy_legend(names, color),
        bar_chart([(n, [(summ[n].fault_rate, color[n], "fault rate")]) for n in names],
                  y_label="share of calls", fmt=".3f", title="fault rate per strategy"),
        "</div></div></section>",
    ]


def _session_card(result: BenchResult, r: Any, names: Sequence[str], color: Mapping[str, str],
                  slug: Mapping[str, str], layered: str | None) -> list[str]:
    """Return one session's card: its figures, prompt tokens per call, and the layers of ``layered``."""
    ms = result.metrics_for(r.id)
    present = [n for n in names if n in r.records]
    series = [(n, color[n], [c.prompt_tokens for c in r.records[n]]) for n in present]
    sub = f"{r.source or 'unknown source'} · {r.assistant} assistant messages"
    figures = " · ".join(
        f"{n} {_fmt(ms[n].reread_vs_full, '.2f')}" for n in names
        if n in ms and ms[n].error is None and n != "full"
    )
    out = [f'<div class="card" id="{slug[r.id]}"><h3>{_e(r.id)}'
           f'<a class="self" href="#{slug[r.id]}" title="link to this session">#</a></h3>'
           f'<div class="sub">{_e(sub)} · <a href="#contents">contents</a></div>']
    if figures:
        out.append(f'<div class="sub">cost / full (re-read): {_e(figures)}</div>')
    if r.errors:
        out.append('<div class="sub failed">failed: ' + _e(", ".join(
            f"{k} ({v})" for k, v in r.errors.items())) + "</div>")
    out.append(_strategy_legend(present, color))
    out.append(line_chart(series, title=f"prompt tokens per call: {r.id}"))
    recs = r.records.get(layered) if layered else None
    if recs and any(c.layers for c in recs):
        svg, legend = stacked_area([c.layers for c in recs],
                                   title=f"{layered} layers: {r.id}")
        out.append(f'<div class="sub">{_e(layered)}: tokens per layer</div>'
                   + _legend(legend) + svg)
    out.append("</div>")
    return out


def render(result: BenchResult, *, title: str = "pager bench") -> str:
    """Return the HTML report of ``result`` as one string."""
    names = list(result.strategies)
    color = colors(names)
    slug = _slugs([r.id for r in result.runs])
    failures = result.failures
    layered = _layer_strategy(result)

    out = [
        *_head(result, title),
        '<nav id="contents" aria-label="Contents"><h2>Contents</h2><ol>', *_contents(result, slug), "</ol></nav>",
        '<section id="summary"><h2>Summary</h2>',
        _summary_table(result.summary, color),
        '<p class="note">Each strategy keeps its colour on the whole page. Cost, effective cost '
        "and mean prompt are relative to full resend, pooled over sessions. Definitions: "
        'docs/metrics.md, and <a href="#glossary">below</a>.</p></section>',
        *_charts(result, names, color),
        '<section id="glossary"><h2>What the columns mean</h2><dl class="glossary">',
        *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in GLOSSARY),
        "</dl></section>",
    ]
    if failures:
        out.append('<section id="failures"><h2>Failed runs</h2><ul class="failed">')
        out.extend(f'<li>{_e(name)} on <a href="#{slug[sid]}">{_e(sid)}</a>: {_e(err)}</li>'
                   for sid, name, err in failures)
        out.append("</ul></section>")
    out.append(f'<section id="sessions"><h2>Sessions</h2>')
    out.append('<p class="note">Cost with faults priced as re-reads, relative to full resend, '
               "and coverage, per session and strategy (a session under 0.90 coverage is marked; "
               "hover a figure for the other costs, names coverage and fault rate); a "
               "session's name leads to its card.</p>")
    out.append(_sessions_table(result, names, color, slug))
    if layered:
        out.append(f'<p class="note">In each card: prompt tokens per call for every strategy '
                   f"(full resend dashed), then the tokens per layer of {_e(layered)}'s prompt. "
                   "Hover a chart for the values at that call.</p>")
    out.append('<div class="row">')
    for r in result.runs:
        out.extend(_session_card(result, r, names, color, slug, layered))
    out.append("</div></section>")
    if result.skipped:
        out.append('<section id="skipped"><h2>Skipped files</h2><ul>')
        out.extend(f"<li>{_e(p)}: {_e(why)}</li>" for p, why in result.skipped)
        out.append("</ul></section>")
    out.append("</body></html>")
    return "\n".join(out)


def _layer_strategy(result: BenchResult) -> str | None:
    # the layer chart follows one pager strategy: "pager" if it ran, else the first with layers
    candidates = [n for n in result.strategies
                  if any(c.layers for r in result.runs for c in r.records.get(n, ()))]
    if "pager" in candidates:
        return "pager"
    return candidates[0] if candidates else None
