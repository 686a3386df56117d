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
else. Every card carries its own legend. Hovering a bar, or any point of a
chart's time axis, shows the values there (SVG ``<title>``). Polylines are
thinned to at most ``MAX_POINTS`` points (keeping each bucket's highest value,
so peaks survive); hover bands follow the same buckets. The layout is fluid
down to a 400-pixel screen: charts scale to their card, wide tables scroll
inside their own box, long names wrap.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Mapping, Sequence

from pager.lab.replay.metrics import SESSION_FLOOR, StrategySummary
from pager.lab.replay.runner import BenchResult
from pager.ui.palette import EXTRA_LAYER_COLORS, LAYER_COLORS, LAYER_NAMES, LAYER_ORDER

__all__ = ["colors", "render"]

MAX_POINTS = 240
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


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


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


def _nice_step(span: float, ticks: int = 5) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _tick_label(v: float) -> str:
    if abs(v) >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    if v == int(v):
        return str(int(v))
    return f"{v:.2g}"


def _buckets(n: int, limit: int = MAX_POINTS) -> list[tuple[int, int]]:
    """Return ``[lo, hi)`` index ranges cutting ``n`` items into at most ``limit`` buckets."""
    if n <= limit:
        return [(i, i + 1) for i in range(n)]
    size = n / limit
    return [(int(b * size), min(max(int((b + 1) * size), int(b * size) + 1), n))
            for b in range(limit)]


def _thin(xs: Sequence[float], ys: Sequence[float], limit: int = MAX_POINTS) -> tuple[list, list]:
    out_x, out_y = [], []
    for lo, hi in _buckets(len(xs), limit):
        k = max(range(lo, hi), key=lambda i: ys[i])
        out_x.append(xs[k])
        out_y.append(ys[k])
    return out_x, out_y


class _Frame:
    """Plot area geometry and axes for one chart."""

    def __init__(self, width: int, height: int, xmax: float, ymax: float,
                 left: int = 48, right: int = 10, top: int = 10, bottom: int = 34) -> None:
        self.w, self.h = width, height
        self.l, self.r, self.t, self.b = left, right, top, bottom
        self.ystep = _nice_step(ymax or 1)
        self.ymax = max(self.ystep, math.ceil((ymax or 1) / self.ystep) * self.ystep)
        self.xmax = max(xmax, 1)

    def x(self, v: float) -> float:
        return self.l + (self.w - self.l - self.r) * v / self.xmax

    def y(self, v: float) -> float:
        return self.t + (self.h - self.t - self.b) * (1 - v / self.ymax)

    def axes(self, x_label: str, y_label: str, x_ticks: bool = True) -> str:
        parts = []
        v = 0.0
        while v <= self.ymax + 1e-9:
            y = self.y(v)
            parts.append(f'<line x1="{self.l}" x2="{self.w - self.r}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="#e5e7eb"/>')
            parts.append(f'<text x="{self.l - 4}" y="{y + 4:.1f}" text-anchor="end">'
                         f'{_tick_label(v)}</text>')
            v += self.ystep
        base = self.h - self.b
        parts.append(f'<line x1="{self.l}" x2="{self.w - self.r}" y1="{base}" y2="{base}" '
                     f'stroke="#9ca3af"/>')
        if x_ticks:
            step = max(1.0, round(_nice_step(self.xmax, 6)))  # calls are whole numbers
            v = 0.0
            while v <= self.xmax + 1e-9:
                x = self.x(v)
                parts.append(f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">'
                             f'{_tick_label(v)}</text>')
                v += step
        parts.append(f'<text x="{(self.l + self.w - self.r) / 2:.1f}" y="{self.h - 4}" '
                     f'text-anchor="middle">{_e(x_label)}</text>')
        parts.append(f'<text transform="translate(11,{(self.t + base) / 2:.1f}) rotate(-90)" '
                     f'text-anchor="middle">{_e(y_label)}</text>')
        return "".join(parts)

    def hover_bands(self, n: int, tip: Any) -> str:
        """Return one transparent band per bucket of calls, each titled ``tip(lo, hi)``."""
        out = []
        for lo, hi in _buckets(n):
            x0 = self.x(lo + 0.5)
            x1 = self.x(hi + 0.5)
            out.append(f'<rect class="hover" x="{x0:.1f}" y="{self.t}" width="{x1 - x0:.2f}" '
                       f'height="{self.h - self.t - self.b}" fill="#000" fill-opacity="0">'
                       f'<title>{_e(tip(lo, hi))}</title></rect>')
        return "".join(out)


def _svg(width: int, height: int, body: str, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"><title>{_e(title)}</title>{body}</svg>')


def _calls(lo: int, hi: int) -> str:
    return f"call {lo + 1}" if hi - lo == 1 else f"calls {lo + 1}-{hi} (largest)"


def line_chart(series: Sequence[tuple[str, str, Sequence[float]]], *, width: int = 560,
               height: int = 230, x_label: str = "call", y_label: str = "prompt tokens",
               title: str = "") -> str:
    """Return an SVG line chart; ``series`` is ``(name, colour, ys)`` with x = 1, 2, ...

    A series named ``full`` is dashed (the others often run on top of it).
    Hovering anywhere over a call shows every series' value there.
    """
    xmax = max((len(ys) for _, _, ys in series), default=1)
    ymax = max((max(ys) for _, _, ys in series if len(ys)), default=1)
    f = _Frame(width, height, xmax, ymax)
    body = [f.axes(x_label, y_label)]
    for name, color, ys in series:
        xs, ys2 = _thin(list(range(1, len(ys) + 1)), list(ys))
        if not xs:
            continue
        pts = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in zip(xs, ys2))
        dash = ' stroke-dasharray="5 3"' if name == "full" and len(series) > 1 else ""
        body.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash} '
                    f'stroke-linejoin="round" points="{pts}"><title>{_e(name)}</title></polyline>')

    def tip(lo: int, hi: int) -> str:
        vals = [f"{name} {max(ys[lo:hi]):,.0f}" for name, _, ys in series if len(ys) > lo]
        return f"{_calls(lo, hi)}: " + " · ".join(vals)

    body.append(f.hover_bands(xmax, tip))
    return _svg(width, height, "".join(body), title)


