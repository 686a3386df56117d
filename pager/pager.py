"""The facade: ``open()``, ``assemble()``, ``observe()`` and the agent tools.

The one module that orchestrates I/O. One ``assemble``::

    request --wire format--> neutral messages --validate--> record what is new
        --> lookups, schedule(inputs, state) (pure: paging or rollover)
        --> persist the new state, one transaction --> index the new pages
        --> render through the wire format --> report

A ``Pager`` *has* its parts, each an attribute: the session's mirror and
its frozen ``SessionState`` (``pager.session``), the ``Recorder``
(``pager.recording``), one ``Scheduler`` (``pager.schedulers``: it is blind
to which), the ``Pools`` service (``pager.sharing``), the recall index
feeder and the checkpoint directory (``pager.statedir``). Everything it
decides is decided by the scheduler; everything it stores goes through the
``Store`` protocol; everything provider-specific through the request's
``WireFormat``. A ``Pager`` serialises its methods with a lock, so threads
may share one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from pager import tools as agent_tools
from pager.core.describe import brief
from pager.core.handoff import render_handoff
from pager.core.heat import HeatPolicy
from pager.core.history import History
from pager.core.l1guard import l1_hits
from pager.core.messages import message_text, validate
from pager.core.pages import PageRecord
from pager.core.pools import PoolAcl
from pager.core.tokens import TokenCounter, ToolTokens, default_counter
from pager.errors import InputError, PagerError, ToolError
from pager.formats.base import WireFormat, detect, get_format, read_usage
from pager.intake import Intake
from pager.options import Options, load_config
from pager.recording import Recorder, record_aside
from pager.report import LayoutLog, Report, ReportLog
from pager.schedulers import get_scheduler
from pager.schedulers.base import CallInputs, Checkpoint, ScheduleResult
from pager.schedulers.window import handoff_from_events, task_state
from pager.session import SessionMirror, check_session_name, open_store, resolve_options
from pager.sharing import Pools, check_retire_reason, read_handle
from pager.statedir import attach_state_dir
from pager.statefiles import TaskState
from pager.storage.base import Store, is_store
from pager.storage.index import IndexDoc
from pager.storage.indexing import IndexFeeder

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


def _grown(old: frozenset[Any], new: Sequence[Any]) -> frozenset[Any]:
    """Return ``old | new``: ``old`` itself when ``new`` adds nothing (a call between rounds, issue 23).

    A union copies the whole set, which grows with the session; kept, the same object also lets
    the state row reuse its sorted copy (``SessionState.row``).
    """
    return old if old.issuperset(new) else old.union(new)


def _check_options(config: Any, context_window: int | None, options: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for options ``open`` would refuse, before the store is opened (issue 20)."""
    given = {k: v for k, v in options.items() if not (k == "policy" and v is not None and not isinstance(v, str))}
    Options.build(load_config(config), context_window=context_window, **given)


