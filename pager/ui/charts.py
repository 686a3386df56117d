"""The session page's two pictures, as inline SVG and HTML: the call strip and the page map.

The strip has one stacked bar per call (L1, L2, recalled, stubs, tool
definitions, in the bench report's colours: ``pager.ui.palette.LAYER_COLORS``),
the watermarks, the budget and the window as lines (those off the scale are
named under it), a marker over every call that ran a demotion round and
one under every call whose prompt prefix was rewritten. Every bar is a link
to that call's prompt, focusable, with its figures on hover.

The page map has one block per page of the head branch, in history order,
as wide as the square root of its size, coloured by its state in the last
prompt; a stale file read is striped. Every block is a link to the page.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from pager.ui.palette import EXTRA_LAYER_COLORS, LAYER_COLORS, LAYER_NAMES, LAYER_ORDER
from pager.ui.source import polite

__all__ = ["STATE_COLORS", "STATE_NAMES", "page_map", "strip", "tip_of"]

# a page's state takes the colour of the layer it is shown in (dropped: grey)
STATE_COLORS = {"l1": LAYER_COLORS["l1"], "full": LAYER_COLORS["l2"], "recalled": LAYER_COLORS["l3"],
                "stubbed": LAYER_COLORS["stubs"], "indexed": "#e5e7eb", "card": LAYER_COLORS["l1"],
                "dropped": "#d1d5db", "unknown": "#f3f4f6"}
STATE_NAMES = {"l1": "L1 (pinned)", "full": "in full (L2)", "recalled": "recalled (L3)", "stubbed": "stubbed",
               "indexed": "dropped, listed in an index line", "card": "in the card (pin, note, handoff)",
               "dropped": "dropped", "unknown": "not in a layout (rollover mode, or no call yet)"}
ROUND = "#d97706"
REWRITE = "#dc2626"
BAR, GAP, HEIGHT, TOP, BOTTOM, LEFT = 10, 3, 190, 16, 22, 50


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _k(v: float) -> str:
    return f"{v / 1000:.0f}k" if v >= 10_000 else f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def tip_of(c: Mapping[str, Any]) -> str:
    """Return a call's bar tooltip, escaped (``View`` keeps it: a recorded call's figures do not change)."""
    return _e(_tip(c))


def _tip(c: Mapping[str, Any]) -> str:
    layers = c["layers"]
    parts = [f"call {c['call']}: {c['tokens']:,} of {c['budget']:,} tokens"]
    parts += [f"{LAYER_NAMES.get(k, k)} {layers.get(k, 0):,}" for k in [*LAYER_ORDER, *sorted(layers)]
              if k in layers and (k in LAYER_ORDER or layers[k])]
    parts.append(f"kept {c['kept']}, stubbed {c['stubbed']}, dropped {c['dropped']}, recalled {c['recalled']}")
    parts.append(f"round ({c['reason']})" if c["round"] else "no round")
    parts.append("prefix kept" if c["prefix_kept"] else f"prefix rewritten from message {c['changed_from']}")
    u = c.get("usage")
    if u:
        parts.append(f"usage: {u['cached_tokens']:,} cached, {u['cache_write_tokens']:,} written, "
                     f"{u['prompt_tokens'] - u['cached_tokens'] - u['cache_write_tokens']:,} uncached, "
                     f"{u['completion_tokens']:,} output")
    if c.get("cost"):
        parts.append(f"cost {c['cost']['cost']:,.0f} (full resend ~{c['cost']['full']:,.0f}) base tokens")
    return "\n".join(parts)


def strip(calls: Sequence[Mapping[str, Any]], window: int, sq: str) -> str:
    """Return the call strip (an SVG in a scrolling box) and its legend; ``sq`` is the session's query string."""
    if not calls:
        return '<p class="note" id="strip">No call recorded yet (calls appear here as they are made).</p>'
    top = max(max(c["tokens"], c["high"]) for c in calls) * 1.08
    lines = [("high watermark", "high", "#111827", "5 3"), ("low watermark", "low", "#6b7280", "2 3"),
             ("budget", "budget", REWRITE, "")]
    # layers beyond the five (rollover's handoff and notices): the bench report's extra colours, in order
    extra = sorted({k for c in calls for k, v in c["layers"].items() if v and k not in LAYER_ORDER})
    fill = {**LAYER_COLORS, **{k: EXTRA_LAYER_COLORS[i % len(EXTRA_LAYER_COLORS)] for i, k in enumerate(extra)}}
    width = LEFT + len(calls) * (BAR + GAP) + 8
    plot = HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot * (1 - min(v, top) / top)

    body = []
    step = 10 ** math.floor(math.log10(top / 4)) if top > 4 else 1
    step *= 1 if top / step <= 5 else 2 if top / step <= 10 else 5
    v = 0.0
    while v <= top:
        body.append(f'<line x1="{LEFT}" x2="{width}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eef0f3"/>'
                    f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{_k(v)}</text>')
        v += step
    for i, c in polite(enumerate(calls)):
        x = LEFT + i * (BAR + GAP)
        base = 0
        rects = []
        for k in [*LAYER_ORDER, *extra]:
            n = c["layers"].get(k, 0)
            if n <= 0:
                continue
            rects.append(f'<rect x="{x}" y="{y(base + n):.1f}" width="{BAR}" height="{y(base) - y(base + n):.1f}" '
                         f'fill="{fill[k]}"/>')
            base += n
        marks = ""
        if c["round"]:
            marks += (f'<path d="M{x},{TOP - 11} h{BAR} l-{BAR / 2},7 z" fill="{ROUND}" class="round"/>')
        if not c["prefix_kept"]:
            marks += f'<rect x="{x}" y="{HEIGHT - BOTTOM + 3}" width="{BAR}" height="4" fill="{REWRITE}" class="rewrite"/>'
        tip = c.get("tip") or tip_of(c)
        body.append(f'<a href="call?{sq}&amp;n={c["call"]}" class="bar" data-call="{c["call"]}" aria-label="call {c["call"]}">'
                    f'<title>{tip}</title><rect class="hit" x="{x - 1}" y="{TOP - 12}" width="{BAR + 2}" '
                    f'height="{plot + 24}" fill="transparent"/>{"".join(rects)}{marks}</a>')
    for name, key, color, dash in lines:
        pts = [(LEFT + i * (BAR + GAP), c[key]) for i, c in enumerate(calls) if c[key] <= top]
        if pts:
            d = " ".join(f"{'M' if j == 0 or pts[j - 1][0] != px - BAR - GAP else 'L'}{px},{y(v):.1f} h{BAR + GAP}"
                         for j, (px, v) in enumerate(pts))
            body.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5" '
                        f'stroke-dasharray="{dash}" class="line-{key}"><title>{_e(name)}</title></path>')
    off = [f"{n} {max(c[k] for c in calls):,}" for n, k, _c, _d in lines if all(c[k] > top for c in calls)]
    if window > top:
        off.append(f"window {window:,}")
    body.append(f'<text x="{LEFT}" y="{HEIGHT - 4}">call {calls[0]["call"]}</text>'
                f'<text x="{width - 4}" y="{HEIGHT - 4}" text-anchor="end">call {calls[-1]["call"]}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
           f'viewBox="0 0 {width} {HEIGHT}" role="group" aria-label="tokens per layer per call">'
           f'{"".join(body)}</svg>')
    legend = [(LAYER_NAMES.get(k, k), fill[k], "sw") for k in [*LAYER_ORDER, *extra]]
    legend += [("high / low watermark", "#111827", "sw dash"), ("budget", REWRITE, "sw line"),
               ("demotion round", ROUND, "sw tri"), ("prefix rewritten", REWRITE, "sw low")]
    note = f'<p class="note">Above the scale: {_e(", ".join(off))}.</p>' if off else ""
    return (f'<div id="strip"><div class="scroll strip" data-end="1">{svg}</div>{_legend(legend)}{note}</div>')


