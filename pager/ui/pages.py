"""The viewer's HTML, rendered on the server from ``View``'s answers; every data string escaped here.

Page texts are the agent's and its tools' data and may be hostile HTML: every
value that came from the store goes through ``_e`` (``html.escape``), and the
page's Content-Security-Policy runs no script but the app's own file, so
even a missed escape could not run one. The fragments the live parts
replace (``sessions_rows``, ``session_live``) are the same functions the
full pages use.
"""

from __future__ import annotations

import functools
import html
import time
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from pager.ui.charts import STATE_NAMES, page_map, strip
from pager.ui.source import polite

__all__ = ["call_page", "page_page", "search_page", "session_live", "session_page", "sessions_page",
           "sessions_rows", "shell"]


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


@functools.lru_cache(maxsize=1024)
def sq(session: str) -> str:
    """Return the query string naming ``session`` (any name: quoted)."""
    return "s=" + quote(session, safe="")


def _n(v: Any) -> str:
    return "–" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.0f}"


def _ago(t: float | None, now: float) -> str:
    if not t:
        return "–"
    s = max(0.0, now - t)
    return (f"{s:.0f} s ago" if s < 90 else f"{s / 60:.0f} min ago" if s < 5400 else
            f"{s / 3600:.0f} h ago" if s < 172800 else time.strftime("%Y-%m-%d", time.gmtime(t)))


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else ""


