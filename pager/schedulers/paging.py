"""The paging scheduler: L1, the hot working set, recalled pages; rounds in batches.

For one call it builds the page table from the history mirror, scores it with
the heat policy (checked: one finite score per row), picks recall candidates
among the index hits the facade fetched, runs the pure planner
(``pager.core.plan``) and renders the layout into neutral messages: rows in
full, stubs, the task-state card and recall blocks. What it returns is one
``ScheduleResult``; the facade persists and renders it.

Recall (L3). The query is what the agent is about to work on: the terms of
the latest assistant message and of any user message after it. The index
finds pages about those words (BM25); a page is recalled only if the query
also *refers* to it as heat does (``terms.TermIndex.references``: paths, file
names, handles and error names count double), so a recall is evidence, not
noise that costs tokens on every call. Each page is cut to an excerpt around
its first matching line, so a recall costs a few hundred tokens.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import attrs
import numpy as np

from pager.core import pairing
from pager.core.canonical import same_objects
from pager.core.compact import compact_line, index_block
from pager.core.heat import HeatPolicy
from pager.core.history import History
from pager.core.l1guard import GuardResult, cap_pinned, guard_card, items
from pager.core.messages import message_text, tool_calls
from pager.core.plan import (
    CARD,
    FULL,
    INDEX,
    RECALL,
    STUB,
    Layout,
    PlanConfig,
    PlanInput,
    Prior,
    Slot,
    plan,
)
from pager.core.render import (
    excerpt_span,
    line_range,
    recall_block,
    reread_stub_text,
    source_label,
    stub_message,
)
from pager.core.handoff import Handoff
from pager.core.terms import term_weight
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter, content_text
from pager.errors import ToolError
from pager.formats.base import RenderHints
from pager.options import Options
from pager.schedulers.reuse import RenderMemo, Rendering
from pager.schedulers.scoring import focus_terms, scorer
from pager.schedulers.base import (
    CallInputs,
    Declared,
    Lookups,
    RecallHit,
    RecallRequest,
    ScheduleResult,
    first_diff,
)

__all__ = ["PagingCall", "PagingScheduler", "RecallRequest", "recall_query"]

# The page's label line inside the recall block (handle, step, kind, path, lines).
LABEL_TOKENS = 24


@attrs.frozen(slots=True)
class PagingCall:
    """The inputs of one paging call. ``history`` already holds the call's messages."""

    history: History
    messages: Sequence[Mapping[str, Any]]  # neutral messages, one per history row
    pins: Sequence[str]
    notes: Sequence[str]
    pin_terms: frozenset[str]
    tools_tokens: int
    prev: Layout | None
    prev_out: Sequence[Mapping[str, Any]] | None  # the previous prompt's messages, when kept
    hits: Sequence[RecallHit] = ()
    demoted: frozenset[int] = frozenset()
    # pages from beyond the history that the previous prompt's recall blocks show, still readable
    kept: Sequence[RecallHit] = ()
    # None: the model can call expand. Else the request's own tool names (lower case -> as named):
    # only file reads made with one of them are stubbed, and the stub says to re-read with it
    reread: Mapping[str, str] | None = None
    # the checkpoint files read back when the session reopened (``state_dir``): part of the card
    state_text: str = ""

    def foreign(self) -> dict[int, RecallHit]:
        """Return the pages from beyond the history this call may show, by id."""
        return {h.page_id: h for h in (*self.kept, *self.hits) if h.source is not None}


def recall_query(history: History) -> frozenset[str]:
    """Return the terms of the latest assistant message and any user message after it.

    Computed once per change of the history (``History.query_terms``): a call asks for it three times.
    """
    return history.query_terms()


