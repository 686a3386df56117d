"""Draw the benchmark report's charts as inline SVG: line charts, stacked areas, bar groups.

Each function returns one ``<svg>`` element, text only, with no script and
nothing loaded from elsewhere (``pager.lab.replay.html`` lays them out on the
page). Hovering a bar, or any point of a chart's time axis, shows the values
there (SVG ``<title>``). Polylines are thinned to at most ``MAX_POINTS``
points (keeping each bucket's highest value, so peaks survive); hover bands
follow the same buckets. Pager's layers take the colours of
``pager.ui.palette``. Every string that came from data is escaped (``escape``).
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from pager.ui.palette import EXTRA_LAYER_COLORS, LAYER_COLORS, LAYER_NAMES, LAYER_ORDER

__all__ = ["MAX_POINTS", "bar_chart", "escape", "line_chart", "stacked_area"]

MAX_POINTS = 240


def escape(text: Any) -> str:
    """Return ``text`` as HTML (and SVG) text or an attribute value: every markup character escaped."""
    return html.escape(str(text), quote=True)


_e = escape


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

