"""The facade: ``open()``, ``assemble()``, ``observe()`` and the agent tools.

The one module that orchestrates I/O. One ``assemble``::

    request --wire format--> neutral messages --validate--> record what is new
        --> schedule (pure: paging or rollover) --> persist, one transaction
        --> index the new pages --> render through the wire format --> report

Everything it decides is decided by a scheduler; everything it stores goes
through the ``Store`` protocol; everything provider-specific through the
request's ``WireFormat``. A ``Pager`` serialises its methods with a lock, so
threads may share one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Mapping, Sequence

import attrs

from pager import tools as agent_tools
from pager.core.describe import brief
from pager.core.handoff import parse_handoff, render_handoff
from pager.core.l1guard import item_text as l1_item_text
from pager.core.l1guard import l1_hits
from pager.core.messages import message_text, validate
from pager.core.render import line_range
from pager.core.tokens import TokenCounter, ToolTokens, default_counter
from pager.errors import HandleError, InputError, ToolError
from pager.options import Options, load_config
from pager.formats.base import WireFormat, detect, get_format
from pager.recording import Recorder, record_aside
from pager.report import Report, ReportLog, layout_delta
from pager.schedulers.base import ScheduleResult
from pager.schedulers.window import handoff_from_events, task_state
from pager.session import Session, open_store
from pager.sharing import Sharing
from pager.statedir import attach_state_dir
from pager.statefiles import TaskState
from pager.storage.base import Store
from pager.storage.index import IndexDoc

__all__ = ["Pager", "open", "store_sessions"]

# Tantivy takes the hit count as a 64-bit size; far fewer hits than this are ever useful.
MAX_SEARCH_K = 10_000


def store_sessions(path: str | os.PathLike[str] | Store) -> list[str]:
    """Return the session names recorded in the store at ``path`` (oldest first)."""
    store = open_store(path, must_exist=True)
    try:
        return store.sessions()
    finally:
        if store is not path:
            store.close()


def open(  # noqa: A001 - the public verb is open(), like shelve.open
    path: str | os.PathLike[str] | Store,
    session: str = "default",
    context_window: int | None = None,
    *,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    counter: TokenCounter | None = None,
    **options: Any,
) -> "Pager":
    """Open (creating if needed) a store and a session in it.

    ``path`` is a folder (the SQLite store), ``":memory:"`` (an in-memory
    store), a ``postgresql://`` URL (the PostgreSQL extra), or a ``Store``
    instance. ``context_window`` is the model's window in tokens. ``config``
    is a JSON file (as ``pager tune --write`` makes) or a mapping of options;
    keyword options override it. A reopened session keeps the options it was
    last opened with unless new ones are given.
    """
    _check_options(config, context_window, options)  # before any connection: a bad option fails at once
    return Pager(path, session, context_window, config=config, counter=counter, **options)


def _check_options(config: Any, context_window: int | None, options: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for options ``open`` would refuse, before the store is opened (issue 20)."""
    given = {k: v for k, v in options.items() if not (k == "policy" and v is not None and not isinstance(v, str))}
    Options.build(load_config(config), context_window=context_window, **given)


