"""Render a benchmark result as one self-contained HTML page.

No scripts, no stylesheets or fonts from elsewhere: charts are inline SVG, so
the file opens anywhere, offline, and can be mailed. Every string that came
from data (session ids, strategy names, paths) is escaped.

The page: the aggregate table; bar charts of cost relative to full resend
and of need coverage (all / long-range) per strategy; then one card per
session with prompt tokens per call for every strategy, and pager's layers
over time as a stacked area. Polylines are thinned to at most ``MAX_POINTS``
points (keeping each bucket's highest value, so peaks survive).
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from pager.replay.metrics import StrategySummary
from pager.replay.runner import BenchResult

__all__ = ["render"]

MAX_POINTS = 240
PALETTE = ("#6b7280", "#2563eb", "#d97706", "#7c3aed", "#059669", "#dc2626", "#0891b2",
           "#be185d", "#65a30d", "#9333ea")
LAYER_COLORS = {"l1": "#1d4ed8", "l2": "#60a5fa", "l3": "#f59e0b", "stubs": "#a3a3a3"}
LAYER_ORDER = ("l1", "l2", "l3", "stubs")
EXTRA_LAYER_COLORS = ("#10b981", "#ef4444", "#8b5cf6", "#14b8a6")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#111827;
background:#f9fafb}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#4b5563;margin-bottom:16px}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{padding:4px 9px;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap}
th{white-space:normal;max-width:90px;vertical-align:bottom}
th:first-child,td:first-child{text-align:left}th{background:#f3f4f6;font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:16px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:10px 12px}
.card h3{font-size:14px;margin:0 0 2px;word-break:break-all}
.card .sub{color:#6b7280;font-size:12px;margin-bottom:4px}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:6px 0 10px;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;
vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#374151}
.note{color:#6b7280;font-size:12px;max-width:900px}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


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


def _thin(xs: Sequence[float], ys: Sequence[float], limit: int = MAX_POINTS) -> tuple[list, list]:
    n = len(xs)
    if n <= limit:
        return list(xs), list(ys)
    out_x, out_y = [], []
    size = n / limit
    for b in range(limit):
        lo, hi = int(b * size), max(int((b + 1) * size), int(b * size) + 1)
        k = max(range(lo, min(hi, n)), key=lambda i: ys[i])
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


def _svg(width: int, height: int, body: str, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"><title>{_e(title)}</title>{body}</svg>')


def line_chart(series: Sequence[tuple[str, str, Sequence[float]]], *, width: int = 560,
               height: int = 230, x_label: str = "call", y_label: str = "prompt tokens",
               title: str = "") -> str:
    """Return an SVG line chart; ``series`` is ``(name, colour, ys)`` with x = 1, 2, ..."""
    xmax = max((len(ys) for _, _, ys in series), default=1)
    ymax = max((max(ys) for _, _, ys in series if len(ys)), default=1)
    f = _Frame(width, height, xmax, ymax)
    body = [f.axes(x_label, y_label)]
    for k, (name, color, ys) in enumerate(series):
        xs, ys2 = _thin(list(range(1, len(ys) + 1)), list(ys))
        if not xs:
            continue
        pts = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in zip(xs, ys2))
        # the first series (full resend) is dashed: others often run on top of it
        dash = ' stroke-dasharray="5 3"' if k == 0 and len(series) > 1 else ""
        body.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash} '
                    f'stroke-linejoin="round" points="{pts}"><title>{_e(name)}</title></polyline>')
    return _svg(width, height, "".join(body), title)


def stacked_area(layers: Sequence[Mapping[str, int] | None], *, width: int = 560,
                 height: int = 200, title: str = "") -> tuple[str, list[tuple[str, str]]]:
    """Return an SVG stacked area of tokens per layer per call, and its legend entries."""
    keys = [k for k in LAYER_ORDER if any(L and L.get(k) for L in layers)]
    keys += sorted({k for L in layers if L for k, v in L.items() if v and k not in keys})
    colors = {k: LAYER_COLORS.get(k, EXTRA_LAYER_COLORS[i % len(EXTRA_LAYER_COLORS)])
              for i, k in enumerate(keys)}
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
        body.append(f'<polygon fill="{colors[k]}" fill-opacity="0.85" stroke="none" '
                    f'points="{top} {bottom}"><title>{_e(k)}</title></polygon>')
        below = above
    return _svg(width, height, "".join(body), title), [(k, colors[k]) for k in keys]


def bar_chart(bars: Sequence[tuple[str, Sequence[tuple[float | None, str]]]], *,
              width: int = 560, y_label: str = "", title: str = "",
              reference: float | None = None, fmt: str = ".2f") -> str:
    """Return an SVG bar chart; each bar group is ``(label, [(value, colour), ...])``."""
    vals = [v for _, group in bars for v, _ in group if v is not None]
    ymax = max([*vals, reference or 0, 0.01])
    height = 250
    f = _Frame(width, height, 1, ymax * 1.12, bottom=60)
    body = [f.axes("", y_label, x_ticks=False)]
    n = max(len(bars), 1)
    slot = (width - f.l - f.r) / n
    for i, (label, group) in enumerate(bars):
        k = max(len(group), 1)
        bw = min(34.0, slot * 0.7 / k)
        x0 = f.l + slot * i + (slot - bw * k) / 2
        for j, (v, color) in enumerate(group):
            if v is None:
                continue
            x = x0 + j * bw
            y = f.y(v)
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" '
                        f'height="{f.y(0) - y:.1f}" fill="{color}"><title>{_e(label)}: '
                        f'{format(v, fmt)}</title></rect>')
            body.append(f'<text x="{x + (bw - 2) / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle">'
                        f'{format(v, fmt)}</text>')
        cx = f.l + slot * i + slot / 2
        short = label if len(label) <= 22 else label[:20] + "…"
        body.append(f'<text x="{cx:.1f}" y="{height - 44}" text-anchor="middle">{_e(short)}</text>')
    if reference is not None:
        y = f.y(reference)
        body.append(f'<line x1="{f.l}" x2="{width - f.r}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="#111827" stroke-dasharray="4 3"/>')
    return _svg(width, height, "".join(body), title)


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(
        f'<span><span class="sw" style="background:{c}"></span>{_e(n)}</span>' for n, c in items
    ) + "</div>"


def _fmt(v: float | None, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _summary_table(summary: Sequence[StrategySummary]) -> str:
    head = ("strategy", "cost / full", "coverage", "long-range coverage", "mean prompt / full",
            "mean prompt", "max prompt", "median prompt / completion", "growth", "violations",
            "latency p50 ms", "latency p99 ms")
    rows = []
    for s in summary:
        cells = (
            s.strategy + (f" ({s.errors} failed)" if s.errors else ""),
            _fmt(s.cost_vs_full, ".2f"), _fmt(s.coverage, ".3f"), _fmt(s.long_coverage, ".3f"),
            _fmt(s.mean_vs_full, ".2f"), f"{s.mean_prompt:,.0f}", f"{s.max_prompt:,}",
            _fmt(s.median_ratio, ".0f"), _fmt(s.growth, ".2f"), str(s.violations),
            _fmt(s.latency_p50_ms, ".2f"), _fmt(s.latency_p99_ms, ".2f"),
        )
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def render(result: BenchResult, *, title: str = "pager bench") -> str:
    """Return the HTML report of ``result`` as one string."""
    names = list(result.strategies)
    color = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    summ = {s.strategy: s for s in result.summary}
    calls = max((s.calls for s in result.summary), default=0)
    p = result.pricing
    out = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<div class="meta">{len(result.runs)} sessions, {calls:,} calls replayed open-loop; '
        f"pricing {_e(p.name)} (cached reads {p.read:g}x, writes {p.write:g}x base); "
        f"long-range = last seen {result.long_gap}+ messages before; "
        f"{result.seconds:.1f} s</div>",
        "<h2>Summary</h2>",
        _summary_table(result.summary),
        '<p class="note">Cost and mean prompt are relative to full resend, pooled over sessions. '
        "Coverage: share of the identifiers, paths and numbers the next assistant message used "
        "(and that appeared earlier) which were in the prompt built for it. Growth: mean prompt "
        "of a session's second half over its first half (median over sessions). "
        "Definitions: docs/metrics.md.</p>",
        '<div class="row"><div class="card"><h3>Cache-adjusted input cost, relative to full resend</h3>',
        bar_chart([(n, [(summ[n].cost_vs_full, color[n])]) for n in names],
                  y_label="cost / full", reference=1.0, title="cost relative to full resend"),
        '</div><div class="card"><h3>Need coverage</h3>',
        _legend([("all needs", "#2563eb"), ("long-range needs", "#f59e0b")]),
        bar_chart([(n, [(summ[n].coverage, "#2563eb"), (summ[n].long_coverage, "#f59e0b")])
                   for n in names], y_label="coverage", reference=1.0, fmt=".2f",
                  title="need coverage per strategy"),
        "</div></div>",
        "<h2>Prompt tokens per call, by session</h2>",
        _legend([(n, color[n]) for n in names]),
    ]
    layered = _layer_strategy(result)
    if layered:
        out.append(f'<p class="note">Stacked areas: tokens per layer of '
                   f"{_e(layered)}'s prompt on each call.</p>")
    out.append('<div class="row">')
    for r in result.runs:
        ms = result.metrics_for(r.id)
        series = [(n, color[n], [c.prompt_tokens for c in r.records[n]])
                  for n in names if n in r.records]
        sub = f"{r.source or 'unknown source'} · {r.assistant} assistant messages"
        if r.errors:
            sub += " · failed: " + ", ".join(f"{k} ({v})" for k, v in r.errors.items())
        figures = " · ".join(
            f"{n}: {_fmt(ms[n].cost_vs_full, '.2f')}" for n in names
            if n in ms and ms[n].error is None and n != names[0]
        )
        out.append(f'<div class="card"><h3>{_e(r.id)}</h3><div class="sub">{_e(sub)}</div>')
        if figures:
            out.append(f'<div class="sub">cost / full: {_e(figures)}</div>')
        out.append(line_chart(series, title=f"prompt tokens per call: {r.id}"))
        recs = r.records.get(layered) if layered else None
        if recs and any(c.layers for c in recs):
            svg, legend = stacked_area([c.layers for c in recs],
                                       title=f"{layered} layers: {r.id}")
            out.append(_legend(legend) + svg)
        out.append("</div>")
    out.append("</div>")
    if result.skipped:
        out.append("<h2>Skipped files</h2><ul>")
        out.extend(f"<li>{_e(p)}: {_e(why)}</li>" for p, why in result.skipped)
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def _layer_strategy(result: BenchResult) -> str | None:
    # the layer chart follows one pager strategy: "pager" if it ran, else the first with layers
    candidates = [n for n in result.strategies
                  if any(c.layers for r in result.runs for c in r.records.get(n, ()))]
    if "pager" in candidates:
        return "pager"
    return candidates[0] if candidates else None