def _legend(items: Sequence[tuple[str, str, str]]) -> str:
    return '<div class="legend">' + "".join(
        f'<span><span class="{cls}" style="--c:{_e(color)}"></span>{_e(name)}</span>' for name, color, cls in items
    ) + "</div>"


def page_map(pages: Sequence[Mapping[str, Any]], sq: str) -> str:
    """Return the page map: one block per page, history order, coloured by state."""
    blocks = []
    for p in polite(pages, 64):
        w = max(6, min(64, round(math.sqrt(max(p["tokens"], 1)) * 1.3)))
        state = p["layer"] if p.get("layer") else p["state"]
        tip = (f"page {p['page']} · {p['kind']} · {p['tokens']:,} tokens · {STATE_NAMES.get(state, state)}"
               + (" · stale" if p["stale"] else "") + (f" · heat {p['heat']:.3f}" if p["heat"] is not None else "")
               + (f" · {p['handle']}" if p["handle"] else "") + (f" · {p['path']}" if p["path"] else ""))
        cls = "blk st-" + _e(state) + (" stale" if p["stale"] else "")
        blocks.append(f'<a href="page?{sq}&amp;id={p["page"]}" class="{cls}" style="width:{w}px" title="{_e(tip)}"></a>')
    legend = [(STATE_NAMES[s], STATE_COLORS[s], "sw") for s in ("l1", "full", "recalled", "stubbed", "dropped")]
    legend.append(("stale file read (striped)", "#9ca3af", "sw stale"))
    return f'<div id="map"><div class="pagemap">{"".join(blocks)}</div>{_legend(legend)}</div>'
