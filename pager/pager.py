"""The facade: ``open()``, ``assemble()``, ``observe()`` and the agent tools.

This is the one module that orchestrates I/O: it validates the caller's
request, records what is new in the store (one transaction), feeds the recall
index, asks the heat policy and the recall index for their inputs, calls the
pure planner, renders its layout back into provider messages and writes a
report. Everything it decides is decided by the planner and the policy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from pager.core import pairing
from pager.errors import ConfigError, HandleError, InputError, PagerError, ToolError
from pager.formats import openai_chat
from pager.core import messages as messages_mod
from pager.core.heat import PageTable, get_policy
from pager.core.history import History, hash_messages
from pager.storage.index import IndexDoc, PageIndex
from pager.storage.indexing import feed_index
from pager.options import Options, load_config
from pager.core.handoff import parse_handoff
from pager.core.plan import CARD, FULL, RECALL, STUB, Layout, PlanConfig, PlanInput, plan
from pager.schedulers.recall import recall_candidates
from pager.core.render import card_text, line_range, recall_block, stub_text
from pager.report import Report, ReportLog
from pager.schedulers.rollover import RolloverController, task_state as _task_state
from pager.statefiles import TaskState
from pager.storage.sqlite import Store
from pager.core.terms import extract_terms
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter, content_text, default_counter
from pager.formats.usage import parse_usage
from pager import tools as agent_tools

__all__ = ["Pager", "open", "store_sessions"]

# Commit the recall index every this many new pages (and before any search
# that could need them); the store is the source of truth, so a crash only
# means the index catches up on the next open.
_INDEX_COMMIT_EVERY = 64


def store_sessions(path: str | os.PathLike[str]) -> list[str]:
    """Return the session names recorded in the store at ``path`` (oldest first)."""
    if not (Path(path) / "pager.db").exists():
        raise ConfigError(f"{path} holds no pager store (no pager.db)")
    store = Store(path)
    try:
        return store.sessions()
    finally:
        store.close()


def open(  # noqa: A001 - the public verb is open(), like shelve.open
    path: str | os.PathLike[str],
    session: str = "default",
    context_window: int | None = None,
    *,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    counter: TokenCounter | None = None,
    **options: Any,
) -> "Pager":
    """Open (creating if needed) the store in folder ``path`` and a session in it.

    ``context_window`` is the model's window in tokens. ``config`` is a JSON
    file (as ``pager tune --write`` makes) or a mapping of options; keyword
    options override it. A reopened session keeps the options it was last
    opened with unless new ones are given.
    """
    return Pager(path, session, context_window, config=config, counter=counter, **options)


class Pager:
    """A scheduling session over a durable store. Use ``pager.open``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        session: str,
        context_window: int | None,
        *,
        config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        counter: TokenCounter | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(session, str) or not session:
            raise ConfigError("session must be a non-empty string")
        self.path = Path(path)
        self.session = session
        self.store = Store(self.path)
        self.index: PageIndex | None = None
        try:
            self._setup(session, context_window, config, counter, options)
        except BaseException:
            # a bad option or a broken index must not leave the store open
            if self.index is not None:
                self.index.close()
            self.store.close()
            raise

    def _setup(
        self,
        session: str,
        context_window: int | None,
        config: str | os.PathLike[str] | Mapping[str, Any] | None,
        counter: TokenCounter | None,
        options: dict[str, Any],
    ) -> None:
        saved = self.store.setting(f"options:{session}")
        base = orjson.loads(saved) if saved and config is None and not options else {}
        base.update(load_config(config))
        policy = options.get("policy")
        if policy is not None and not isinstance(policy, str):
            # a policy class or instance: schedule with it, persist its registry name and params
            instance = get_policy(policy)
            options["policy"] = instance.name
            options["policy_params"] = {**instance.params(), **dict(options.get("policy_params") or {})}
        self.options = Options.build(base, context_window=context_window, **options)
        # validate the policy before persisting: a bad option must not poison later reopens
        self.policy = get_policy(self.options.policy, **dict(self.options.policy_params))
        self.store.set_setting(f"options:{session}", orjson.dumps(self.options.to_dict()).decode())
        self.counter = counter or default_counter()
        self.reports = ReportLog(self.path, enabled=self.options.log_reports)
        self.last_report: Report | None = None
        self._calls = 0
        self._faults = 0
        self._recall_hits = 0
        self._recall_useful = 0
        self._expanded = 0
        self._handles: set[str] = set()
        self._demoted: set[int] = set()
        self._recalled_pending: set[int] = set()
        self._tools_tokens: dict[bytes, int] = {}
        self._prev_out: list[Mapping[str, Any]] | None = None  # the last prompt's messages
        self._closed = False
        self.index = self._open_index()
        self.history = History(session, self.counter)
        self._ident: list[tuple[Any, Any, Any]] = []  # (message, content, tool_calls) per recorded row
        self._load()
        # rollover mode: the window controller stands in for the paging planner
        self._rollover: RolloverController | None = (
            RolloverController(self.options, self.counter, self.store, session)
            if self.options.mode == "rollover" else None
        )

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> "Pager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush the recall index and close the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            # counters changed by expand/search since the last assemble
            self.store.save_state(self.session, self._state(self._layout))
            self._flush_index()
        finally:
            self.index.close()
            self.store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PagerError("this pager is closed")

    # -- loading and the index ----------------------------------------------------------

    def _open_index(self) -> PageIndex:
        index = PageIndex(self.path / "index")
        # the index is derived: bring it up to date with the store (it may be
        # missing, or behind after a crash between the two commits)
        upto = index.indexed_upto()
        if upto < self.store.max_page_id():
            self._feed_index(index, upto)
        self._pending_index = 0
        return index

    def _feed_index(self, index: PageIndex, after: int) -> None:
        feed_index(self.store, index, after)

    def reindex(self) -> int:
        """Rebuild the recall index from the store outright; return the pages indexed."""
        self._check_open()
        self._flush_index()  # pending adds would otherwise outlive the clear
        self.index.clear()
        self._feed_index(self.index, 0)
        return len(self.index)

    def _flush_index(self) -> None:
        if self._pending_index:
            self.index.commit(upto_page_id=self.store.max_page_id())
            self._pending_index = 0

    def _load(self) -> None:
        branch = self.store.ensure_session(self.session)
        ids = self.store.branch_page_ids(branch)
        rows = self.store.load_pages(ids)
        msgs = (self.store.message(pid)[1] for pid in ids)
        self.history.load(zip(rows, msgs), branch)
        state = self.store.load_state(self.session) or {}
        self._layout = Layout.from_state(state.get("layout"))
        # pins and notes change only through this object: read them once, not per call
        self._pins = self.store.pins(self.session)
        self._notes = self.store.notes(self.session)
        self._pin_terms = frozenset().union(*(extract_terms(p) for p in self._pins))
        self._demoted = set(state.get("demoted", ()))
        self._faults = int(state.get("faults", 0))
        self._calls = int(state.get("calls", 0))

    def _state(self, layout: Layout | None) -> dict[str, Any]:
        return {
            "layout": layout.to_state() if layout else None,
            "demoted": sorted(self._demoted),
            "faults": self._faults,
            "calls": self._calls,
        }

    # -- recording ----------------------------------------------------------------------

    def _same_prefix(self, messages: Sequence[Any]) -> int:
        """Return how many leading messages are the same objects as recorded rows.

        Harnesses append to one list of dicts, so on each call all but the new
        messages are the very objects seen before. Identity of the message and
        of its ``content`` and ``tool_calls`` stands in for re-hashing them
        (strings are immutable; an edit replaces one of these objects). A
        message mutated deep inside in place (a tool call's arguments edited
        in the same dict) is not detected: replace the message to edit it.
        """
        ident = self._ident
        lim = min(len(ident), len(self.history.hash), len(messages))
        k = 0
        while k < lim:
            m = messages[k]
            e = ident[k]
            if e[0] is not m:  # the same object was a validated mapping when recorded
                break
            if e[1] is not m.get("content") or e[2] is not m.get("tool_calls"):
                break
            k += 1
        return k

    def _record(self, messages: Sequence[Mapping[str, Any]], known: int = 0) -> int:
        """Record what is new in ``messages``; return how many pages were added."""
        h = self.history
        new_hashes, raws = hash_messages(messages[known:], offset=known)
        hashes = h.hash[:known] + new_hashes
        raws = [None] * known + raws
        common = 0
        limit = min(len(h.hash), len(hashes))
        while common < limit and h.hash[common] == hashes[common]:
            common += 1
        fork: tuple[int, int] | None = None
        if common < len(h.hash):
            # the caller's history diverged from the recorded one: a new branch
            fork = (h.branch, common)
            h.truncate(common)
        del self._ident[common:]
        self._ident.extend((m, m.get("content"), m.get("tool_calls")) for m in messages[len(self._ident):])
        if common == len(hashes) and fork is None:
            return 0
        classified = messages_mod.classify(messages, common, h.calls)
        for msg in messages[common:]:
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                h.calls[call["id"]] = (str(fn.get("name", "")), str(fn.get("arguments", "")))
        records = h.prepare(messages, common, classified, hashes, raws)
        for rec in records:
            rec["scope"] = self.options.scope
        # stat updates need page ids, which the store assigns; two passes keep
        # it one transaction: ids first, then the mirror computes the updates
        branch, ids = self.store.record(self.session, h.branch, fork, common, records)
        h.branch = branch
        updates = h.append(records, ids)
        self.store.update_stats(updates)
        # a recalled page referred to by the new messages was a useful recall
        for pid, _lr, _rc, _st in updates:
            if pid in self._recalled_pending:
                self._recall_useful += 1
        self._recalled_pending.clear()
        docs = [
            IndexDoc(
                page_id=pid, session=self.session, step=rec["step"], kind=rec["kind"], text=rec["text"],
                path=rec["path"], handle=rec["handle"], labels=rec["labels"], scope=rec["scope"],
            )
            for rec, pid in zip(records, ids)
        ]
        if docs:
            self.index.add(docs)
            self._pending_index += len(docs)
            if self._pending_index >= _INDEX_COMMIT_EVERY:
                self._flush_index()
        return len(records)

    # -- assemble -----------------------------------------------------------------------

    def assemble(self, request: Mapping[str, Any], *, expose_tools: bool | None = None) -> dict[str, Any]:
        """Return ``request`` with ``messages`` rewritten to fit the budget.

        ``request['messages']`` is the caller's whole history. What is new since
        the last call is recorded; other keys pass through untouched (pager's
        tools are appended to ``tools`` when ``expose_tools``).
        """
        self._check_open()
        t0 = time.perf_counter()
        if not isinstance(request, Mapping):
            raise InputError(f"request must be a mapping, got {type(request).__name__}")
        if "messages" not in request:
            raise InputError("request has no 'messages'")
        messages = request["messages"]
        if not isinstance(messages, (list, tuple)):
            raise InputError(f"request['messages'] must be a list, got {type(messages).__name__}")
        # messages the caller passed last time, as the very same objects, were
        # validated and hashed then: start after them (see _same_prefix)
        known = self._same_prefix(messages)
        h = self.history
        openai_chat.validate(
            messages, check_encoding=False, start=known,
            open_calls=h.open_calls_at(known) if known else None,
            known_calls=h.call_rows if known else None,
        )
        new_pages = self._record(messages, known)
        expose = self.options.expose_tools if expose_tools is None else expose_tools
        out = dict(request)
        tools = list(request.get("tools") or ())
        if expose:
            names = {(t.get("function") or {}).get("name") for t in tools if isinstance(t, Mapping)}
            tools.extend(t for t in self.tools() if t["function"]["name"] not in names)
            out["tools"] = tools
        if self._rollover is not None:
            return self._assemble_rollover(out, messages, tools, new_pages, t0)
        tools_tokens = self._count_tools(tools)
        self._calls += 1
        result = self._schedule(messages, tools_tokens)
        out["messages"] = result["messages"]
        elapsed = (time.perf_counter() - t0) * 1000.0
        report = self._make_report(result, len(messages), new_pages, elapsed, tools_tokens)
        self.last_report = report
        self.reports.append({"type": "assemble", **report.to_dict()})
        return out

    def _assemble_rollover(
        self, out: dict[str, Any], messages: Sequence[Mapping[str, Any]], tools: list[Any],
        new_pages: int, t0: float,
    ) -> dict[str, Any]:
        """Build a rollover-mode prompt (see pager/rollover.py) and report it like a paging one."""
        assert self._rollover is not None
        res = self._rollover.assemble(
            self.history, messages, tools, self._pins, self._notes
        )
        out["messages"] = res.messages
        if res.tools is not None:  # the fallback step: only new_context stays callable
            out["tools"] = res.tools
        self._handles.update(res.handles)
        self._demoted.update(res.demoted)
        self._calls += 1
        self.store.save_state(self.session, self._state(None))
        report = Report(
            session=self.session, call=self._calls, step=self.history.clock,
            messages_in=len(messages), messages_out=len(res.messages), tokens=res.tokens,
            budget=res.budget, layers=res.layers, pages_kept=res.pages_kept,
            pages_stubbed=res.pages_stubbed, pages_dropped=res.pages_dropped, pages_recalled=0,
            handles_issued=len(self._handles), new_pages=new_pages, round=res.round,
            reason=res.reason, prefix_kept=res.changed_from is None, changed_from=res.changed_from,
            faults=self._faults, elapsed_ms=round((time.perf_counter() - t0) * 1000.0, 3),
            mode="rollover", notices=res.notices,
        )
        self.last_report = report
        self.reports.append({"type": "assemble", **report.to_dict()})
        return out

    def _count_tools(self, tools: Sequence[Any]) -> int:
        if not tools:
            return 0
        raw = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)
        n = self._tools_tokens.get(raw)
        if n is None:
            n = self.counter.count(raw.decode())
            self._tools_tokens[raw] = n
        return n

    def _card(self) -> str:
        keep = self._notes[-self.options.max_notes :] if self.options.max_notes else []
        return card_text(self._pins, keep)

    def _focus_terms(self) -> frozenset[str]:
        """Return the active task's terms: pinned goals and the latest user message but the first."""
        h = self.history
        task = h.task  # the latest user message's row
        if task and task != h.first_user and task < len(h) and h.kind[task] == "user":
            return self._pin_terms | h.terms[task]
        return self._pin_terms

    def _recall_candidates(self, shown: set[int]) -> tuple[list[tuple[int, int]], dict[int, tuple[int, int]]]:
        """Return recall candidates ``(page id, rendered tokens)`` and the lines to show of each."""
        if not self.options.recall_pages or not len(self.history):
            return [], {}
        # no index flush here: a tantivy commit costs ~100 ms, and pages not yet
        # committed are the newest ones, which are in the prompt anyway
        return recall_candidates(
            self.history, self.index, self.options, self.session, shown, self._page_text, self.counter
        )

    def _page_text(self, page_id: int) -> str:
        return messages_mod.message_text(self.store.message(page_id)[1])

    def _schedule(self, messages: Sequence[Mapping[str, Any]], tools_tokens: int) -> dict[str, Any]:
        o = self.options
        h = self.history
        cols = h.columns()
        n = len(h)
        pinned = np.zeros(n, dtype=bool)
        pinned[: h.pinned_count()] = True
        card = self._card()
        card_tokens = MESSAGE_OVERHEAD + self.counter.count(card) if card else 0
        focus = self._focus_terms()
        relevance = h.term_index.relevance(cols["page"], focus) if focus else np.zeros(n)
        table = PageTable(
            page_id=cols["page"], created=cols["created"], last_ref=cols["last_ref"],
            ref_count=cols["ref_count"], tokens=cols["tokens"], kind=cols["kind"], stale=cols["stale"],
            relevance=relevance,
        )
        heat = self.policy.score(table, h.clock) if n else np.zeros(0)
        budget = o.budget - tools_tokens
        l1 = int(cols["tokens"][pinned].sum()) + card_tokens
        shown_prev = {s.page for s in (self._layout.slots if self._layout else ()) if s.kind == FULL}
        recall, spans = self._recall_candidates(shown_prev)
        cfg = PlanConfig(
            budget=budget,
            high=min(budget, l1 + o.high_watermark),
            low=min(budget, l1 + o.low_watermark),
            recent_units=o.recent_units,
            stub_threshold=o.stub_threshold,
            inline_max=o.inline_max,
            recall_pages=o.recall_pages,
            recall_tokens=o.recall_tokens,
            old_share=o.old_share,
        )
        inp = PlanInput(
            page=cols["page"], tokens=cols["tokens"], stub_tokens=cols["stub_tokens"],
            unit=cols["unit"],
            pinned=pinned, tool=cols["tool"], heat=heat, card_tokens=card_tokens, card=card,
            recall=recall, recall_spans=spans, branch=h.branch,
        )
        prev = self._layout
        result = plan(inp, cfg, prev)
        layout = result.layout
        # what the round demoted, and faults: demoted pages brought back
        shown_now = {s.page for s in layout.slots if s.kind == FULL}
        if prev is not None:
            # a page shown in full last time and not now was demoted (by a
            # round, or a big output stubbed at the tail)
            before = {s.page for s in prev.slots if s.kind == FULL}
            self._demoted |= before - shown_now
        if result.round:
            # rounds are rare; commit now so what was just demoted is recallable
            self._flush_index()
        for pid in result.recalled:
            if pid in self._demoted:
                self._faults += 1
            self._recall_hits += 1
            self._recalled_pending.add(pid)
        rendered = self._render(layout, messages)
        changed_from = (
            _first_diff(self._prev_out, rendered)
            if self._prev_out is not None
            else _first_change(prev, layout, h.pinned_count())
        )
        self._prev_out = rendered
        self._layout = layout
        self.store.save_state(self.session, self._state(layout))
        return {
            "messages": rendered,
            "plan": result,
            "layout": layout,
            "changed_from": changed_from,
            "budget": budget,
            "card_tokens": card_tokens,
        }

    def _render(self, layout: Layout, messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        h = self.history
        out: list[Mapping[str, Any]] = []
        for slot in layout.slots:
            if slot.kind == FULL:
                out.append(messages[h.row_of[slot.page]])
            elif slot.kind == STUB:
                r = h.row_of[slot.page]
                msg = messages[r]
                body = content_text(msg.get("content"))
                self._handles.add(h.handle[r])
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": msg["tool_call_id"],
                        "content": stub_text(body, h.tokens[r], h.handle[r], path=h.path[r]),
                    }
                )
            elif slot.kind == CARD:
                out.append({"role": "user", "content": layout.card})
            elif slot.kind == RECALL:
                out.append({"role": "user", "content": self._recall_text(slot, messages)})
        return pairing.normalize(out)

    def _recall_text(self, slot: Any, messages: Sequence[Mapping[str, Any]]) -> str:
        h = self.history
        items = []
        spans = slot.spans or ((0, 0),) * len(slot.pages)
        for pid, (start, end) in zip(slot.pages, spans):
            r = h.row_of.get(pid)
            if r is None:
                continue
            text = messages_mod.message_text(messages[r])
            excerpt = line_range(text, start, end) if start else text
            items.append(
                {
                    "handle": h.handle[r], "step": h.step[r], "kind": h.kind[r], "path": h.path[r],
                    "lines": (start, end) if start else None, "text": excerpt.rstrip("\n"),
                    "truncated": len(excerpt) < len(text),
                }
            )
            self._handles.add(h.handle[r])
        return recall_block(items)

    def _make_report(
        self, result: dict[str, Any], n_in: int, new_pages: int, elapsed: float, tools_tokens: int
    ) -> Report:
        layout: Layout = result["layout"]
        h = self.history
        pinned = set(h.page[: h.pinned_count()])
        layers = {"l1": result["card_tokens"], "l2": 0, "stubs": 0, "l3": 0, "tools": tools_tokens}
        kept = stubbed = 0
        for slot in layout.slots:
            if slot.kind == FULL:
                r = h.row_of[slot.page]
                layers["l1" if slot.page in pinned else "l2"] += h.tokens[r]
                kept += 1
            elif slot.kind == STUB:
                layers["stubs"] += h.stub_tokens[h.row_of[slot.page]]
                stubbed += 1
            elif slot.kind == RECALL:
                layers["l3"] += slot.tokens
        plan_ = result["plan"]
        return Report(
            session=self.session,
            call=self._calls,
            step=h.clock,
            messages_in=n_in,
            messages_out=len(result["messages"]),
            tokens=plan_.tokens + tools_tokens,
            budget=result["budget"] + tools_tokens,
            layers=layers,
            pages_kept=kept,
            pages_stubbed=stubbed,
            pages_dropped=len(h) - kept - stubbed,
            pages_recalled=len(plan_.recalled),
            handles_issued=len(self._handles),
            new_pages=new_pages,
            round=plan_.round,
            reason=plan_.reason,
            prefix_kept=result["changed_from"] is None,
            changed_from=result["changed_from"],
            faults=self._faults,
            recall_hits=self._recall_hits,
            recall_precision=(round(self._recall_useful / self._recall_hits, 4) if self._recall_hits else None),
            elapsed_ms=round(elapsed, 3),
            mode=self.options.mode,
        )

    # -- usage --------------------------------------------------------------------------

    def observe(self, response: Any) -> dict[str, int]:
        """Record a provider response's usage (prompt, completion and cached tokens).

        Accepts an OpenAI or Anthropic response (SDK object or dict) or a bare
        usage mapping; returns the normalised figures, also logged.
        """
        self._check_open()
        figures = parse_usage(response).to_dict()
        self.reports.append({"type": "usage", "session": self.session, "call": self._calls, **figures})
        return figures

    # -- pins, notes, handles -------------------------------------------------------------

    def pin(self, text: str) -> None:
        """Pin a goal into L1 (the task-state card) for every later prompt."""
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise InputError("pin text must be a non-empty string")
        self.store.add_pin(self.session, text.strip())
        self._pins.append(text.strip())
        self._pin_terms = self._pin_terms | extract_terms(text)

    def pins(self) -> list[str]:
        """Return the pinned goals, oldest first."""
        return list(self._pins)

    def note(self, text: str) -> int:
        """Keep a short note in the task-state card; return how many notes the card shows."""
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise InputError("note text must be a non-empty string")
        text = text.strip()[: agent_tools.NOTE_MAX_CHARS]
        self.store.add_note(self.session, text, self.history.clock)
        self._notes.append(text)
        return min(len(self._notes), self.options.max_notes)

    def notes(self) -> list[str]:
        """Return every note of the session, oldest first."""
        return list(self._notes)

    def _resolve(self, handle: str) -> int:
        if not isinstance(handle, str) or not handle.startswith("pg:"):
            raise HandleError(f"{handle!r} is not a pager handle (they look like pg:12-a1b2c3)")
        pid = self.store.page_by_handle(self.session, handle)
        if pid is None:
            raise HandleError(f"unknown handle {handle!r} in session {self.session!r}")
        return pid

    def expand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Return the original text behind ``handle`` (optionally lines start..end, 1-based)."""
        self._check_open()
        pid = self._resolve(handle)
        session, msg = self.store.message(pid)
        if session != self.session:  # pragma: no cover - _resolve filters by session
            raise HandleError(f"handle {handle!r} belongs to another session")
        for name, v in (("start_line", start_line), ("end_line", end_line)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ToolError(f"{name} must be a positive integer, got {v!r}")
        if pid in self._demoted:
            self._faults += 1
        self._expanded += 1
        return line_range(messages_mod.message_text(msg), start_line, end_line)

    def search(self, query: str, k: int = 5, *, cross_session: bool = False) -> list[Any]:
        """Search this session's history; return index hits, best first.

        With ``cross_session=True`` pages other sessions recorded with
        ``scope="shared"`` are searched too, each hit naming its session;
        ``session`` and ``private`` pages never leave their session.
        """
        self._check_open()
        self._flush_index()
        hits = self.index.search(query, session=self.session, k=k, cross_session=cross_session)
        for hit in hits:
            if hit.page_id in self._demoted:
                self._faults += 1
        return hits

    # -- agent tools --------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """Return the agent tools (OpenAI function-tool JSON) this session offers."""
        return agent_tools.tool_specs(self.options)

    def call_tool(self, tool_call: Any) -> dict[str, Any]:
        """Execute one pager tool call; return the tool message answering it.

        Bad arguments, unknown handles and the like come back as an error
        result the model can read, never as an exception in the harness.
        """
        self._check_open()
        try:
            blocked = self.intercept(tool_call)
        except ToolError:
            blocked = None  # no call id: agent_tools.call answers it with an error
        if blocked is not None:
            return blocked
        return agent_tools.call(self, tool_call)

    def intercept(self, tool_call: Any) -> dict[str, Any] | None:
        """Return the error result for a tool call the budget forbids now, else None.

        Harnesses call it before running any of their own tools. In rollover
        mode's fallback step only ``new_context`` may run: any other call gets
        this result (answer the model with it) instead of running. Outside
        that step, and in paging mode, it returns None. Raises ``ToolError``
        for a call without an id.
        """
        self._check_open()
        if self._rollover is None:
            return None
        if hasattr(tool_call, "model_dump"):
            tool_call = tool_call.model_dump()
        return self._rollover.intercept(tool_call)

    def declare_rollover(self, args: Mapping[str, Any], cid: str) -> str:
        """Record a ``new_context`` handoff as the pending switch; return the confirmation.

        Phase one of two: the window switches at the next ``assemble`` at a
        step boundary. Raises ``ToolError`` (an error result through
        ``call_tool``) for a malformed handoff or a related file outside the
        workspace.
        """
        self._check_open()
        if self._rollover is None:
            raise ToolError("new_context is only offered in rollover mode")
        return self._rollover.declare(parse_handoff(args, self._rollover.workspace), cid)

    def task_state(self) -> TaskState:
        """Return the task-state card: goal, invariants, next step, notes (``pager state export``)."""
        self._check_open()
        return _task_state(self)

    # -- introspection ------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Return session counters: pages, faults, recall hits and precision, handles."""
        return {
            "session": self.session,
            "pages": len(self.history),
            "calls": self._calls,
            "faults": self._faults,
            "recall_hits": self._recall_hits,
            "recall_useful": self._recall_useful,
            "recall_precision": (self._recall_useful / self._recall_hits) if self._recall_hits else None,
            "handles_issued": len(self._handles),
            "expanded": self._expanded,
            "demoted": len(self._demoted),
        }


def _first_diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> int | None:
    """Return the index of the first message of ``new`` that differs from ``old`` (None if ``new`` extends it)."""
    for i, (a, b) in enumerate(zip(old, new)):
        if a is not b and a != b:
            return i
    return len(new) if len(new) < len(old) else None


def _first_change(prev: Layout | None, new: Layout, pinned: int) -> int | None:
    """Estimate from the layouts where the prompt first changed (after a reopen, with no prompt kept)."""
    if prev is None:
        return 0
    if prev.branch != new.branch:
        return 0
    for i, (a, b) in enumerate(zip(prev.slots, new.slots)):
        if a != b:
            return i
    if len(new.slots) < len(prev.slots):
        return len(new.slots)
    return None