class Pager(Sharing, Session):
    """A scheduling session over a durable store. Use ``pager.open``."""

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
        session: str,
        context_window: int | None,
        *,
        config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        counter: TokenCounter | None = None,
        **options: Any,
    ) -> None:
        super().__init__(path, session, context_window, config=config, counter=counter or default_counter(),
                         options=options)
        self._lock = threading.RLock()
        self._count_tools = ToolTokens(self.counter)
        self._recorder = Recorder(self.session, self.history, self.options.scope, self.options.owner,
                                  self.options.pool)
        self.reports = ReportLog(self.store.path, enabled=self.options.log_reports)
        self.last_report: Report | None = None
        self._state_dir = attach_state_dir(self)  # live checkpoint files (a no-op without state_dir)

    # -- assemble -----------------------------------------------------------------------

    def _format(self, request: Any, name: str | None) -> WireFormat:
        if hasattr(request, "model_dump") and not isinstance(request, Mapping):
            raise InputError("pass the request as a mapping (an SDK's create() keyword arguments)")
        if not isinstance(request, Mapping):  # a named format reads it as one
            raise InputError(f"request must be a mapping, got {type(request).__name__}")
        return get_format(name) if name is not None else detect(request)

    def assemble(
        self, request: Mapping[str, Any], *, expose_tools: bool | None = None, format: str | None = None,
        reread_only: bool = False,
    ) -> dict[str, Any]:
        """Return ``request`` with its history rewritten to fit the budget.

        The request's history (``messages``, or ``input`` for the Responses
        API) is the caller's whole history. What is new since the last call
        is recorded; other keys pass through untouched (pager's tools are
        appended to ``tools`` when ``expose_tools``). ``format`` names the
        wire format instead of detecting it.

        A history that is a strict prefix of what the session recorded (a
        request overtaken by a newer one of the same conversation: threads
        sharing this ``Pager``, concurrent proxy requests, another writer
        ahead) is planned on the recorded prefix and changes nothing: no page,
        no branch, no layout; the report's ``behind`` says by how many rows.
        A history that diverges from the recorded one forks a new branch.

        ``reread_only``: the model will have no ``expand`` (the caller does not
        offer pager's tools): only file reads made with one of the request's
        own tools are stubbed, and each such stub says to re-read the file
        with that tool; nothing else is replaced by a handle.
        """
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            fmt = self._format(request, format)
            converted = fmt.to_messages(request)
            messages = converted.messages
            known = self._recorder.same_prefix(messages)
            generation = getattr(self, "_generation", 0)
            h = self.history
            validate(
                messages, check_encoding=False, start=known, part_types=getattr(fmt, "part_types", None),
                open_calls=h.open_calls_at(known) if known else None,
                known_calls=h.call_rows if known else None,
            )
            tools = list(converted.tools)
            expose = self.options.expose_tools if expose_tools is None else expose_tools
            if expose:
                names = {fmt.tool_name(t) for t in tools}
                tools.extend(t for t in fmt.tool_specs(self.tools()) if fmt.tool_name(t) not in names)
            tools_tokens = self._count_tools(tools)
            docs: list[Any] = []
            try:
                with self._writing():
                    if getattr(self, "_generation", 0) != generation:
                        known = 0  # another writer's pages were loaded: match the whole history again
                    recorded = self._recorder.record(self.store, messages, known)
                    docs = recorded.docs
                    # indexed before scheduling: a page committed by the feeder's batch is recallable now
                    self._feeder.add(docs)
                    reread = None
                    if reread_only and not expose:
                        names = (fmt.tool_name(t) for t in converted.tools)
                        reread = {n.lower(): n for n in names if n}
                    self._calls += 1
                    if recorded.behind:
                        result = self._schedule_behind(messages, tools, tools_tokens, reread)
                        self.store.save_state(self.session, self._state())  # the call count only
                    else:
                        result = self._schedule(messages, tools, tools_tokens, reread)
                        self._persist(result)
            except BaseException:
                # the store rolled back (and _writing reloaded the mirror): drop the index's copies too
                self._feeder.forget([d.page_id for d in docs])
                raise
            if not recorded.behind:
                self._state_dir.after_assemble(result.events)  # after the commit: the WAL line, then the files
                if result.flush_index:
                    self._feeder.flush()  # rounds are rare; what was just demoted is recallable now
                self._prev_out = result.messages
            hints = attrs.evolve(result.hints, cache_marks=self.options.cache_marks)
            out = fmt.render(request, result.messages, tools=result.tools if result.tools is not None else (
                tools if expose else None), hints=hints)
            self._report(result, len(messages), recorded.pages, (time.perf_counter() - t0) * 1000.0,
                         recorded.behind)
            return out

    def _schedule(self, messages: Sequence[Mapping[str, Any]], tools: list[Any], tools_tokens: int,
                  reread: Mapping[str, str] | None = None) -> ScheduleResult:
        if self._rollover is not None:
            return self._rollover.assemble(self.history, messages, tools, self._pins, self._notes)
        req = self._paging.recall_request(self.history, self._layout)
        hits = self._search_recall(req, messages=messages) if req is not None else []
        call = self._paging_call(messages, tools_tokens, hits)
        return self._paging.schedule(call if reread is None else attrs.evolve(call, reread=reread))

    def _persist(self, result: ScheduleResult) -> None:
        """Apply a result to the session's counters and save them with its state and events."""
        self._handles.update(result.handles)
        self._demoted.update(result.demoted)
        self._faults += result.faults
        self._recall_hits += len(result.recalled)
        self._recorder.recalled_pending.update(result.recalled)
        if self._rollover is None and result.state is not None:
            self._layout = self._layout_from(result.state)
        self._save(result)

    def _report(self, result: ScheduleResult, n_in: int, new_pages: int, elapsed: float, behind: int = 0) -> None:
        self._recall_useful = self._recorder.recall_useful
        report = Report(
            session=self.session, call=self._calls, step=self.history.clock, messages_in=n_in,
            messages_out=len(result.messages), tokens=result.tokens, budget=result.budget,
            layers=result.layers, pages_kept=result.pages_kept, pages_stubbed=result.pages_stubbed,
            pages_dropped=result.pages_dropped, pages_recalled=len(result.recalled),
            handles_issued=len(self._handles), new_pages=new_pages, round=result.round, reason=result.reason,
            prefix_kept=result.changed_from is None, changed_from=result.changed_from, faults=self._faults,
            recall_hits=self._recall_hits,
            recall_precision=(round(self._recall_useful / self._recall_hits, 4) if self._recall_hits else None),
            elapsed_ms=round(elapsed, 3), mode=self.options.mode, notices=result.notices, behind=behind,
        )
        self.last_report = report
        if not self.reports.enabled:
            return
        record: dict[str, Any] = {"type": "assemble", **report.to_dict(), "time": round(time.time(), 3)}
        layout = (result.state or {}).get("layout") if self._rollover is None else None
        if layout:
            # the layout as a change against this writer's previous one (a few slots between rounds):
            # what `pager ui` rebuilds each call's prompt from; the card only when it changed
            base = getattr(self, "_report_layout", None)
            start, tail = layout_delta(base[1] if base else None, layout["slots"])
            delta: dict[str, Any] = {"base": base[0] if base and start else None, "from": start, "slots": tail}
            if not start or base is None or base[2] != layout.get("card", ""):
                delta["card"] = layout.get("card", "")
            record["layout"] = delta
            self._report_layout = (self._calls, layout["slots"], layout.get("card", ""))
        self.reports.append(record)

    # -- usage --------------------------------------------------------------------------

    def observe(self, response: Any, *, format: str | None = None) -> dict[str, int]:
        """Record a provider response's usage (prompt, completion, cached and cache-write tokens).

        Accepts a response of any registered format (SDK object or dict) or a
        bare usage mapping; returns the normalised figures, also logged.
        ``InputError`` for a shape no format knows.
        """
        with self._lock:
            self._check_open()
            fmt = get_format(format or "openai-chat")
            figures = fmt.parse_usage(response).to_dict()
            self.reports.append({"type": "usage", "session": self.session, "call": self._calls, **figures,
                                 "time": round(time.time(), 3)})
            return figures

    # -- pins, notes, handles -------------------------------------------------------------

    def pin(self, text: str) -> None:
        """Pin a goal into L1 (the task-state card) for every later prompt."""
        with self._lock:
            self._check_open()
            text = _clean_text("pin", text)
            with self._writing():
                doc = self._aside("pin", text)
                self._add_pin(text)
            self._feeder.add([doc])
            self._state_dir.record(f"pin p={len(self._pins)}")

    def note(self, text: str) -> int:
        """Keep a short note in the task-state card; return how many notes the card shows."""
        with self._lock:
            self._check_open()
            text = _clean_text("note", text)[: agent_tools.NOTE_MAX_CHARS]
            with self._writing():
                doc = self._aside("note", text)
                self._notes.append(text)
            self._feeder.add([doc])
            self._state_dir.record(f"note n={len(self._notes)}")
            return min(len(self._notes), self.options.max_notes)

    def _aside(self, kind: str, text: str) -> IndexDoc:
        """Keep a pin, note or handoff as a page of this session's scope (inside ``_writing``)."""
        o = self.options
        return record_aside(self.store, self.session, kind, text, seq=len(self.history), step=self.history.clock,
                            count=self.counter.count, scope=o.scope, owner=o.owner, pool=o.pool)

    def expand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Return the original text behind ``handle`` (optionally lines start..end, 1-based)."""
        with self._lock:
            self._check_open()
            for name, v in (("start_line", start_line), ("end_line", end_line)):
                if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                    raise ToolError(f"{name} must be a positive integer, got {brief(v)}")
            moved = l1_item_text(handle, self._pins, self._notes)  # the L1 guard's pointers: pin:N / note:N
            if moved is not None:
                return line_range(moved, start_line, end_line)
            if not isinstance(handle, str) or not handle.startswith("pg:"):
                raise HandleError(f"{brief(handle)} is not a pager handle (they look like pg:12-a1b2c3)")
            pid = self._readable_page(handle)  # its own session's, or a readable pool's
            if pid is None:
                raise HandleError(f"unknown handle {brief(handle)} in session {self.session!r}")
            _session, msg = self.store.message(pid)
            if pid in self._demoted:
                self._faults += 1
            self._expanded += 1
            return line_range(message_text(msg), start_line, end_line)

    def search(self, query: str, k: int = 5, *, cross_session: bool = False) -> list[Any]:
        """Search what this session may read; return index hits, best first.

        That is its own pages, its owner's private pages, and the project
        pools whose ACL lets it read; with ``cross_session=True`` also every
        ``shared`` page. Each hit names its session, owner, pool and scope.
        ``session`` pages never leave their session.
        """
        with self._lock:
            self._check_open()
            if not isinstance(query, str):
                raise InputError(f"query must be a string, got {type(query).__name__}")
            if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_K:
                raise InputError(f"k must be an integer from 1 to {MAX_SEARCH_K}, got {brief(k)}")
            self._feeder.flush()
            # this session's own pins and notes come from l1_hits, under the card's pin:N / note:N
            # names and only when outside the card: fetch enough to drop their pages
            own = len(self._pins) + len(self._notes)
            hits = [
                hit for hit in self._feeder.index.search(
                    query, session=self.session, k=min(MAX_SEARCH_K, k + own), cross_session=cross_session,
                    audiences=self._audiences())
                if not (hit.session == self.session and hit.kind in ("pin", "note"))
            ][:k]
            hits = self._dated(hits)
            hits += l1_hits(query, self._pins, self._notes, self._outside_l1(), k - len(hits), self.session)
            self._faults += sum(1 for hit in hits if hit.page_id in self._demoted)
            return hits

    # -- agent tools --------------------------------------------------------------------

    def tools(self, *, format: str | None = None) -> list[dict[str, Any]]:
        """Return the agent tools this session offers (OpenAI function JSON, or ``format``'s shape)."""
        specs = agent_tools.tool_specs(self.options)
        return get_format(format).tool_specs(specs) if format else specs

    def call_tool(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any]:
        """Execute one pager tool call; return the answer in the format's shape (a chat tool message by default).

        Bad arguments, unknown handles and the like come back as an error
        result the model can read, never as an exception in the harness.
        """
        with self._lock:
            self._check_open()
            fmt = get_format(format or "openai-chat")
            try:
                blocked = self.intercept(tool_call, format=fmt.name)
            except ToolError:
                blocked = None  # no call id: agent_tools.call answers it with an error
            return blocked if blocked is not None else agent_tools.call(self, fmt, tool_call)

    def intercept(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any] | None:
        """Return the error result for a tool call the budget forbids now, else None.

        Harnesses call it before running any of their own tools. In rollover
        mode's fallback step only ``new_context`` may run: any other call gets
        this result (answer the model with it) instead of running. Outside
        that step, and in paging mode, it returns None. Raises ``ToolError``
        for a call without an id.
        """
        with self._lock:
            self._check_open()
            if self._rollover is None:
                return None
            fmt = get_format(format or "openai-chat")
            parsed = fmt.parse_tool_call(tool_call)
            if not parsed.id:
                raise ToolError("tool call has no id; it cannot be answered")
            text = self._rollover.blocked(parsed.name)
            return None if text is None else fmt.tool_result(parsed.id, text, is_error=True)

    def declare_rollover(self, args: Mapping[str, Any], cid: str) -> str:
        """Record a ``new_context`` handoff as the pending switch; return the confirmation.

        Phase one of two: the window switches at the next ``assemble`` at a
        step boundary. Raises ``ToolError`` (an error result through
        ``call_tool``) for a malformed handoff or a related file outside the
        workspace.
        """
        with self._lock:
            self._check_open()
            if self._rollover is None:
                raise ToolError("new_context is only offered in rollover mode")
            handoff = parse_handoff(args, self._rollover.workspace)
            with self._writing():
                text = self._rollover.declare(handoff, cid)
                self._save_rollover(self._rollover.to_state(), self._rollover.take_events())
                self.store.save_state(self.session, self._state())
                doc = self._aside("handoff", render_handoff(handoff))
            self._feeder.add([doc])
            self._state_dir.record(f"handoff-intent call={cid}")
            return text

    def task_state(self) -> TaskState:
        """Return the task-state card: goal, invariants, next step, notes (``pager state export``)."""
        with self._lock:
            self._check_open()
            h = self.history
            goal = "\n".join(self._pins)
            if not goal and h.first_user is not None:
                goal = message_text(self.store.message(h.page[h.first_user])[1])
            handoff = self._rollover.latest_handoff() if self._rollover is not None else None
            if handoff is None:
                handoff = handoff_from_events(self.store.events(self.session))
            return task_state(goal, self.store.timeline(self.session), handoff, self.options.max_notes)

    def _outside_l1(self) -> list[str]:
        """Return the pin:N / note:N references not in the last prompt's card (issue 14: recallable)."""
        moved = [n.split(":", 1)[1] for n in (self.last_report.notices if self.last_report else ())
                 if n.startswith("l1-moved:")]
        shown = 0 if self._rollover is not None else self.options.max_notes
        return moved + [f"note:{i + 1}" for i in range(max(0, len(self._notes) - shown))]

    def reindex(self) -> int:
        """Rebuild the recall index from the store outright; return the pages indexed."""
        with self._lock:
            self._check_open()
            return self._feeder.rebuild()

    def close(self) -> None:
        """Flush the recall index and close the store. Idempotent."""
        with self._lock:
            super().close()


def _clean_text(what: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{what} text must be a non-empty string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} text is not valid Unicode (a lone surrogate at {exc.start})") from None
    return text.strip()