class Pager:
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
        self.session = check_session_name(session)
        self.counter = counter or default_counter()
        self._closed = True
        self._owns_store = not is_store(path)
        self.store: Store = open_store(path)
        self.path = Path(self.store.path) if getattr(self.store, "path", None) else None  # a Store may have none
        feeder: IndexFeeder | None = None
        try:
            self.options: Options
            self.policy: HeatPolicy
            self.options, self.policy = resolve_options(self.store, self.session, context_window, config, options)
            feeder = self._feeder = IndexFeeder(self.store)
            self._scheduler = get_scheduler(self.options, self.counter, self.policy, self.session)
            self._mirror = SessionMirror(self.store, self.session, self.counter, self._scheduler)
        except BaseException:
            # a bad option or a broken index must not leave the store open
            if feeder is not None:
                feeder.close()
            if self._owns_store:
                self.store.close()
            raise
        self._closed = False
        self._lock = threading.RLock()
        self._count_tools = ToolTokens(self.counter)
        o = self.options
        self._recorder = Recorder(self.session, self.history, o.scope, o.owner, o.pool)
        self._recorded_generation = self._mirror.generation  # the mirror the recorder follows
        self._pools = Pools(self.store, self.session, o.owner, o.recall_pools, self._feeder, self._writing)
        self._wire = "openai-chat"  # the wire format of the last assembled request: the tools' default
        self._intake = Intake()  # the last call's history items, the head memos of its conversions
        self.reports = ReportLog(self.store.path, enabled=o.log_reports)
        self.last_report: Report | None = None
        self._layouts = LayoutLog()
        try:
            self._state_dir = attach_state_dir(self)  # live checkpoint files (a no-op without state_dir)
        except BaseException:
            self.close()  # a refused directory (a symlink, a rewritten invariants file) must not leak the store
            raise
        self._set_state(checkpoint_unread=self._state_dir.reopened)

    @property
    def history(self) -> History:
        """The history mirror of the session's head branch (read-only use)."""
        return self._mirror.history

    def _set_state(self, **changes: Any) -> None:
        self._mirror.state = attrs.evolve(self._mirror.state, **changes)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Run a write in one store transaction, caught up with other writers (``SessionMirror.writing``).

        When the mirror was rebuilt from the store (another writer's pages, a
        rollback), the recorder follows it.
        """
        self._follow_mirror()
        try:
            with self._mirror.writing():
                self._follow_mirror()
                yield
        finally:
            self._follow_mirror()

    def _follow_mirror(self) -> None:
        """Point the recorder at the mirror's history if the mirror was rebuilt since it last looked."""
        if self._recorded_generation != self._mirror.generation:
            self._recorder.reset(self._mirror.history)
            self._recorded_generation = self._mirror.generation

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
        wire format instead of detecting it; the format becomes the session's
        (the default of ``observe``, ``call_tool``, ``intercept`` and ``tools``).

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
        return self._assemble(request, expose_tools=expose_tools, format=format, reread_only=reread_only)

    def _assemble(
        self, request: Mapping[str, Any], *, expose_tools: bool | None = None, format: str | None = None,
        reread_only: bool = False, ready: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """``assemble``; ``ready(out)`` gets the rendered request before the work it does not depend on.

        The proxy's way to forward a request early (``pager.aio.AsyncPager.aassemble_early``): ``ready`` is
        called, in this thread and under this ``Pager``'s lock, once the request is rendered and the call's
        pages, state and events are recorded in the open transaction, but before its COMMIT (the stores
        write those rows just before it: ``pager.storage.sqlite_tx``, ``pager.storage.pg_conn``), the
        checkpoint files (``after_assemble``), a round's index flush and the report line. That rest then
        runs here, still under the lock (so this session's next call, from any thread, starts after it),
        and what fails in it raises from here as it would from ``assemble``: the transaction rolled back,
        the mirror reloaded, nothing of the call kept. The caller that already sent ``out`` on learns it
        from this exception; the session's next call records the messages again (a caller resends its
        history). The store's write transaction stays open while ``ready`` runs, so it should return soon
        (the proxy's waits until the request body is written upstream, at most ``pager.aio.HOLD_MAX``);
        an exception from it rolls the call back before the COMMIT.
        """
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            self._follow_mirror()
            fmt = self._format(request, format)
            request, items, converted = self._intake.convert(fmt, request, vouch=self._recorder.vouch())
            messages = converted.messages
            known = self._recorder.same_prefix(messages, converted.vouched)
            generation = self._mirror.generation
            h = self.history
            validate(
                messages, check_encoding=False, start=known, part_types=getattr(fmt, "part_types", None),
                open_calls=h.open_calls_at(known) if known else None,
                known_calls=h.call_rows if known else None,
            )
            expose = self.options.expose_tools if expose_tools is None else expose_tools
            tools = self._request_tools(fmt, converted.tools, expose)
            tools_tokens = self._count_tools(tools)
            docs: list[Any] = []
            try:
                with self._writing():
                    if self._mirror.generation != generation:
                        known = 0  # another writer's pages were loaded: match the whole history again
                    recorded = self._recorder.record(self.store, messages, known, converted.wire)
                    docs = recorded.docs
                    # indexed before scheduling: a page committed by the feeder's batch is recallable now
                    self._feeder.add(docs)
                    reread = None
                    if reread_only and not expose:
                        names = (fmt.tool_name(t) for t in converted.tools)
                        reread = {n.lower(): n for n in names if n}
                    self._set_state(calls=self._mirror.state.calls + 1)
                    result = self._schedule(messages, tools, tools_tokens, reread, behind=bool(recorded.behind))
                    if recorded.behind:
                        self._mirror.save()  # the call count only
                    else:
                        self._persist(result)
                    hints = attrs.evolve(result.hints, cache_marks=self.options.cache_marks)
                    # rendering is pure (the result and the request): the same bytes before the COMMIT as after
                    out = fmt.render(request, result.messages, tools=result.tools if result.tools is not None else (
                        tools if expose else None), hints=hints)
                    if ready is not None:
                        t1 = time.perf_counter()
                        ready(out)
                        t0 += time.perf_counter() - t1  # the caller's time in ready is not assemble's
            except BaseException:
                # the store rolled back (and _writing reloaded the mirror): drop the index's copies too
                self._feeder.forget([d.page_id for d in docs])
                raise
            if not recorded.behind:
                self._intake.keep(items)
                self._state_dir.after_assemble(result.events)  # after the commit: the WAL line, then the files
                if result.flush_index and self._feeder.buffers(result.hidden_upto or None):
                    self._feeder.flush()  # rounds are rare; what was just demoted is recallable now
                self._mirror.prev_out = result.messages
            self._wire = fmt.name
            self._report(result, len(messages), recorded.pages, (time.perf_counter() - t0) * 1000.0,
                         recorded.behind)
            return out

    def _request_tools(self, fmt: WireFormat, tools: Sequence[Any], expose: bool) -> list[Any]:
        """Return the request's tools, with pager's own appended (in ``fmt``'s shape) when ``expose``."""
        out = list(tools)
        if expose:
            names = {fmt.tool_name(t) for t in out}
            specs = fmt.tool_specs(agent_tools.tool_specs(self.options))
            out.extend(t for t in specs if fmt.tool_name(t) not in names)
        return out

    def _schedule(self, messages: Sequence[Mapping[str, Any]], tools: list[Any], tools_tokens: int,
                  reread: Mapping[str, str] | None, *, behind: bool) -> ScheduleResult:
        """Gather the scheduler's inputs and run it.

        ``behind``: the request is a strict prefix of the recorded branch; it
        is planned on that prefix and its result is shown, never persisted, so
        the conversation's cached prefix is what it was.
        """
        m = self._mirror
        state = m.state
        history = m.history.prefix(len(messages)) if behind else m.history
        lookups = self._scheduler.lookups(history, state.scheduler)
        hits = self._pools.search_recall(lookups.search, history, messages) if lookups.search is not None else []
        sd = self._state_dir
        inputs = CallInputs(
            history=history, messages=messages, tools=tools, tools_tokens=tools_tokens, pins=m.pins, notes=m.notes,
            pin_terms=m.pin_terms, prev_out=m.prev_out, demoted=state.demoted, reread=reread,
            checkpoint=Checkpoint(sd.text, sd.opened, state.checkpoint_unread and not behind),
            hits=hits, kept=self._pools.kept_foreign(lookups.foreign),
        )
        return self._scheduler.schedule(inputs, state.scheduler)

    def _persist(self, result: ScheduleResult) -> None:
        """Apply a result to the session's state and save it with the result's events."""
        state = self._mirror.state
        self._set_state(
            scheduler=result.state if result.state is not None else state.scheduler,
            handles=_grown(state.handles, result.handles), demoted=_grown(state.demoted, result.demoted),
            faults=state.faults + result.faults, recall_hits=state.recall_hits + len(result.recalled),
            checkpoint_unread=state.checkpoint_unread and not result.checkpoint_read,
        )
        self._recorder.recalled_pending.update(result.recalled)
        self._mirror.save(result.events)

    def _report(self, result: ScheduleResult, n_in: int, new_pages: int, elapsed: float, behind: int = 0) -> None:
        state = self._mirror.state
        useful = self._recorder.recall_useful
        report = Report(
            session=self.session, call=state.calls, step=self.history.clock, messages_in=n_in,
            messages_out=len(result.messages), tokens=result.tokens, budget=result.budget,
            layers=result.layers, pages_kept=result.pages_kept, pages_stubbed=result.pages_stubbed,
            pages_dropped=result.pages_dropped, pages_recalled=len(result.recalled),
            handles_issued=len(state.handles), new_pages=new_pages, round=result.round, reason=result.reason,
            prefix_kept=result.changed_from is None, changed_from=result.changed_from, faults=state.faults,
            recall_hits=state.recall_hits,
            recall_precision=(round(useful / state.recall_hits, 4) if state.recall_hits else None),
            elapsed_ms=round(elapsed, 3), mode=self.options.mode, notices=result.notices, behind=behind,
        )
        self.last_report = report
        if not self.reports.enabled:
            return
        record: dict[str, Any] = {"type": "assemble", **report.to_dict(), "time": round(time.time(), 3)}
        if result.layout:
            record["layout"] = self._layouts.entry(state.calls, result.layout)
        self.reports.append(record)

    # -- usage --------------------------------------------------------------------------

    def observe(self, response: Any, *, format: str | None = None) -> dict[str, int]:
        """Record a provider response's usage (prompt, completion, cached and cache-write tokens).

        Accepts a response of any registered format (SDK object or dict) or a
        bare usage mapping: the format whose keys the usage carries reads it
        (``pager.formats.base.read_usage``). ``format`` is checked as a name
        only (it defaults to the session's: the wire format of the last
        assembled request). Returns the normalised figures, also logged.
        ``InputError`` for a shape no format knows.
        """
        with self._lock:
            self._check_open()
            get_format(format or self._wire)  # a wrong name is still a ConfigError
            # the format whose usage the response carries reads it (its keys say whose it is)
            figures = read_usage(response).to_dict()
            self.reports.append({"type": "usage", "session": self.session, "call": self._mirror.state.calls,
                                 **figures, "time": round(time.time(), 3)})
            return figures

    # -- pins, notes, handles -------------------------------------------------------------

    def pin(self, text: str) -> None:
        """Pin a goal into L1 (the task-state card) for every later prompt."""
        with self._lock:
            self._check_open()
            text = _clean_text("pin", text)
            with self._writing():
                doc = self._aside("pin", text)
                self._mirror.add_pin(text)
            self._feeder.add([doc])
            self._state_dir.record(f"pin p={len(self._mirror.pins)}")

    def note(self, text: str) -> int:
        """Keep a short note in the task-state card; return how many notes the card shows."""
        with self._lock:
            self._check_open()
            text = _clean_text("note", text)[: agent_tools.NOTE_MAX_CHARS]
            with self._writing():
                doc = self._aside("note", text)
                self._mirror.notes.append(text)
            self._feeder.add([doc])
            self._state_dir.record(f"note n={len(self._mirror.notes)}")
            return min(len(self._mirror.notes), self.options.max_notes)

    def _aside(self, kind: str, text: str) -> IndexDoc:
        """Keep a pin, note or handoff as a page of this session's scope (inside ``_writing``)."""
        o = self.options
        return record_aside(self.store, self.session, kind, text, seq=len(self.history), step=self.history.clock,
                            count=self.counter.count, scope=o.scope, owner=o.owner, pool=o.pool)

    def expand(self, handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Return the original text behind ``handle`` (optionally lines start..end, 1-based)."""
        with self._lock:
            self._check_open()
            # the one check the MCP server's expand shares (pager.sharing.read_handle)
            pid, text = read_handle(self.store, self._pools.reader, handle, start_line, end_line,
                                    self._mirror.pins, self._mirror.notes)
            if pid is not None:
                state = self._mirror.state
                self._set_state(faults=state.faults + (pid in state.demoted), expanded=state.expanded + 1)
            return text

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
            pins, notes = self._mirror.pins, self._mirror.notes
            # this session's own pins and notes come from l1_hits, under the card's pin:N / note:N
            # names and only when outside the card: fetch enough to drop their pages
            own = len(pins) + len(notes)
            hits = [
                hit for hit in self._feeder.index.search(
                    query, session=self.session, k=min(MAX_SEARCH_K, k + own), cross_session=cross_session,
                    audiences=self._pools.audiences())
                if not (hit.session == self.session and hit.kind in ("pin", "note"))
            ][:k]
            hits = self._pools.dated(hits)
            hits += l1_hits(query, pins, notes, self._outside_l1(), k - len(hits), self.session)
            state = self._mirror.state
            self._set_state(faults=state.faults + sum(1 for hit in hits if hit.page_id in state.demoted))
            return hits

    # -- agent tools --------------------------------------------------------------------

    def tools(self, *, format: str | None = None) -> list[dict[str, Any]]:
        """Return the agent tools this session offers, in ``format``'s shape (default: the session's format).

        The session's format is the wire format of the last assembled request
        (OpenAI function JSON before the first).
        """
        return get_format(format or self._wire).tool_specs(agent_tools.tool_specs(self.options))

    def call_tool(self, tool_call: Any, *, format: str | None = None) -> dict[str, Any]:
        """Execute one pager tool call; return the answer in the format's shape (default: the session's format).

        Bad arguments, unknown handles and the like come back as an error
        result the model can read, never as an exception in the harness.
        """
        with self._lock:
            self._check_open()
            fmt = get_format(format or self._wire)
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
        for a call without an id. ``format`` defaults to the session's.
        """
        with self._lock:
            self._check_open()
            if not self._scheduler.guards_tools:
                return None
            fmt = get_format(format or self._wire)
            parsed = fmt.parse_tool_call(tool_call)
            if not parsed.id:
                raise ToolError("tool call has no id; it cannot be answered")
            text = self._scheduler.blocked(parsed.name, self._mirror.state.scheduler)
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
            handoff = self._scheduler.accept_handoff(args)
            with self._writing():
                declared = self._scheduler.declare(handoff, cid, self._mirror.state.scheduler)
                self._set_state(scheduler=declared.state)
                self._mirror.save(declared.events)
                doc = self._aside("handoff", render_handoff(handoff))
            self._feeder.add([doc])
            self._state_dir.record(f"handoff-intent call={cid}")
            return declared.text

    def task_state(self) -> TaskState:
        """Return the task-state card: goal, invariants, next step, notes (``pager state export``)."""
        with self._lock:
            self._check_open()
            h = self.history
            goal = "\n".join(self._mirror.pins)
            if not goal and h.first_user is not None:
                goal = message_text(self.store.message(h.page[h.first_user])[1])
            handoff = self._scheduler.handoff(self._mirror.state.scheduler)
            if handoff is None:
                handoff = handoff_from_events(self.store.events(self.session))
            return task_state(goal, self.store.timeline(self.session), handoff, self.options.max_notes)

    def _outside_l1(self) -> list[str]:
        """Return the pin:N / note:N references not in the last prompt's card (issue 14: recallable)."""
        moved = [n.split(":", 1)[1] for n in (self.last_report.notices if self.last_report else ())
                 if n.startswith("l1-moved:")]
        shown = self._scheduler.notes_shown
        return moved + [f"note:{i + 1}" for i in range(max(0, len(self._mirror.notes) - shown))]

    def reindex(self) -> int:
        """Rebuild the recall index from the store outright; return the pages indexed."""
        with self._lock:
            self._check_open()
            return self._feeder.rebuild()

    # -- pools ----------------------------------------------------------------------------

    def pools(self) -> dict[str, PoolAcl]:
        """Return the store's pool ACLs by pool name."""
        with self._lock:
            self._check_open()
            return self.store.pool_acls()

    def grant(self, pool: str, *, readers: Sequence[str] = (), writers: Sequence[str] = ()) -> PoolAcl:
        """Set who may read and write ``pool`` (identities; ``"*"`` is anyone); return the new ACL.

        A new pool's creator becomes one of its writers; changing an existing
        pool's ACL needs write access to it.
        """
        with self._lock:
            self._check_open()
            return self._pools.grant(pool, readers, writers)

    def promote(self, handle: str, to: str = "project", *, pool: str | None = None) -> PageRecord:
        """Move the page behind ``handle`` to a wider scope (``project`` needs ``pool``); return it.

        Needs write access where the page is and where it goes
        (``pager.core.pools.can_write``); recorded as an event with who and when.
        """
        with self._lock:
            self._check_open()
            return self._pools.move(handle, to, pool, promote=True)

    def demote(self, handle: str, to: str = "private", *, pool: str | None = None) -> PageRecord:
        """Move a ``session`` page to ``private`` (its owner only); the same rules as ``promote``.

        A promoted page (``project`` or ``shared``) is not demoted: promotion
        is a one-way gate and ``PromotionGateError`` says so. ``retire`` takes
        a page out of its pool, as a separate, recorded act.
        """
        with self._lock:
            self._check_open()
            return self._pools.move(handle, to, pool, promote=False)

    def retire(self, handle: str, *, reason: str) -> PageRecord:
        """Take the promoted page behind ``handle`` out of its pool; return it.

        The page leaves the pool's audience (other sessions no longer find,
        recall or expand it) and returns to the scope it had before its first
        promotion (``session`` for a page written straight into a pool). It is
        never deleted. Needs write access where the page is (a configured
        pool's writers; else the page's owner or session); recorded as a
        ``retire`` event with ``reason``, who and when.
        """
        reason = check_retire_reason(reason)
        with self._lock:
            self._check_open()
            return self._pools.retire(handle, reason)

    # -- lifecycle and introspection --------------------------------------------------------

    def __enter__(self) -> "Pager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PagerError("this pager is closed")

    def close(self) -> None:
        """Flush the recall index and close the store. Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                # counters changed by expand/search since the last assemble
                with self._writing():
                    self._mirror.save()
                self._mirror.save_snapshot()  # a reopen reads it instead of every page row (issue 23)
            except PagerError:
                pass  # the counters are statistics: a store that cannot take them must not block close
            finally:
                self._closed = True
                self._intake.clear()  # no call comes now
                try:
                    self._feeder.close()
                finally:
                    if self._owns_store:
                        self.store.close()

    def pins(self) -> list[str]:
        """Return the pinned goals, oldest first."""
        return list(self._mirror.pins)

    def notes(self) -> list[str]:
        """Return every note of the session, oldest first."""
        return list(self._mirror.notes)

    def stats(self) -> dict[str, Any]:
        """Return session counters: pages, faults, recall hits and precision, handles."""
        state = self._mirror.state
        useful = self._recorder.recall_useful
        return {
            "session": self.session,
            "pages": len(self.history),
            "calls": state.calls,
            "faults": state.faults,
            "recall_hits": state.recall_hits,
            "recall_useful": useful,
            "recall_precision": (useful / state.recall_hits) if state.recall_hits else None,
            "handles_issued": len(state.handles),
            "expanded": state.expanded,
            "demoted": len(state.demoted),
        }

def _clean_text(what: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{what} text must be a non-empty string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} text is not valid Unicode (a lone surrogate at {exc.start})") from None
    return text.strip()

