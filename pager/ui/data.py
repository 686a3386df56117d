"""The read-only queries behind ``pager ui``: sessions, calls, pages, prompts and search of one store.

``View`` answers every page and JSON endpoint of the app from a
``ReadOnlyStore`` and the store's report log (``ReportTail``). What a viewer
may see follows ``pager inspect``: everything without ``reader``; with
``reader`` (``--as SESSION``, ``--owner``) that session's own sessions in
full and of every other session only the pages ``pager.core.pools.can_read``
lets it read (no calls, no prompts). Search goes through the store's recall
index with the reader's audiences, as ``recall`` does.

A session's cost, in base input tokens beside full resend's, is priced by
``pager.ui.costs``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pager.core.messages import message_text
from pager.core.pools import Reader, audiences, can_read
from pager.errors import ConfigError
from pager.pricing import PRICING
from pager.ui.charts import tip_of
from pager.ui.costs import OUTPUT_PRICE, session_costs
from pager.ui.prompt import Mirror, heat, layout_of, slot_states
from pager.ui.source import ReadOnlyStore, ReportTail, polite

__all__ = ["COST_FACTOR", "MIN_INTERVAL", "OUTPUT_PRICE", "View", "open_view"]

# A changed store is queried again at most every MIN_INTERVAL seconds, and at most every COST_FACTOR
# times what the last answer took to compute: however many viewers poll, however fast the agents call
# and however long the sessions, the viewer's share of the process stays about 1/COST_FACTOR at most
# (rendering the answer costs about as much again). A view lags the store by that interval at most.
MIN_INTERVAL = 2.0
COST_FACTOR = 20.0
ASIDE_STATE = "card"  # pins, notes and handoffs: shown through the task-state card, in L1


class View:
    """Everything the viewer shows of one store; see the module docstring."""

    def __init__(self, store: Any, *, reader: str | None = None, owner: str | None = None,
                 pricing: str = "auto", usd_per_mtok: float = 3.0, min_interval: float = MIN_INTERVAL) -> None:
        if owner and not reader:
            raise ConfigError("--owner goes with --as SESSION (the session it was opened with)")
        if pricing != "auto" and pricing not in PRICING:
            raise ConfigError(f"pricing must be auto or one of {sorted(PRICING)}, not {pricing!r}")
        self.store = ReadOnlyStore(store)
        self.reader = Reader(reader, owner) if reader else None
        self.pricing, self.usd_per_mtok = pricing, usd_per_mtok
        self.tail = ReportTail(getattr(store, "path", None))
        self.calls: dict[str, dict[int, dict[str, Any]]] = {}  # session -> call number -> assemble record
        self._lock = threading.RLock()
        self._cache: tuple[str, list[dict[str, Any]]] | None = None
        self.min_interval = min_interval  # 0: every poll sees the store as it is (tests)
        self._at = 0.0  # when _cache was computed
        self._took = 0.0  # how long it took
        self._sessions_cache: dict[str, tuple[str, float, float, dict[str, Any]]] = {}  # tag, at, took, answer
        self._index: Any = None
        self._counter: Any = None
        self._parsed: dict[str, tuple[str | None, Any]] = {}  # session -> (options setting, Options)
        self._branches: dict[str, tuple[int, list[int], list[Any]]] = {}  # session -> (branch, ids, records)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        self.store.close()

    # -- following the store ---------------------------------------------------------------

    def refresh(self) -> str:
        """Read what was appended to the report log; return a tag that changes with the store."""
        with self._lock:
            for rec in self.tail.poll():
                calls = self.calls.setdefault(rec["session"], {})
                if rec.get("type") == "assemble" and isinstance(rec.get("call"), int):
                    calls[rec["call"]] = {**calls.get(rec["call"], {}), **rec}
                elif rec.get("type") == "usage" and isinstance(rec.get("call"), int):
                    keep = ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens")
                    calls.setdefault(rec["call"], {})["usage"] = {k: int(rec.get(k) or 0) for k in keep}
            mark = (self.store.max_page_id(), self.tail.stamp(), len(self.store.sessions()))
            return hashlib.blake2s(repr(mark).encode(), digest_size=8).hexdigest()

    def _options(self, session: str) -> Any:
        from pager.options import Options

        raw = self.store.setting(f"options:{session}")
        hit = self._parsed.get(session)
        if hit is not None and hit[0] == raw:
            return hit[1]  # building Options costs a millisecond: once per change of the setting
        try:
            o = Options.restore(orjson.loads(raw) if raw else {})  # as saved: never a wrong-mode error
        except (ConfigError, orjson.JSONDecodeError):
            o = Options()  # options of another pager version: the defaults still draw the lines
        self._parsed[session] = (raw, o)
        return o

    def _branch(self, session: str) -> list[Any]:
        """Return the records of the session's head branch, reading only the pages new since the last call.

        The summaries read tokens, times and scopes of every page of every
        session: kept here, a changed store costs one id query per session
        plus its new pages, not the whole store again.
        """
        branch = self.store.head(session)
        ids = self.store.branch_page_ids(branch)
        hit = self._branches.get(session)
        if hit is not None and hit[0] == branch and ids[: len(hit[1])] == hit[1]:
            recs = hit[2] + (self.store.load_pages(ids[len(hit[1]):]) if len(ids) > len(hit[1]) else [])
        else:
            recs = self.store.load_pages(ids)
        self._branches[session] = (branch, ids, recs)
        return recs

    def _own(self, session: str) -> bool:
        return self.reader is None or session == self.reader.session

    def _visible(self, rec: Any) -> bool:
        return self.reader is None or can_read(rec, self.reader, self._acls)

    # -- sessions ----------------------------------------------------------------------------

    def sessions(self) -> tuple[str, list[dict[str, Any]]]:
        """Return the store's tag and one summary per session the viewer may see."""
        with self._lock:
            now = time.monotonic()
            if self._cache is not None and now - self._at < self._interval(self._took):
                return self._cache
            tag = self.refresh()
            if self._cache is not None and self._cache[0] == tag:
                self._at = now
                return self._cache
            self._acls = self.store.pool_acls()
            out = [s for s in (self._summary(name) for name in polite(self.store.sessions(), 1)) if s is not None]
            self._cache, self._at, self._took = (tag, out), now, time.monotonic() - now
            return self._cache

    def _interval(self, took: float) -> float:
        return max(self.min_interval, COST_FACTOR * took) if self.min_interval else 0.0

    def _summary(self, session: str) -> dict[str, Any] | None:
        own = self._own(session)
        recs = self._branch(session)  # scopes as first read: the page map and page texts read them afresh
        visible = [r for r in recs if own or self._visible(r)]
        if not own and not visible:
            return None
        o = self._options(session)
        state = (self.store.load_state(session) or {}) if own else {}
        calls = self.calls.get(session, {}) if own else {}
        assembled = [calls[n] for n in sorted(calls) if "tokens" in calls[n]]
        last = assembled[-1] if assembled else None
        cost = session_costs(assembled, recs, self.pricing, self.usd_per_mtok) if own else None
        times = [r.created for r in visible if r.created] + [c["time"] for c in assembled if c.get("time")]
        return {
            "session": session, "own": own, "owner": o.owner or session, "scope": o.scope, "pool": o.pool,
            "mode": o.mode, "calls": int(state.get("calls", len(assembled))) if own else None,
            "pages": len(visible), "history_tokens": sum(r.tokens for r in visible),
            "prompt_tokens": last["tokens"] if last else _layout_tokens(state, recs),
            "budget": last["budget"] if last else o.budget,
            "window": o.context_window, "faults": int(state.get("faults", 0)) if own else None,
            "last_activity": max(times) if times else None, "cost": cost,
        }

    # -- one session -------------------------------------------------------------------------

    def _mirror(self, session: str) -> Mirror:
        if self._counter is None:
            from pager.core.tokens import default_counter

            self._counter = default_counter()
        return Mirror(self.store, session, self.store.head(session), self._counter)

    def session(self, session: str) -> dict[str, Any]:
        """Return one session's summary, its calls (own sessions) and its page map (computed at most once a tag)."""
        with self._lock:
            now = time.monotonic()
            hit = self._sessions_cache.get(session)
            if hit is not None and now - hit[1] < self._interval(hit[2]):
                return hit[3]  # recomputed too recently: the viewers see the store a moment late
            tag, _summaries = self.sessions()
            if hit is not None and hit[0] == tag:
                return hit[3]
            out = self._session(session)
            self._sessions_cache[session] = (tag, now, time.monotonic() - now, out)
            return out

    def _session(self, session: str) -> dict[str, Any]:
        tag, summaries = self.sessions()
        summary = next((s for s in summaries if s["session"] == session), None)
        if summary is None:
            raise KeyError(session)
        from pager.core.heat import get_policy

        o = self._options(session)
        records = self.store.load_pages(self.store.branch_page_ids(self.store.head(session)))
        own = summary["own"]
        state = (self.store.load_state(session) or {}) if own else {}
        slots = ((state.get("layout") or {}).get("slots")) or []
        states = slot_states(slots)
        try:
            heats = heat(records, get_policy(o.policy, **dict(o.policy_params)))
        except ConfigError:
            heats = [0.0] * len(records)
        pinned = next((i + 1 for i, r in enumerate(records) if r.role == "user"), 0)  # History.pinned_count
        pages = [_page_row(r, i, states.get(r.id, "dropped") if slots else "unknown", heats[i] if i < len(heats) else 0.0)
                 for i, r in polite(enumerate(records)) if own or self._visible(r)]
        for p in pages:
            if p["state"] == "full" and p["row"] is not None and p["row"] < pinned:
                p["layer"] = "l1"
        aside = self.store.load_pages(self.store.aside_pages(session))
        pages += [_page_row(r, None, ASIDE_STATE, None) for r in aside if own or self._visible(r)]
        calls = []
        for n, c in polite(sorted(self.calls.get(session, {}).items())) if own else ():
            if "tokens" not in c:
                continue
            layers = {k: int(v) for k, v in (c.get("layers") or {}).items()}
            calls.append({
                "call": n, "step": c.get("step"), "time": c.get("time"), "tokens": c["tokens"],
                "budget": c["budget"], "layers": layers, "round": bool(c.get("round")), "reason": c.get("reason"),
                "prefix_kept": bool(c.get("prefix_kept")), "changed_from": c.get("changed_from"),
                "high": min(c["budget"], layers.get("l1", 0) + o.high_watermark + layers.get("tools", 0)),
                "low": min(c["budget"], layers.get("l1", 0) + o.low_watermark + layers.get("tools", 0)),
                "kept": c.get("pages_kept"), "stubbed": c.get("pages_stubbed"), "dropped": c.get("pages_dropped"),
                "recalled": c.get("pages_recalled"), "faults": c.get("faults"), "usage": c.get("usage"),
                "cost": c.get("_cost"), "request_tokens": c.get("_request"), "elapsed_ms": c.get("elapsed_ms"),
                "messages_in": c.get("messages_in"), "messages_out": c.get("messages_out"),
                "layout": "layout" in c,
            })
            key = (n, c.get("usage") is not None)
            if c.get("_tip", (None,))[0] != key:  # kept on the record: its figures do not change once complete
                c["_tip"] = (key, tip_of(calls[-1]))  # type: ignore[index]
            calls[-1]["tip"] = c["_tip"][1]
        latest = int(state.get("calls", 0)) if own and slots else None
        return {"tag": tag, "summary": summary, "calls": calls, "latest": latest, "pages": pages, "window": o.context_window,
                "high_watermark": o.high_watermark, "low_watermark": o.low_watermark,
                "pins": self.store.pins(session) if own else [], "notes": self.store.notes(session) if own else []}

    def page(self, session: str, page_id: int) -> dict[str, Any]:
        """Return one page of ``session`` with its text (KeyError: not there, or not the viewer's to read)."""
        self.sessions()  # the ACLs, read once per store change
        recs = self.store.load_pages([page_id]) if 0 < page_id <= self.store.max_page_id() else []
        if not recs or recs[0].session != session or not (self._own(session) or self._visible(recs[0])):
            raise KeyError(page_id)
        rec = recs[0]
        _s, msg = self.store.message(rec.id)
        return {**_page_row(rec, None, None, None), "role": rec.role, "text": message_text(msg),
                "tool_calls": [(tc.get("function") or {}).get("name") for tc in msg.get("tool_calls") or ()
                               if isinstance(tc, Mapping)]}

    def call(self, session: str, call: int) -> dict[str, Any]:
        """Return call ``call``'s prompt (as the model got it) beside the client's request, each message marked."""
        if not self._own(session):
            raise KeyError(session)
        self.refresh()
        records = self.calls.get(session, {})
        rec = records.get(call)
        state = self.store.load_state(session) or {}
        slots_now = (state.get("layout") or {}).get("slots")
        if (rec is None or "tokens" not in rec) and slots_now and call == int(state.get("calls", 0)):
            # no report of it (a database server keeps no report log): the last prompt is in the session state
            o = self._options(session)
            rec = {"tokens": None, "budget": o.budget, "messages_in": int(state["layout"].get("upto", 0)),
                   "round": None, "prefix_kept": None, "from_state": True}
        if rec is None or "budget" not in rec:
            raise KeyError(call)
        from pager.core.heat import get_policy
        from pager.schedulers.paging import PagingScheduler

        mirror = self._mirror(session)
        found = layout_of(records, call)
        if found is None and slots_now and call == int(state.get("calls", 0)):
            found = (state["layout"]["slots"], state["layout"].get("card", ""))  # the last prompt: the state has it
        n_in = min(int(rec.get("messages_in", 0)), len(mirror.records))
        request = [_message_row(mirror.messages[i], mirror.records[i]) for i in range(n_in)]
        out: dict[str, Any] = {"call": call, "tokens": rec["tokens"], "budget": rec["budget"],
                               "from_state": bool(rec.get("from_state")),
                               "round": bool(rec.get("round")), "reason": rec.get("reason"),
                               "prefix_kept": bool(rec.get("prefix_kept")), "changed_from": rec.get("changed_from"),
                               "request": request, "prompt": None}
        if found is None:
            return out
        slots, card = found
        states = slot_states(slots)
        pinned = next((i + 1 for i, r in enumerate(mirror.records) if r.role == "user"), 0)
        for i, row in enumerate(request):
            row["state"] = states.get(row["page"], "dropped")
            if row["state"] == "full" and i < pinned:
                row["state"] = "l1"
        o = self._options(session)
        scheduler = PagingScheduler(o, self._counter, get_policy(o.policy, **dict(o.policy_params)))
        rendered = mirror.render(scheduler, slots, card)
        marks = slots if len(slots) == len(rendered) else [None] * len(rendered)
        l1 = set(mirror.ids[:pinned])
        out["prompt"] = [{"role": m.get("role"), "text": message_text(m),
                          "slot": ("l1" if s[0] == "full" and int(s[1]) in l1 else s[0]) if s else None,
                          "page": int(s[1]) if s and s[0] in ("full", "stub") else None,
                          "pages": [int(p) for p in s[2]] if s else [], "tokens": int(s[3]) if s else None}
                         for m, s in zip(rendered, marks)]
        return out

    # -- search --------------------------------------------------------------------------------

    def search(self, query: str, k: int = 20, *, shared: bool = False) -> list[dict[str, Any]]:
        """Search what the viewer may read through the recall index, best first."""
        _tag, summaries = self.sessions()
        if self._index is None:
            self._index = self.store.open_index()
        refresh = getattr(self._index, "refresh", None)
        if refresh is not None:
            refresh()  # commits of the processes that write the store
        if self.reader is not None:
            hits = self._index.search(query, session=self.reader.session, k=k, cross_session=shared,
                                      audiences=audiences(self.reader, self._acls))
        else:  # the operator's view: every session's own search, merged by score
            hits = [h for s in summaries for h in self._index.search(query, session=s["session"], k=k)]
            hits.sort(key=lambda h: -h.score)
        seen: set[int] = set()
        out = []
        recs = {r.id: r for r in self.store.load_pages(sorted({h.page_id for h in hits}))} if hits else {}
        for h in hits:
            rec = recs.get(h.page_id)
            if h.page_id in seen or rec is None or not (self._own(rec.session) or self._visible(rec)):
                continue  # checked on the stored page too, as recall does: the index may lag a scope change
            seen.add(h.page_id)
            out.append({"page": h.page_id, "session": h.session, "kind": h.kind, "score": round(h.score, 3),
                        "handle": h.handle, "path": h.path, "snippet": h.snippet, "step": h.step,
                        "scope": rec.scope, "owner": rec.owner, "pool": rec.pool})
        return out[:k]


