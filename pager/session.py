"""A session's state over its store: opening, loading, saving. The facade's base class.

``Session`` opens the store (a folder, ``":memory:"``, a ``postgresql://``
URL or a ``Store`` instance), resolves the session's options (a reopened
session keeps the ones it was last opened with), rebuilds the history mirror
from the head branch, brings the recall index up to date and builds the
scheduler. ``Pager`` (``pager.pager``) adds the public verbs.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import attrs

import orjson

from pager.core.describe import encode_problem
from pager.core.heat import get_policy
from pager.core.history import History
from pager.core.messages import message_text
from pager.core.plan import Layout, SlotKind
from pager.core.pools import Reader, audiences, can_read
from pager.core.terms import extract_terms
from pager.errors import ConfigError, PagerError, StoreError
from pager.options import Options, load_config
from pager.schedulers.base import RecallHit, RecallSource, ScheduleResult
from pager.schedulers.paging import PagingCall, PagingScheduler, RecallRequest
from pager.schedulers.rollover import SETTING_PREFIX, RolloverController
from pager.storage.base import Store
from pager.storage.indexing import IndexFeeder

__all__ = ["Session", "open_store"]

MEMORY = ":memory:"


def open_store(where: str | os.PathLike[str] | Store, *, must_exist: bool = False) -> Store:
    """Return the store ``where`` names: a ``Store`` as is, ``":memory:"``, a URL or a folder."""
    if isinstance(where, Store):
        return where
    if isinstance(where, str) and where == MEMORY:
        from pager.storage.memory import MemoryStore

        return MemoryStore()
    if isinstance(where, str) and where.startswith(("postgresql://", "postgres://")):
        try:
            from pager.storage.postgres import open_store as open_postgres
        except ImportError as exc:
            raise ConfigError(
                "a postgresql:// store needs the PostgreSQL extra: pip install 'llm-context-pager[postgres]'"
            ) from exc
        return open_postgres(where)
    if not isinstance(where, (str, os.PathLike)):
        raise ConfigError(f"a store is a folder, ':memory:', a postgresql:// URL or a Store, not {type(where).__name__}")
    path = os.fspath(where)
    if not path or "\x00" in path:
        raise ConfigError(f"{path!r} is not a usable store path")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate no file system name can hold
        raise ConfigError(f"{path!r} is not a usable store path (not valid Unicode)") from None
    from pager.storage.sqlite import DB_NAME, SQLiteStore

    if must_exist and not (Path(path) / DB_NAME).exists():
        raise ConfigError(f"{path} holds no pager store (no {DB_NAME})")
    return SQLiteStore(path)


class Session:
    """One session's loaded state; see the module docstring."""

    def __init__(
        self,
        where: str | os.PathLike[str] | Store,
        session: str,
        context_window: int | None,
        *,
        config: str | os.PathLike[str] | Mapping[str, Any] | None,
        counter: Any,
        options: dict[str, Any],
    ) -> None:
        if not isinstance(session, str) or not session:
            raise ConfigError("session must be a non-empty string")
        try:
            session.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError("session name is not valid Unicode (a lone surrogate)") from None
        self.session = session
        self.counter = counter
        self._closed = True
        self._owns_store = not isinstance(where, Store)
        self.store: Store = open_store(where)
        self.path = Path(self.store.path) if getattr(self.store, "path", None) else None
        self._feeder: IndexFeeder | None = None
        try:
            self._setup(context_window, config, options)
        except BaseException:
            # a bad option or a broken index must not leave the store open
            if self._feeder is not None:
                self._feeder.close()
            if self._owns_store:
                self.store.close()
            raise
        self._closed = False

    def _setup(
        self, context_window: int | None, config: Any, options: dict[str, Any]
    ) -> None:
        saved = self.store.setting(f"options:{self.session}")
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
        try:
            saved_options = orjson.dumps(self.options.to_dict()).decode()
        except orjson.JSONEncodeError as exc:  # a lone surrogate in a path or name option
            raise ConfigError(f"the options cannot be saved with the session: {encode_problem(exc)}") from None
        self.store.set_setting(f"options:{self.session}", saved_options)
        self._calls = self._faults = self._recall_hits = self._recall_useful = self._expanded = 0
        self._handles: set[str] = set()
        self._demoted: set[int] = set()
        self._prev_out: Sequence[Mapping[str, Any]] | None = None  # the last prompt's messages
        self._feeder = IndexFeeder(self.store)
        self._paging = PagingScheduler(self.options, self.counter, self.policy)
        self._load()

    # -- loading and saving -------------------------------------------------------------

    def _load(self) -> None:
        # the version first: a writer committing while the rest is read leaves this one behind it,
        # so the next write catches up (read after, it would hide those pages for good)
        version = self.store.lock_session(self.session)
        branch = self.store.ensure_session(self.session)
        ids = self.store.branch_page_ids(branch)
        records = self.store.load_pages(ids)
        self.history = History(self.session, self.counter)
        self.history.load(records, branch, lambda pid: self.store.message(pid)[1])
        state = self.store.load_state(self.session) or {}
        self._layout = Layout.from_state(state.get("layout"))
        # pins and notes change only through this object: read them once, not per call
        self._pins = self.store.pins(self.session)
        self._notes = self.store.notes(self.session)
        self._pin_terms = frozenset().union(*(extract_terms(p) for p in self._pins))
        self._demoted = set(state.get("demoted", ()))
        self._faults = int(state.get("faults", 0))
        self._calls = int(state.get("calls", 0))
        # rollover mode: the window controller stands in for the paging planner
        self._rollover: RolloverController | None = None
        if self.options.mode == "rollover":
            raw = self.store.setting(SETTING_PREFIX + self.session)
            self._rollover = RolloverController(
                self.options, self.counter, self.session, orjson.loads(raw) if raw else None
            )
            self._rollover.state_text = getattr(self, "_state_text", "")  # the checkpoint files survive a reload
        self._version = version

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Run a write in one store transaction, after catching up with any other writer of the session.

        The store raises a session's version on every write; finding a version
        this object did not write means another process or ``Pager`` recorded
        pages, notes or state since: reload them first, so the caller's history
        is matched against everything recorded (no duplicate, no spurious
        branch). On error the store rolls back and so does the mirror.
        """
        try:
            with self.store.transaction():
                if self.store.lock_session(self.session) != self._version:
                    self._refresh()
                yield
                self._version = self.store.lock_session(self.session)
        except BaseException:
            self._reload()
            raise

    def _refresh(self) -> None:
        """Catch up with another writer: reload what changed (the whole mirror only if pages did)."""
        head = self.store.ensure_session(self.session)
        if head == self.history.branch and self.store.branch_page_ids(head) == self.history.page:
            state = self.store.load_state(self.session) or {}
            self._layout = Layout.from_state(state.get("layout"))
            self._demoted = set(state.get("demoted", ()))
            self._faults = int(state.get("faults", 0))
            self._calls = int(state.get("calls", 0))
            self._pins = self.store.pins(self.session)
            self._notes = self.store.notes(self.session)
            self._pin_terms = frozenset().union(*(extract_terms(p) for p in self._pins))
            self._prev_out = None
            return
        self._reload()

    def _reload(self) -> None:
        """Rebuild the in-memory state from the store (after a rollback, or another writer's pages)."""
        self._load()
        self._prev_out = None
        self._generation = getattr(self, "_generation", 0) + 1  # the mirror was rebuilt
        recorder = getattr(self, "_recorder", None)
        if recorder is not None:
            recorder.reset(self.history)

    def _state(self) -> dict[str, Any]:
        return {
            "layout": self._layout.to_state() if self._layout and self._rollover is None else None,
            "demoted": sorted(self._demoted),
            "faults": self._faults,
            "calls": self._calls,
        }

    def _save(self, result: ScheduleResult) -> None:
        self.store.save_state(self.session, self._state())
        if self._rollover is not None:
            self._save_rollover(result.state, result.events)

    def _save_rollover(self, state: Mapping[str, Any] | None, events: Sequence[tuple[str, Any]]) -> None:
        if state is not None:
            self.store.set_setting(SETTING_PREFIX + self.session, orjson.dumps(state).decode())
        for kind, payload in events:
            self.store.add_event(self.session, kind, payload)

    @staticmethod
    def _layout_from(state: Mapping[str, Any]) -> Layout | None:
        return Layout.from_state(state.get("layout"))

    # -- scheduler inputs -------------------------------------------------------------------

    def _search_recall(self, req: RecallRequest, history: History | None = None,
                       messages: Sequence[Mapping[str, Any]] | None = None) -> list[RecallHit]:
        # no index flush here: a tantivy commit costs ~100 ms, and pages not yet
        # committed are the newest ones, which are in the prompt anyway
        pools = self.options.recall_pools
        refresh = getattr(self._feeder.index, "refresh", None)
        if pools and refresh is not None:
            refresh()  # other processes' commits: their pools' pages are candidates too (~0.1 ms)
        acls = self.store.pool_acls() if pools else {}  # read once: a round trip on a database server
        hits = self._feeder.index.search_terms(
            # twice the candidates when pools are read: other sessions' pages must not crowd out our own
            list(req.terms), session=self.session, k=req.k * 2 if pools else req.k, exclude=set(req.exclude),
            min_score=req.min_score,
            cross_session=pools, audiences=audiences(self._reader(), acls) if pools else (),
        )
        own = [hit for hit in hits if hit.session == self.session][: req.k]  # what a session-only search finds
        foreign = self._foreign_hits([hit.page_id for hit in hits if hit.session != self.session][: req.k], acls)
        found = {h.page_id: h for h in foreign}
        row_of = (history if history is not None else self.history).row_of
        for hit in own:
            # not another branch's page, nor this session's own pin, note or handoff (the card has them)
            r = row_of.get(hit.page_id)
            if r is not None:
                # the caller's messages are the history's rows: the text is at hand, no read per hit (issue 23)
                msg = messages[r] if messages is not None else self.store.message(hit.page_id)[1]
                found[hit.page_id] = RecallHit(hit.page_id, message_text(msg))
        return [found[hit.page_id] for hit in hits if hit.page_id in found]  # best first, as the index ranked them

    def _reader(self) -> Reader:
        return Reader(self.session, self.options.owner)

    def _audiences(self) -> tuple[str, ...]:
        """Return the index audiences this session reads beside its own: its owner, its readable pools."""
        return audiences(self._reader(), self.store.pool_acls())

    def _foreign_hits(self, page_ids: Sequence[int], acls: Mapping[str, Any] | None = None) -> list[RecallHit]:
        """Return the pages of other sessions among ``page_ids`` that this session may read now, with their source.

        Checked on the stored page, not only by the index: a page demoted or a
        pool closed since the index saw it is not shown.
        """
        if not page_ids:
            return []
        reader = self._reader()
        acls = self.store.pool_acls() if acls is None else acls
        out = []
        for rec in self.store.load_pages(list(page_ids)):
            if rec.session == self.session or not can_read(rec, reader, acls):
                continue
            written = time.strftime("%Y-%m-%d", time.gmtime(rec.created)) if rec.created else None
            terms = frozenset(rec.terms) if rec.terms is not None else None
            text = message_text(self.store.message(rec.id)[1])
            source = RecallSource(
                session=rec.session, handle=rec.handle, kind=rec.kind, step=rec.step, path=rec.path, pool=rec.pool,
                owner=rec.owner, written=written, terms=terms if terms is not None else extract_terms(text),
            )
            out.append(RecallHit(rec.id, text, source))
        return out

    def _kept_foreign(self) -> list[RecallHit]:
        """Return the other sessions' pages the last prompt's recall blocks show, if still readable."""
        if self._layout is None:
            return []
        row_of = self.history.row_of
        ids = [p for s in self._layout.slots if s.kind == SlotKind.RECALL for p in s.pages if p not in row_of]
        try:
            return self._foreign_hits(ids)
        except StoreError:
            return []  # a page gone from the store: the planner rebuilds without its block

    def _paging_call(self, messages: Sequence[Mapping[str, Any]], tools_tokens: int, hits: list[RecallHit],
                     history: History | None = None) -> PagingCall:
        return PagingCall(
            history=history if history is not None else self.history, messages=messages, pins=self._pins,
            notes=self._notes,
            pin_terms=self._pin_terms, tools_tokens=tools_tokens, prev=self._layout, prev_out=self._prev_out,
            hits=hits, demoted=frozenset(self._demoted), kept=self._kept_foreign(),
        )

    def _schedule_behind(self, messages: Sequence[Mapping[str, Any]], tools: list[Any], tools_tokens: int,
                         reread: Mapping[str, str] | None = None) -> ScheduleResult:
        """Plan a request behind the recorded branch on its prefix; the result is shown, never persisted.

        The layout, the previous prompt and the rollover window stay the newer
        request's, so the conversation's cached prefix is what it was.
        """
        view = self.history.prefix(len(messages))
        if self._rollover is not None:
            window = RolloverController(self.options, self.counter, self.session, self._rollover.to_state())
            window.state_text = self._rollover.state_text
            return window.assemble(view, messages, tools, self._pins, self._notes)
        req = self._paging.recall_request(view, self._layout)
        hits = self._search_recall(req, view, messages) if req is not None else []
        call = self._paging_call(messages, tools_tokens, hits, view)
        return self._paging.schedule(call if reread is None else attrs.evolve(call, reread=reread))

    def _add_pin(self, text: str) -> None:
        self._pins.append(text)
        self._pin_terms = self._pin_terms | extract_terms(text)

    # -- lifecycle and introspection --------------------------------------------------------

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PagerError("this pager is closed")

    def close(self) -> None:
        """Flush the recall index and close the store. Idempotent."""
        if self._closed:
            return
        try:
            # counters changed by expand/search since the last assemble
            with self._writing():
                self.store.save_state(self.session, self._state())
        except PagerError:
            pass  # the counters are statistics: a store that cannot take them must not block close
        finally:
            self._closed = True
            try:
                if self._feeder is not None:
                    self._feeder.close()
            finally:
                if self._owns_store:
                    self.store.close()

    def pins(self) -> list[str]:
        """Return the pinned goals, oldest first."""
        return list(self._pins)

    def notes(self) -> list[str]:
        """Return every note of the session, oldest first."""
        return list(self._notes)

    def stats(self) -> dict[str, Any]:
        """Return session counters: pages, faults, recall hits and precision, handles."""
        useful = getattr(getattr(self, "_recorder", None), "recall_useful", self._recall_useful)
        return {
            "session": self.session,
            "pages": len(self.history),
            "calls": self._calls,
            "faults": self._faults,
            "recall_hits": self._recall_hits,
            "recall_useful": useful,
            "recall_precision": (useful / self._recall_hits) if self._recall_hits else None,
            "handles_issued": len(self._handles),
            "expanded": self._expanded,
            "demoted": len(self._demoted),
        }