class PagingScheduler:
    """Schedule one session's calls in paging mode (the default).

    Its state is the last prompt's ``Layout`` (None before the first call),
    kept under the state row's ``layout`` key, where ``pager ui`` reads it.
    """

    key = "layout"
    legacy_setting = None
    guards_tools = False  # paging prunes no tool: every harness tool may always run
    # a call whose search could recall nothing does not search (``_may_recall``); False: every call
    # searches (a test compares the two)
    skip_idle_recall = True

    def __init__(self, options: Options, counter: TokenCounter, policy: HeatPolicy) -> None:
        self.options = options
        self.counter = counter
        self.policy = policy
        self.notes_shown = options.max_notes
        # the previous call's rendering: a memo of a pure function, never state (``pager.schedulers.reuse``)
        self._rendered: RenderMemo | None = None
        self._dumped: tuple[Layout, dict] | None = None  # the last layout dumped, and its state
        self._layered: tuple[History, tuple[int, int], tuple[Slot, ...], list[tuple[int, ...]]] | None = None
        self._rereadable: tuple[History, int, dict[str, str], np.ndarray] | None = None  # ``_stubbable``'s rows
        # the last plan's facts of its layout, and what its table was of: the history, branch and reread tools
        self._prior: tuple[History, int, Any, Prior] | None = None
        self._carded: tuple[tuple, GuardResult] | None = None  # ``card``'s last answer, and what it was of
        self._configs: tuple[Options, int, int, PlanConfig] | None = None  # ``_config``'s last answer

    # -- the Scheduler interface ------------------------------------------------------------

    def load(self, saved: Any) -> Layout | None:
        """Return the layout ``dump`` wrote."""
        return Layout.from_state(saved)

    def dump(self, state: Layout | None) -> Any:
        """Return the layout as the state row keeps it (the previous call's rows reused: ``Layout.to_state``)."""
        if state is None:
            return None
        memo = self._dumped
        if memo is not None and memo[0] is state:
            return memo[1]
        saved = state.to_state(memo)
        self._dumped = (state, saved)
        return saved

    def lookups(self, history: History, state: Layout | None) -> Lookups:
        """Return the recall search and the other sessions' pages the last prompt's recall blocks show."""
        foreign: tuple[int, ...] = ()
        if state is not None:
            row_of = history.row_of
            # which slots are recall blocks is a fact of the slots alone: the last plan's, if these are its
            prior = self._prior[-1] if self._prior is not None else None
            recalls = ([state.slots[j] for j in prior.recall] if prior is not None and prior.slots is state.slots
                       else [s for s in state.slots if s.kind == RECALL])
            foreign = tuple(p for s in recalls for p in s.pages if p not in row_of)
        return Lookups(self.recall_request(history, state), foreign)

    def schedule(self, inputs: CallInputs, state: Layout | None) -> ScheduleResult:
        """Plan and render the prompt for one call; the new layout is the result's state."""
        return self.plan(PagingCall(
            history=inputs.history, messages=inputs.messages, pins=inputs.pins, notes=inputs.notes,
            pin_terms=inputs.pin_terms, tools_tokens=inputs.tools_tokens, prev=state, prev_out=inputs.prev_out,
            hits=inputs.hits, demoted=inputs.demoted, kept=inputs.kept, reread=inputs.reread,
            state_text=inputs.checkpoint.opened,
        ))

    def blocked(self, tool_name: str, state: Layout | None) -> str | None:
        """Return None: paging blocks no tool."""
        return None

    def accept_handoff(self, arguments: Mapping[str, Any]) -> Handoff:
        """Raise ``ToolError``: ``new_context`` is a rollover tool."""
        raise ToolError("new_context is only offered in rollover mode")

    def declare(self, handoff: Handoff, call_id: str, state: Layout | None) -> Declared:
        """Raise ``ToolError``: paging takes no handoff."""
        raise ToolError("new_context is only offered in rollover mode")

    def handoff(self, state: Layout | None) -> Handoff | None:
        """Return None: a paging session's handoffs are its events' (``handoff_from_events``)."""
        return None

    # -- recall ---------------------------------------------------------------------------

    def recall_request(self, h: History, prev: Layout | None) -> RecallRequest | None:
        """Return the search to run for this call's recall candidates (None: recall is off)."""
        o = self.options
        if not o.recall_pages or not len(h):
            return None
        query = recall_query(h)
        if not query:
            return None
        # pages in the prompt in full and L1 are never candidates
        exclude = {s.page for s in (prev.slots if prev else ()) if s.kind == FULL}
        exclude.update(h.page[: h.pinned_count()])
        beyond_only = self.skip_idle_recall and not self._may_recall(h, query, exclude)
        if beyond_only and not o.recall_pools:
            return None  # every hit would be a row of the history, and none could become a candidate
        return RecallRequest(tuple(sorted(query)), o.recall_pages * 3, frozenset(exclude), o.recall_min_score,
                             beyond_only)

    def _may_recall(self, h: History, query: frozenset[str], exclude: set[int]) -> bool:
        """Return whether a hit of this call's search could pass ``_candidates`` (False: skip the search).

        Without pools every hit is a row of ``h`` (``Pools.search_recall``), and ``_candidates``
        keeps a row only if the query refers to it with ``recall_min_strength`` (the history's
        term index, not the search, says how strongly) and it is not stale nor a system message.
        When no row that the search may return (not in ``exclude``) passes that test, every hit
        would be dropped: the call recalls nothing whatever Tantivy ranks, so it need not ask
        (with pools, unless the index holds pages beyond the session: ``RecallRequest.beyond_only``).
        Most calls between rounds are so (the pages the query names are in the prompt in full);
        the search was most of such a call's read half (issue 23).
        """
        need = self.options.recall_min_strength
        if not need:
            return True  # every hit is a candidate
        row_of, stale, kind = h.row_of, h.stale, h.kind
        for pid, strong in h.term_index.references(query).items():
            if strong < need or pid in exclude:
                continue
            r = row_of.get(pid)
            if r is not None and not stale[r] and kind[r] != "system":
                return True
        return False

    def _candidates(
        self, h: History, hits: Sequence[RecallHit]
    ) -> tuple[list[tuple[int, int]], dict[int, tuple[int, int]]]:
        """Return ``(page id, rendered tokens)`` best first, and the line range to show of each.

        Stale file reads and system messages are never candidates.
        """
        o = self.options
        if not hits:
            return [], {}
        query = recall_query(h)
        strength = h.term_index.references(query) if o.recall_min_strength else {}
        needles = [t.lower() for t in query if len(t) >= 4]
        out: list[tuple[int, int]] = []
        spans: dict[int, tuple[int, int]] = {}
        for hit in hits:
            if hit.source is None:
                r = h.row_of.get(hit.page_id)
                if r is None or h.stale[r] or h.kind[r] == "system":
                    continue
                strong = strength.get(hit.page_id, 0)
            else:
                # another session's page: judged by the same weights, on the terms it was stored with
                strong = sum(term_weight(t) for t in query & hit.source.terms)
            if o.recall_min_strength and strong < o.recall_min_strength:
                continue
            span = excerpt_span(hit.text, needles, o.recall_page_tokens * 4)
            if span is None:
                continue
            spans[hit.page_id] = span
            cost = MESSAGE_OVERHEAD + LABEL_TOKENS + self.counter.count(line_range(hit.text, *span))
            if hit.source is not None:
                src = hit.source
                cost += self.counter.count(source_label(src.session, src.pool, src.owner, src.written))
            out.append((hit.page_id, cost))
        return out, spans

    # -- schedule -------------------------------------------------------------------------

    def card(
        self, pins: Sequence[str], notes: Sequence[str], fixed_tokens: int = 0, state_text: str = ""
    ) -> GuardResult:
        """Return the task-state card under the L1 cap (``pager.core.l1guard``).

        ``fixed_tokens`` is the rest of L1 (system messages and turn 1);
        ``state_text`` the checkpoint files the card carries. With no pins,
        notes or state block the card is empty and nothing is counted.
        """
        o = self.options
        first = len(notes) - min(len(notes), o.max_notes) + 1
        keep = notes[-o.max_notes :] if o.max_notes else []
        if not pins and not keep and not state_text:
            return GuardResult("", (), (), (), bool(o.l1_cap) and fixed_tokens > o.l1_cap)
        # a pure function of these (the options and the counter are the scheduler's): the last one is
        # kept, as the card changes only when a pin or note is added (issue 23)
        key = (o, tuple(pins), tuple(keep), first, fixed_tokens, state_text)
        memo = self._carded
        if memo is not None and memo[0][0] is o and memo[0][1:] == key[1:]:
            return memo[1]
        guard = guard_card(
            fixed_tokens, items("pin", pins), items("note", keep, first), o.l1_cap, self.counter.count,
            overhead=MESSAGE_OVERHEAD, state=state_text,
        )
        self._carded = (key, guard)
        return guard

    def _focus_terms(self, call: PagingCall) -> frozenset[str]:
        """Return the active task's terms: pinned goals and the latest user message but the first."""
        return focus_terms(self.options, call.history, call.pin_terms)

    def plan(self, call: PagingCall) -> ScheduleResult:
        """Plan and render the prompt for one call."""
        o = self.options
        h = call.history
        sent = call.messages  # compact lines are of the messages as sent, never of a cut L1
        cols = h.columns()
        n = len(h)
        pinned = np.zeros(n, dtype=bool)
        pinned[: h.pinned_count()] = True
        # a system prompt or turn 1 over the L1 cap keeps its head, its tail behind its handle (l1guard)
        npin = h.pinned_count()
        cut = cap_pinned(call.messages[:npin], h.tokens[:npin], h.handle[:npin], o.l1_cap, self.counter.count)
        if cut.cut:
            # a list concatenation (the rest's own kind: a lazy head stays unconverted, pager.formats.lazy)
            rest = call.messages[npin:]
            joined = list(cut.messages) + rest if isinstance(rest, list) else [*cut.messages, *rest]
            call = attrs.evolve(call, messages=joined)
            cols = {**cols, "tokens": cols["tokens"].copy()}  # the mirror's columns are read-only views
            cols["tokens"][:npin] = cut.tokens
        guard = self.card(call.pins, call.notes, int(cols["tokens"][:npin].sum()), call.state_text)
        card = guard.card
        card_tokens = MESSAGE_OVERHEAD + self.counter.count(card) if card else 0
        focus = self._focus_terms(call)

        score = scorer(o, self.policy, h, cols, npin, focus, sent if o.compact_tokens else None)

        cfg = self._config(call.tools_tokens, int(cols["tokens"][:npin].sum()) + card_tokens)
        budget = cfg.budget
        recall, spans = self._candidates(h, call.hits)
        foreign = call.foreign()
        inp = PlanInput(
            page=cols["page"], tokens=cols["tokens"], stub_tokens=cols["stub_tokens"], unit=cols["unit"],
            pinned=pinned, tool=self._stubbable(h, cols["tool"], call.reread), heat=None, card_tokens=card_tokens,
            card=card,
            recall=recall, recall_spans=spans, branch=h.branch, task=h.task if h.first_user is not None else -1,
            compact_tokens=cols["compact_tokens"], foreign=frozenset(foreign), score=score, rows=h.row_of,
            prior=self._prior_of(h, cut.cut, call.reread),
        )
        prev = call.prev
        result = plan(inp, cfg, prev)
        self._prior = (h, h.branch, _reread_key(call.reread), result.prior) if not cut.cut else None
        layout = result.layout
        demoted = _demoted(prev, layout)
        rendered, handles = self._render(h, layout, call.messages, foreign, call.reread)
        changed_from = (
            first_diff(call.prev_out, rendered) if call.prev_out is not None
            else _first_change(prev, layout)
        )
        layers, kept, stubbed = self._layers(h, layout, card_tokens, call.tools_tokens, cols["tokens"],
                                             reuse=not cut.cut)
        saved = self.dump(layout)
        return ScheduleResult(
            messages=rendered,
            tokens=result.tokens + call.tools_tokens,
            budget=budget + call.tools_tokens,
            layers=layers,
            pages_kept=kept,
            pages_stubbed=stubbed,
            pages_dropped=n - kept - stubbed,
            round=result.round,
            reason=result.reason.value,
            changed_from=changed_from,
            hints=RenderHints(
                l1=min(len(rendered), h.pinned_count() + (1 if layout.card else 0)),
                stable=layout.stable,
                previous=changed_from if changed_from is not None else (
                    len(call.prev_out) if call.prev_out is not None else None),
            ),
            recalled=result.recalled,
            handles=tuple(handles),
            demoted=tuple(sorted(demoted)),
            faults=sum(1 for pid in result.recalled if pid in call.demoted or pid in demoted),
            # the L1 guard says what it moved out of the card, every call it is out
            notices=tuple(f"l1-moved:{ref}" for ref in guard.moved) + (("l1-over-cap",) if guard.over else ())
            + tuple(f"l1-cut:{h.handle[r]}" for r in cut.cut),
            layout=saved,
            # the layout itself: it equals what reads back from the store (``Layout.from_state``; a test holds
            # it), so a reopened session plans from the same value, and the next call's layout keeps its slots
            # as the very objects the rendering and the state reuse (issue 23)
            state=layout,
            checkpoint_read=True,  # the card carries the files read back on reopen from the first call
            # a round that left every page in full demoted nothing to search for (a first call, say):
            # no commit (a Tantivy commit costs ~0.2 s on the first request of every session)
            flush_index=result.round and (kept < n or bool(demoted)),
            hidden_upto=_newest_hidden(h, layout) if result.round and (kept < n or bool(demoted)) else 0,
        )

    def _config(self, tools_tokens: int, l1: int) -> PlanConfig:
        """Return the planner's figures for the request's tools and L1 (in tokens); the rest are the options'.

        The last answer is kept: between calls these rarely change (issue 23).
        """
        o = self.options
        memo = self._configs
        if memo is not None and memo[0] is o and memo[1] == tools_tokens and memo[2] == l1:
            return memo[3]
        budget = o.budget - tools_tokens
        cfg = PlanConfig(
            budget=budget, high=min(budget, l1 + o.high_watermark), low=min(budget, l1 + o.low_watermark),
            recent_units=o.recent_units, stub_threshold=o.stub_threshold, inline_max=o.inline_max,
            recall_pages=o.recall_pages, recall_tokens=o.recall_tokens, old_share=o.old_share,
            minor_rounds=o.minor_rounds, task_rounds=o.task_rounds and o.task_focus,
            compact_tokens=o.compact_tokens, objective=o.objective, keep_room=o.keep_room,
            recall_leaves=o.recall_leaves,
        )
        self._configs = (o, tools_tokens, l1, cfg)
        return cfg

    def _prior_of(self, h: History, cut: Sequence[int] = (), reread: Mapping[str, str] | None = None,
                  ) -> Prior | None:
        """Return the last plan's ``Prior`` while its table is this one's with rows appended, else None.

        That is: the same ``History`` on the same branch (a mirror gains rows between calls; a fork or a
        reload is a new branch or object), with L1 as the mirror holds it (not ``cut`` to the L1 cap),
        and the same stubbable rows (``reread``: the request's tools say which file reads are).
        """
        memo = self._prior
        if memo is None or cut or memo[0] is not h or memo[1] != h.branch or memo[2] != _reread_key(reread):
            return None
        return memo[3]

    def _stubbable(self, h: History, tool: np.ndarray, reread: Mapping[str, str] | None) -> np.ndarray:
        """Return the rows that may be stubbed: every tool output, or (no expand) re-readable file reads.

        The re-readable rows of the previous call are kept and extended by the new rows (a row's kind
        and tool name never change on a branch), while the history, its branch and ``reread`` are the same.
        """
        if reread is None:
            return tool
        memo = self._rereadable
        if memo is None or memo[0] is not h or memo[1] != h.branch or memo[2] != reread or len(memo[3]) > len(h):
            memo = (h, h.branch, dict(reread), np.zeros(0, dtype=bool))
        done = memo[3]
        if len(done) < len(h):
            m = len(done)
            ok = [k == "file" and (name or "").lower() in reread for k, name in zip(h.kind[m:], h.tool_name[m:])]
            done = np.concatenate([done, np.asarray(ok, dtype=bool)])
        self._rereadable = (memo[0], memo[1], memo[2], done)
        return tool & done

    @staticmethod
    def _reread_stub(h: History, r: int, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        msg = messages[r]
        cid = h.answers[r]
        call = f"{h.tool_name[r]}"
        row = h.call_rows.get(cid) if cid else None
        if row is not None:
            for c in tool_calls(messages[row]):
                if c.id == cid:
                    call = f"{c.name} {c.arguments[:120]}"  # about the length of expand's own words
        text = reread_stub_text(content_text(msg.get("content")), h.tokens[r], h.path[r] or "", call)
        return {"role": "tool", "tool_call_id": msg["tool_call_id"], "content": text}

    def _render(
        self, h: History, layout: Layout, messages: Sequence[Mapping[str, Any]],
        foreign: Mapping[int, RecallHit] | None = None, reread: Mapping[str, str] | None = None,
    ) -> tuple[list[Mapping[str, Any]], list[str]]:
        """Return the layout's neutral messages and the handles they show.

        Only the slots after the head the previous call rendered the same are
        rendered (``pager.schedulers.reuse``): between rounds, the new tail.
        """
        memo = self._rendered
        start = memo.reusable(h, layout.slots, layout.card, messages, reread is not None) if memo else 0
        acc = memo.rendering.head(start) if memo is not None and start else Rendering()
        for k in range(start, len(layout.slots)):
            slot = layout.slots[k]
            if slot.kind == FULL:
                r = h.row_of[slot.page]
                acc.add(messages[r], (r,), messages)
            elif slot.kind == STUB and reread is not None:
                r = h.row_of[slot.page]
                cid = h.answers[r]
                row = h.call_rows.get(cid) if cid else None
                acc.calls.append((k, cid, row))
                acc.add(self._reread_stub(h, r, messages), (r,) if row is None else (r, row), messages)
            elif slot.kind == STUB:
                r = h.row_of[slot.page]
                acc.add(stub_message(messages[r], h.tokens[r], h.handle[r], h.path[r]), (r,), messages,
                        (h.handle[r],))
            elif slot.kind == CARD:
                acc.add({"role": "user", "content": layout.card}, (), messages)
            elif slot.kind == RECALL:
                shown: list[str] = []
                text = self._recall_text(h, slot, messages, shown, foreign or {}, reread is None)
                acc.add({"role": "user", "content": text}, (), messages, shown)
                acc.limit = k if acc.limit is None else acc.limit
            elif slot.kind == INDEX:
                rows = [h.row_of[p] for p in slot.pages]
                lines = [compact_line(messages[r], h.kind[r], h.handle[r], h.step[r], h.path[r]) for r in rows]
                acc.add({"role": "user", "content": index_block(lines)}, rows, messages, [h.handle[r] for r in rows])
        normalized = pairing.normalize_after(acc.out, memo.normalized if memo is not None else None)
        self._rendered = RenderMemo(h, h.branch, layout.card, reread is not None, layout.slots, acc, normalized)
        return normalized.out, list(acc.handles)

    def _recall_text(
        self, h: History, slot: Slot, messages: Sequence[Mapping[str, Any]], handles: list[str],
        foreign: Mapping[int, RecallHit], show_handles: bool = True,
    ) -> str:
        items = []
        spans = slot.spans or ((0, 0),) * len(slot.pages)
        for pid, (start, end) in zip(slot.pages, spans):
            r = h.row_of.get(pid)
            hit = foreign.get(pid)
            if r is not None:
                text = message_text(messages[r])
                item: dict[str, Any] = {"handle": h.handle[r], "step": h.step[r], "kind": h.kind[r], "path": h.path[r]}
            elif hit is not None and hit.source is not None:
                text, src = hit.text, hit.source
                item = {"handle": src.handle, "step": src.step, "kind": src.kind, "path": src.path,
                        "session": src.session, "pool": src.pool, "owner": src.owner, "written": src.written}
            else:
                continue  # the planner keeps no block whose pages it cannot show
            excerpt = line_range(text, start, end) if start else text
            item.update(lines=(start, end) if start else None, text=excerpt.rstrip("\n"),
                        truncated=len(excerpt) < len(text))
            items.append(item)
            if show_handles:
                handles.append(item["handle"])
        return recall_block(items, handles=show_handles)

    def _layers(
        self, h: History, layout: Layout, card_tokens: int, tools_tokens: int, tokens: Any = None,
        reuse: bool = True,
    ) -> tuple[dict[str, int], int, int]:
        """Return the tokens per layer and the pages kept and stubbed.

        The running figures of the head of slots the previous call shared (the very same objects, the
        same history and branch, the same L1 rows) are reused; ``reuse`` False when ``tokens`` is not the
        mirror's own column (a pinned message cut to the L1 cap).
        """
        tokens = h.tokens if tokens is None else tokens  # the tokens as sent (a pinned message may be cut)
        npin = h.pinned_count()
        memo = self._layered if reuse else None
        k, cum = 0, [(0, 0, 0, 0, 0, 0)]
        if memo is not None and memo[0] is h and memo[1] == (h.branch, npin):
            k = same_objects(layout.slots, memo[2])
            cum = memo[3][: k + 1]
        pinned = set(h.page[:npin])
        l1, l2, stubs, l3, kept, stubbed = cum[-1]
        for slot in layout.slots[k:]:
            if slot.kind == FULL:
                if slot.page in pinned:
                    l1 += int(tokens[h.row_of[slot.page]])
                else:
                    l2 += int(tokens[h.row_of[slot.page]])
                kept += 1
            elif slot.kind == STUB:
                stubs += h.stub_tokens[h.row_of[slot.page]]
                stubbed += 1
            elif slot.kind == RECALL:
                l3 += slot.tokens
            elif slot.kind == INDEX:
                stubs += slot.tokens
            cum.append((l1, l2, stubs, l3, kept, stubbed))
        self._layered = (h, (h.branch, npin), layout.slots, cum) if reuse else None
        layers = {"l1": card_tokens + l1, "l2": l2, "stubs": stubs, "l3": l3, "tools": tools_tokens}
        return layers, kept, stubbed


def _reread_key(reread: Mapping[str, str] | None) -> Any:
    """Return what ``_stubbable`` reads of ``reread``, comparable with ``==``."""
    return None if reread is None else tuple(sorted(reread.items()))


def _demoted(prev: Layout | None, new: Layout) -> set[int]:
    """Return the pages ``prev`` showed in full that ``new`` does not (by a round, or a big output stubbed).

    Only the slots after the head the two share (the very same objects) are compared (issue 23): a
    layout shows each page in at most one slot (the planner lays each row out once), so a page of
    ``prev``'s tail is not in the head they share.
    """
    if prev is None:
        return set()
    k = same_objects(prev.slots, new.slots)
    return {s.page for s in prev.slots[k:] if s.kind == FULL} - {s.page for s in new.slots[k:] if s.kind == FULL}


def _newest_hidden(h: History, layout: Layout) -> int:
    """Return the newest page of ``h`` that ``layout`` does not show in full (0: it shows every page).

    A round's demoted pages need a commit of the recall index only if one of them is newer than what the
    index committed (``ScheduleResult.hidden_upto``); the walk back from the newest page stops at the first
    page not in full, usually a few pages back (the tail is the working set).
    """
    full = {s.page for s in layout.slots if s.kind == FULL}
    for pid in reversed(h.page):
        if pid not in full:
            return int(pid)
    return 0


def _first_change(prev: Layout | None, new: Layout) -> int | None:
    """Estimate from the layouts where the prompt first changed (after a reopen, with no prompt kept)."""
    if prev is None or prev.branch != new.branch:
        return 0
    for i, (a, b) in enumerate(zip(prev.slots, new.slots)):
        if a != b:
            return i
    if len(new.slots) < len(prev.slots):
        return len(new.slots)
    return None