def shell(title: str, store: str, viewer: str, body: str, *, page: str, live: str = "", crumbs: str = "") -> str:
    """Return a whole page around ``body``; ``live`` is the JSON endpoint the page polls (relative)."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} · pager</title>"
        '<link rel="stylesheet" href="static/ui.css"><script src="static/ui.js" defer></script></head>'
        f'<body data-page="{_e(page)}" data-live="{_e(live)}">'
        '<header><div class="top"><a class="brand" href="./">pager</a>'
        f'<span class="store" title="the store this view reads">{_e(store)}</span>'
        f'<span class="viewer" title="what this view may read">{_e(viewer)}</span>'
        '<span id="live" class="live" title="new calls appear as they are made" hidden>live</span></div>'
        '<form class="search" action="search" role="search"><input name="q" type="search" '
        'placeholder="search pages" aria-label="search the pages this view may read"></form>'
        f"{crumbs}</header><main>{body}</main></body></html>"
    )


# -- sessions -----------------------------------------------------------------------------

HEAD = ("session", "owner", "pool / scope", "calls", "history tokens", "prompt now", "cost so far",
        "full resend", "saving", "faults", "last activity")


def sessions_rows(sessions: Sequence[Mapping[str, Any]], now: float) -> str:
    """Return the table rows of the sessions page (what its polling replaces)."""
    rows = []
    for s in sessions:
        c = s.get("cost") or {}
        usd = c.get("usd_per_mtok", 0) / 1e6
        if c.get("calls_with_usage"):
            cost = f"${c['cost'] * usd:,.2f}" if usd else _n(c["cost"])
            full = f"${c['full'] * usd:,.2f}" if usd else _n(c["full"])
            tip = (f"{c['calls_with_usage']} calls with usage, priced as {c['pricing']} "
                   f"(base input ${c['usd_per_mtok']:g}/M): {c['cached']:,} cached, {c['uncached']:,} uncached, "
                   f"{c['cache_write']:,} written, {c['output']:,} output tokens; "
                   f"{c['cost']:,.0f} against ~{c['full']:,.0f} base tokens for full resend")
            saving = f"{c['saving']:.0%}" if c.get("saving") is not None else "–"
        else:
            cost = full = saving = "–"
            tip = "no usage recorded (observe) for this session" if s["own"] else "not this viewer's session"
        prompt = s["prompt_tokens"]
        ptip = f"{prompt:,} of a {s['budget']:,}-token budget, window {s['window']:,}" if prompt else ""
        share = min(100.0, 100.0 * prompt / s["budget"]) if prompt and s["budget"] else 0.0
        meter = f'<span class="meter"><span style="width:{share:.1f}%"></span></span>' if prompt else ""
        neg = ' class="neg"' if c.get("calls_with_usage") and (c.get("saving") or 0) < 0 else ""
        where = s["pool"] or s["scope"]
        rows.append(
            f'<tr tabindex="0" data-href="session?{sq(s["session"])}">'
            f'<td><a href="session?{sq(s["session"])}">{_e(s["session"])}</a></td><td>{_e(s["owner"])}</td>'
            f'<td>{_e(where)}</td><td>{_n(s["calls"])}</td>'
            f'<td title="{s["pages"]:,} pages">{_n(s["history_tokens"])}</td>'
            f'<td title="{_e(ptip)}">{_n(prompt)}{meter}</td><td title="{_e(tip)}">{cost}</td>'
            f'<td title="{_e(tip)}">{full}</td><td title="{_e(tip)}"{neg}>{saving}</td><td>{_n(s["faults"])}</td>'
            f'<td title="{_e(_when(s["last_activity"]))}">{_e(_ago(s["last_activity"], now))}</td></tr>'
        )
    if not rows:
        rows.append(f'<tr><td colspan="{len(HEAD)}">No session this view may read.</td></tr>')
    priced = [s["cost"] for s in sessions if s.get("cost") and s["cost"]["calls_with_usage"]]
    if len(sessions) > 1:
        cost = sum(c["cost"] for c in priced)
        full = sum(c["full"] for c in priced)
        usd = priced[0]["usd_per_mtok"] / 1e6 if priced else 0
        money = (lambda v: f"${v * usd:,.2f}") if usd else _n  # noqa: E731
        rows.append(
            f'<tr class="total"><td>all sessions</td><td></td><td></td>'
            f'<td>{_n(sum(s["calls"] or 0 for s in sessions))}</td>'
            f'<td>{_n(sum(s["history_tokens"] for s in sessions))}</td><td></td>'
            f'<td>{money(cost) if priced else "–"}</td><td>{money(full) if priced else "–"}</td>'
            f'<td>{f"{1 - cost / full:.0%}" if full else "–"}</td>'
            f'<td>{_n(sum(s["faults"] or 0 for s in sessions))}</td><td></td></tr>')
    return "".join(rows)


def sessions_page(sessions: Sequence[Mapping[str, Any]], now: float) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in HEAD)
    return (f'<h1>Sessions <span class="count">{len(sessions)}</span></h1>'
            '<p class="note">Every session of the store: what its history holds, what the last prompt '
            "held, and what it cost so far from the usage the provider reported, beside an estimate of the "
            "same calls resending the whole history. Hover a figure for its parts.</p>"
            f'<div class="scroll"><table id="sessions"><thead><tr>{head}</tr></thead>'
            f'<tbody id="rows">{sessions_rows(sessions, now)}</tbody></table></div>')


# -- one session --------------------------------------------------------------------------

def _figures(d: Mapping[str, Any]) -> str:
    s = d["summary"]
    c = s.get("cost") or {}
    items = [("calls", _n(s["calls"])), ("history", f"{_n(s['history_tokens'])} tokens"),
             ("prompt now", f"{_n(s['prompt_tokens'])} tokens"), ("faults", _n(s["faults"]))]
    if c.get("calls_with_usage"):
        items.append(("saving vs full resend", f"{c['saving']:.0%}" if c.get("saving") is not None else "–"))
    items.append(("last activity", _ago(s["last_activity"], time.time())))
    return '<dl class="figures">' + "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in items) + "</dl>"


def session_live(d: Mapping[str, Any], session: str) -> str:
    """Return the parts of a session page that change with new calls (what its polling replaces)."""
    pages = d["pages"]
    rows = []
    for p in polite(pages):
        state = p.get("layer") or p["state"]
        heat = "–" if p["heat"] is None else f"{p['heat']:.3f}"
        rows.append(
            f'<tr tabindex="0" data-href="page?{sq(session)}&amp;id={p["page"]}">'
            f'<td><a href="page?{sq(session)}&amp;id={p["page"]}">{p["page"]}</a></td><td>{_e(p["kind"])}</td>'
            f'<td title="{p["stub_tokens"]:,} as a stub">{p["tokens"]:,}</td>'
            f"<td>{heat}</td>"
            f'<td><span class="badge st-{_e(state)}">{_e(STATE_NAMES.get(state, state))}</span>'
            f'{" <span class=badge-stale>stale</span>" if p["stale"] else ""}</td>'
            f'<td class="mono">{_e(p["handle"] or "")}</td><td class="mono path">{_e(p["path"] or "")}</td></tr>')
    table = ('<div class="scroll"><table id="pages"><thead><tr><th>page</th><th>kind</th><th>tokens</th>'
             '<th title="the heat policy\'s score now (goal relevance left out)">heat</th><th>state</th>'
             f'<th>handle</th><th>path</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
    calls = d["calls"]
    return (f'<div id="live-part">{_figures(d)}<h2>Calls</h2>'
            '<p class="note">One bar per call: its prompt by layer. Select a bar for the prompt the model got '
            "beside the request the client sent.</p>"
            f'{_calls_part(d, session)}'
            f'<h2>Pages <span class="count">{len(pages)}</span></h2>'
            '<p class="note">Every page of the history in order, sized by tokens, coloured by its state in the '
            f"last prompt; select one for its text.</p>{page_map(pages, sq(session))}{table}</div>")


def _calls_part(d: Mapping[str, Any], session: str) -> str:
    if not d["summary"]["own"]:
        return '<p class="note">Calls are shown to the session itself only.</p>'
    if not d["calls"] and d.get("latest"):
        return (f'<p class="note" id="strip">No report of this session\'s calls is kept (a database server keeps '
                f'no report log; <code>log_reports=False</code> turns it off), so calls are counted, not drawn: '
                f'<a href="call?{sq(session)}&amp;n={d["latest"]}">the last prompt (call {d["latest"]})</a> is '
                "rebuilt from the session state.</p>")
    return strip(d["calls"], d["window"], sq(session))


def session_page(d: Mapping[str, Any], session: str) -> str:
    s = d["summary"]
    sub = f"owner {s['owner']} · {s['pool'] or s['scope']} · {s['mode']} mode · window {s['window']:,}"
    pins = "".join(f"<li>{_e(p)}</li>" for p in d["pins"])
    return (f'<h1 class="name">{_e(session)}</h1><p class="sub">{_e(sub)}</p>'
            + (f'<details><summary>pinned goals ({len(d["pins"])})</summary><ul>{pins}</ul></details>' if pins else "")
            + session_live(d, session) + '<aside id="panel" hidden tabindex="-1"></aside>')


# -- one call, one page, search -------------------------------------------------------------

SLOT_NAMES = {"l1": "L1 (pinned)", "full": "in full", "stub": "stub", "card": "task-state card", "recall": "recalled pages",
              "index": "index of dropped pages"}


def _msg(role: Any, text: str, badge: str, cls: str, tip: str, href: str | None) -> str:
    link = f' <a class="open" href="{href}">page</a>' if href else ""
    return (f'<li class="msg {cls}" title="{_e(tip)}"><div class="mh"><span class="role">{_e(role)}</span>'
            f'<span class="badge {cls}">{_e(badge)}</span>{link}</div><pre>{_e(text)}</pre></li>')


def call_page(d: Mapping[str, Any], session: str, last: int) -> str:
    n = d["call"]
    nav = "".join((
        f'<a href="call?{sq(session)}&amp;n={n - 1}" rel="prev">← call {n - 1}</a>' if n > 1 else "",
        f'<a href="session?{sq(session)}">session</a>',
        f'<a href="call?{sq(session)}&amp;n={n + 1}" rel="next">call {n + 1} →</a>' if n < last else ""))
    if d.get("from_state"):
        return (f'<h1>Call {n} <span class="count">{_e(session)}</span></h1><nav class="pn">{nav}</nav>'
                '<p class="sub">the last prompt, rebuilt from the session state (no report of this call is kept)</p>'
                + _columns(d, session))
    head = (f'<h1>Call {n} <span class="count">{_e(session)}</span></h1><nav class="pn">{nav}</nav>'
            f'<p class="sub">{d["tokens"]:,} of {d["budget"]:,} tokens · '
            f'{_e("round (" + d["reason"] + ")" if d["round"] else "no round")} · '
            f'{"prefix kept" if d["prefix_kept"] else "prefix rewritten from message " + str(d["changed_from"])}</p>')
    return head + _columns(d, session)


def _columns(d: Mapping[str, Any], session: str) -> str:
    req = []
    for m in d["request"]:
        state = m["state"] or "unknown"
        href = f"page?{sq(session)}&amp;id={m['page']}"
        req.append(_msg(m["role"], m["text"], STATE_NAMES.get(state, state), f"st-{state}",
                        f"page {m['page']} · {m['kind']} · {m['tokens']:,} tokens", href))
    if d["prompt"] is None:
        got = ('<p class="note">This call\'s prompt layout is not in the report log (rollover mode, a report '
               "log rotated away, or a pager that did not record it); the request is shown alone.</p>")
    else:
        items = []
        for m in d["prompt"]:
            slot = m["slot"] or "unknown"
            href = f"page?{sq(session)}&amp;id={m['page']}" if m["page"] else None
            tip = f"{SLOT_NAMES.get(slot, slot)}" + (f" · pages {', '.join(map(str, m['pages']))}" if m["pages"] else "")
            items.append(_msg(m["role"], m["text"], SLOT_NAMES.get(slot, slot), f"slot-{slot}", tip, href))
        got = f'<ol class="msgs">{"".join(items)}</ol>'
    counts: dict[str, int] = {}
    for m in d["request"]:
        counts[m["state"] or "unknown"] = counts.get(m["state"] or "unknown", 0) + 1
    summary = ", ".join(f"{v} {STATE_NAMES.get(k, k)}" for k, v in counts.items())
    return ('<div class="cols"><section><h2>The request the client sent '
            f'<span class="count">{len(d["request"])} messages</span></h2><p class="note">{_e(summary)}</p>'
            f'<ol class="msgs">{"".join(req)}</ol></section><section><h2>The prompt the model got '
            f'<span class="count">{len(d["prompt"] or [])} messages</span></h2>{got}</section></div>')


def page_page(p: Mapping[str, Any], session: str) -> str:
    facts = [("session", session), ("kind", p["kind"]), ("role", p["role"]), ("tokens", f"{p['tokens']:,}"),
             ("as a stub", f"{p['stub_tokens']:,}"), ("step", p["step"]), ("references", p["refs"]),
             ("handle", p["handle"]), ("path", p["path"]), ("tool", p["tool"]), ("scope", p["scope"]),
             ("owner", p["owner"]), ("pool", p["pool"]), ("stale", "yes" if p["stale"] else "no"),
             ("stored", _when(p["created"]))]
    dl = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts if v not in (None, ""))
    return (f'<h1>Page {p["page"]}</h1><p class="sub"><a href="session?{sq(session)}">{_e(session)}</a></p>'
            f'<dl class="facts">{dl}</dl><pre class="text" id="text">{_e(p["text"])}</pre>')


def search_page(query: str, hits: Sequence[Mapping[str, Any]], scope_note: str) -> str:
    items = []
    for h in hits:
        where = f"{h['session']} · {h['kind']} · step {h['step']} · score {h['score']}"
        extra = " · ".join(str(x) for x in (h["handle"], h["path"], h["pool"] and f"pool {h['pool']}") if x)
        items.append(f'<li tabindex="0" data-href="page?{sq(h["session"])}&amp;id={h["page"]}">'
                     f'<a href="page?{sq(h["session"])}&amp;id={h["page"]}">{_e(where)}</a>'
                     f'<div class="mono sub">{_e(extra)}</div><pre>{_e(h["snippet"])}</pre></li>')
    body = "".join(items) or "<li>Nothing found.</li>"
    return (f'<h1>Search</h1><form class="search big" action="search"><input name="q" type="search" '
            f'value="{_e(query)}" aria-label="search"></form><p class="note">{_e(scope_note)}</p>'
            f'<ol class="hits">{body}</ol>')