def stacked_area(layers: Sequence[Mapping[str, int] | None], *, width: int = 560,
                 height: int = 200, title: str = "") -> tuple[str, list[tuple[str, str]]]:
    """Return an SVG stacked area of tokens per layer per call, and its legend entries."""
    keys = [k for k in LAYER_ORDER if any(L and L.get(k) for L in layers)]
    keys += sorted({k for L in layers if L for k, v in L.items() if v and k not in keys})
    extra = [k for k in keys if k not in LAYER_COLORS]
    color = {k: LAYER_COLORS.get(k) or EXTRA_LAYER_COLORS[extra.index(k) % len(EXTRA_LAYER_COLORS)]
             for k in keys}
    rows = [[(L or {}).get(k, 0) or 0 for k in keys] for L in layers]
    idx = list(range(len(rows)))
    if len(rows) > MAX_POINTS:  # thin by total size, keeping each bucket's largest call
        totals = [sum(r) for r in rows]
        xs, _ = _thin(idx, totals)
        idx = xs
    xs = [i + 1 for i in idx]
    sel = [rows[i] for i in idx]
    ymax = max((sum(r) for r in sel), default=1)
    f = _Frame(width, height, len(rows), ymax)
    body = [f.axes("call", "tokens per layer")]
    below = [0.0] * len(sel)
    for j, k in enumerate(keys):
        above = [b + r[j] for b, r in zip(below, sel)]
        top = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in zip(xs, above))
        bottom = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in reversed(list(zip(xs, below))))
        body.append(f'<polygon fill="{color[k]}" fill-opacity="0.9" stroke="none" '
                    f'points="{top} {bottom}"><title>{_e(LAYER_NAMES.get(k, k))}</title></polygon>')
        below = above

    def tip(lo: int, hi: int) -> str:
        k = max(range(lo, hi), key=lambda i: sum(rows[i]))
        parts = [f"{LAYER_NAMES.get(key, key)} {rows[k][j]:,}" for j, key in enumerate(keys)]
        return f"call {k + 1}: {sum(rows[k]):,} tokens: " + " · ".join(parts)

    body.append(f.hover_bands(len(rows), tip))
    legend = [(LAYER_NAMES.get(k, k), color[k]) for k in keys]
    return _svg(width, height, "".join(body), title), legend


def bar_chart(bars: Sequence[tuple[str, Sequence[tuple[float | None, str, str]]]], *,
              width: int = 560, y_label: str = "", title: str = "",
              reference: float | None = None, fmt: str = ".2f") -> str:
    """Return an SVG bar chart; each group is ``(label, [(value, colour, what), ...])``.

    The first bar of a group is solid, the next ones pale (same colour): the
    legend says what each means. Each bar's title gives its label and value.
    """
    vals = [v for _, group in bars for v, _, _ in group if v is not None]
    ymax = max([*vals, reference or 0, 0.01])
    n = max(len(bars), 1)
    slant = n > 4 or any(len(label) > 14 for label, _ in bars)
    bottom = 96 if slant else 44
    height = 210 + bottom
    f = _Frame(width, height, 1, ymax * 1.12, bottom=bottom)
    body = [f.axes("", y_label, x_ticks=False)]
    slot = (width - f.l - f.r) / n
    for i, (label, group) in enumerate(bars):
        k = max(len(group), 1)
        bw = min(34.0, slot * 0.8 / k)
        x0 = f.l + slot * i + (slot - bw * k) / 2
        for j, (v, color, what) in enumerate(group):
            if v is None:
                continue
            x = x0 + j * bw
            y = f.y(v)
            pale = ' fill-opacity="0.4" stroke-width="1"' if j else ""
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" '
                        f'height="{f.y(0) - y:.1f}" fill="{color}" stroke="{color}"{pale}>'
                        f'<title>{_e(label)}: {_e(what)} {format(v, fmt)}</title></rect>')
            if bw >= 18:
                body.append(f'<text x="{x + (bw - 2) / 2:.1f}" y="{y - 3:.1f}" '
                            f'text-anchor="middle">{format(v, fmt)}</text>')
        cx = f.l + slot * i + slot / 2
        short = label if len(label) <= 24 else label[:22] + "…"
        ty = f.y(0) + 14
        if slant:
            body.append(f'<text x="{cx:.1f}" y="{ty:.1f}" text-anchor="end" '
                        f'transform="rotate(-35 {cx:.1f} {ty:.1f})">{_e(short)}<title>{_e(label)}'
                        f'</title></text>')
        else:
            body.append(f'<text x="{cx:.1f}" y="{ty:.1f}" text-anchor="middle">{_e(short)}'
                        f'<title>{_e(label)}</title></text>')
    if reference is not None:
        y = f.y(reference)
        body.append(f'<line x1="{f.l}" x2="{width - f.r}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="#111827" stroke-dasharray="4 3"><title>{reference:g}</title></line>')
    return _svg(width, height, "".join(body), title)


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