def _layout_tokens(state: Mapping[str, Any], recs: Sequence[Any]) -> int | None:
    """Return the last prompt's history tokens from the layout in the session state (no report of it)."""
    slots = (state.get("layout") or {}).get("slots")
    if not slots:
        return None
    by_id = {r.id: r for r in recs}
    total = 0
    for kind, page, _pages, tokens, *_rest in slots:
        r = by_id.get(int(page))
        total += (r.tokens if kind == "full" else r.stub_tokens) if r is not None and kind in ("full", "stub") \
            else int(tokens)
    return total


def _page_row(r: Any, row: int | None, state: str | None, heat: float | None) -> dict[str, Any]:
    return {"page": r.id, "row": row, "kind": r.kind, "tokens": r.tokens, "stub_tokens": r.stub_tokens,
            "heat": None if heat is None else round(heat, 3), "state": state, "stale": bool(r.stale),
            "handle": r.handle, "path": r.path, "step": r.step, "refs": r.ref_count, "tool": r.tool_name,
            "scope": r.scope, "owner": r.owner, "pool": r.pool, "created": r.created}


def _message_row(msg: Mapping[str, Any], rec: Any) -> dict[str, Any]:
    return {"role": msg.get("role"), "text": message_text(msg), "page": rec.id, "kind": rec.kind,
            "tokens": rec.tokens, "handle": rec.handle, "state": None}


def open_view(store: Any, *, reader: str | None = None, owner: str | None = None, **kw: Any) -> View:
    """Return a ``View`` over the store ``store`` names (a folder or a ``postgresql://`` URL), read-only."""
    from pager.session import open_store

    opened = open_store(store, must_exist=True)
    try:
        return View(opened, reader=reader, owner=owner, **kw)
    except BaseException:
        opened.close()
        raise
