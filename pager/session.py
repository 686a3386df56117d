"""A session over its store: opening it, resolving its options, its mirror and state.

``open_store`` opens a folder, ``":memory:"``, a ``postgresql://`` URL or a
``Store`` instance. ``resolve_options`` gives a session its options (a
reopened session keeps the ones it was last opened with). ``SessionMirror``
is one part of the facade (``pager.pager.Pager``): the session's history
mirror, pins and notes as the store has them, and its ``SessionState``, the
frozen value every call reads and replaces; it loads them, catches up with
other writers inside each write transaction, and saves the state.

Where the state is persisted: one row per session (``Store.save_state``)::

    {"demoted": [...], "faults": N, "calls": N,
     <scheduler key>: the scheduler's dump(state),    "layout" (paging) or "rollover"
     <another scheduler's key>: kept as it was}        a session reopened in another mode

written in the same transaction as the call's pages and events. Stores
written before the rollover state moved into that row kept it in the
settings table (``rollover:<session>``): read once, when the row has none.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import attrs

import orjson

from pager.core.describe import encode_problem
from pager.core.heat import HeatPolicy, get_policy
from pager.core.history import History
from pager.core.terms import extract_terms
from pager.errors import ConfigError, PagerError
from pager.options import Options, load_config
from pager.schedulers.base import Scheduler
from pager.storage.base import Store, branch_columns, is_store

__all__ = ["SessionMirror", "SessionState", "check_session_name", "open_store", "resolve_options"]

MEMORY = ":memory:"
# rows before a session's history is snapshotted other than at close (``SessionMirror.save_snapshot``)
SNAPSHOT_ROWS = 4096


def open_store(where: str | os.PathLike[str] | Store, *, must_exist: bool = False) -> Store:
    """Return the store ``where`` names: a ``Store`` as is, ``":memory:"``, a URL or a folder."""
    if is_store(where):
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


def check_session_name(session: Any) -> str:
    """Return ``session`` if it can name a session; ``ConfigError`` otherwise."""
    if not isinstance(session, str) or not session:
        raise ConfigError("session must be a non-empty string")
    try:
        session.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError("session name is not valid Unicode (a lone surrogate)") from None
    return session


def resolve_options(
    store: Store, session: str, context_window: int | None, config: Any, options: dict[str, Any]
) -> tuple[Options, HeatPolicy]:
    """Return the session's options and heat policy, and save the options with the session.

    A reopened session keeps the options it was last opened with unless new
    ones (``config`` or keywords) are given.
    """
    saved = store.setting(f"options:{session}")
    restoring = bool(saved) and config is None and not options
    base = orjson.loads(saved) if restoring else {}
    base.update(load_config(config))
    policy = options.get("policy")
    if policy is not None and not isinstance(policy, str):
        # a policy class or instance: schedule with it, persist its registry name and params
        instance = get_policy(policy)
        options["policy"] = instance.name
        options["policy_params"] = {**instance.params(), **dict(options.get("policy_params") or {})}
    # saved options reopen as they were; given ones are checked for their mode (a wrong-mode option)
    resolved = (Options.restore if restoring else Options.build)(base, context_window=context_window, **options)
    # validate the policy before persisting: a bad option must not poison later reopens
    heat = get_policy(resolved.policy, **dict(resolved.policy_params))
    try:
        saved_options = orjson.dumps(resolved.to_dict()).decode()
    except orjson.JSONEncodeError as exc:  # a lone surrogate in a path or name option
        raise ConfigError(f"the options cannot be saved with the session: {encode_problem(exc)}") from None
    store.set_setting(f"options:{session}", saved_options)
    return resolved, heat


_ROW_FIGURES = ("demoted", "faults", "calls")


@attrs.frozen(slots=True)
class SessionState:
    """One session's figures and its scheduler's state: the value each call reads and replaces.

    ``scheduler``, ``demoted``, ``faults`` and ``calls`` are persisted (the
    state row, see the module docstring); ``others`` are the row's entries
    of other schedulers, kept as they are. The rest are this process's
    figures since it opened the session.
    """

    scheduler: Any = None  # the scheduler's own state value
    calls: int = 0
    faults: int = 0
    demoted: frozenset[int] = frozenset()
    others: Mapping[str, Any] = attrs.field(factory=dict)
    handles: frozenset[str] = frozenset()  # every handle issued
    recall_hits: int = 0
    expanded: int = 0
    checkpoint_unread: bool = False  # the session reopened its checkpoint files; the model has not seen them

    def row(self, scheduler: Scheduler[Any]) -> dict[str, Any]:
        """Return the state row to save."""
        return {**self.others, scheduler.key: scheduler.dump(self.scheduler), "demoted": _sorted(self.demoted),
                "faults": self.faults, "calls": self.calls}


# The demoted set changes at rounds only, and is saved at every call: its sorted list is kept per set (by
# identity; the set is held, so its id is not reused), so a call does not sort O(history) ids again. The
# list is shared: a store serialises it, nothing changes it.
_SORTED: dict[int, tuple[frozenset[int], list[int]]] = {}
_SORTED_MAX = 16


def _sorted(ids: frozenset[int]) -> list[int]:
    """Return ``sorted(ids)`` (a list the caller must not change), kept for the same set object."""
    got = _SORTED.get(id(ids))
    if got is not None and got[0] is ids:
        return got[1]
    out = sorted(ids)
    if len(_SORTED) >= _SORTED_MAX:
        _SORTED.clear()
    _SORTED[id(ids)] = (ids, out)
    return out


class SessionMirror:
    """One session's history mirror, pins, notes and ``SessionState`` over its store; see the module docstring."""

    def __init__(self, store: Store, session: str, counter: Any, scheduler: Scheduler[Any]) -> None:
        self.store = store
        self.session = session
        self.counter = counter
        self.scheduler = scheduler
        self.state = SessionState()
        self.prev_out: Sequence[Mapping[str, Any]] | None = None  # the last prompt's messages
        self.generation = 0  # how many times the mirror was rebuilt from the store
        self.load()

    # -- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the mirror and the state from the store (the figures of this process are kept)."""
        # the version first: a writer committing while the rest is read leaves this one behind it,
        # so the next write catches up (read after, it would hide those pages for good)
        version = self.store.lock_session(self.session)
        branch = self.store.ensure_session(self.session)
        self.history = History(self.session, self.counter)
        self.history.load(branch_columns(self.store, branch), branch, lambda pid: self.store.message(pid)[1])
        self.snapshot_rows = len(self.history)  # what the store's snapshot covers, at most
        self._load_state()
        self.version = version

    def _load_state(self) -> None:
        """Read the state row, pins and notes (pins and notes change only through this object: read once)."""
        row = self.store.load_state(self.session) or {}
        self.pins = self.store.pins(self.session)
        self.notes = self.store.notes(self.session)
        self.pin_terms = frozenset().union(*(extract_terms(p) for p in self.pins))
        key = self.scheduler.key
        saved = row.get(key)
        legacy = self.scheduler.legacy_setting
        if key not in row and legacy:
            raw = self.store.setting(legacy + self.session)  # a store written before the row held it
            saved = orjson.loads(raw) if raw else None
        self.state = attrs.evolve(
            self.state, scheduler=self.scheduler.load(saved), demoted=frozenset(row.get("demoted", ())),
            faults=int(row.get("faults", 0)), calls=int(row.get("calls", 0)),
            others={k: v for k, v in row.items() if k != key and k not in _ROW_FIGURES},
        )

    # -- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Run a write in one store transaction, after catching up with any other writer of the session.

        The store raises a session's version on every write; finding a version
        this object did not write means another process or ``Pager`` recorded
        pages, notes or state since: reload them first, so the caller's history
        is matched against everything recorded (no duplicate, no spurious
        branch). On error the store rolls back and so does the mirror.
        """
        try:
            with self.store.transaction():
                if self.store.lock_session(self.session) != self.version:
                    self.refresh()
                yield
                self.version = self.store.lock_session(self.session)
        except BaseException:
            self.reload()
            raise
        if len(self.history) >= max(SNAPSHOT_ROWS, 2 * self.snapshot_rows):
            try:  # after the commit, in a transaction of its own: a failure here loses nothing
                self.save_snapshot()
            except PagerError:
                pass

    def refresh(self) -> None:
        """Catch up with another writer: reload what changed (the whole mirror only if pages did)."""
        head = self.store.ensure_session(self.session)
        if head == self.history.branch and self.store.branch_page_ids(head) == self.history.page:
            self._load_state()
            self.prev_out = None
            return
        self.reload()

    def reload(self) -> None:
        """Rebuild the in-memory state from the store (after a rollback, or another writer's pages)."""
        self.load()
        self.prev_out = None
        self.generation += 1

    def save_snapshot(self) -> bool:
        """Keep a snapshot of the mirror in the store, if it keeps them (``SQLiteStore.save_snapshot``).

        Outside ``writing``, in a transaction of its own, after the last
        write: the store skips it when another writer moved the session on.
        A reopen then reads one blob instead of every page row. Called at
        close, and after a write once the history has doubled since the
        last one (at least ``SNAPSHOT_ROWS`` rows): a process that dies
        without closing leaves one covering at least half its rows, and the
        writes cost O(1) a row, amortised.
        """
        save = getattr(self.store, "save_snapshot", None)
        self.snapshot_rows = len(self.history)
        return bool(save(self.session, self.version, self.history)) if save is not None else False

    def save(self, events: Sequence[tuple[str, Any]] = ()) -> None:
        """Save the state row and ``events`` (inside ``writing``)."""
        self.store.save_state(self.session, self.state.row(self.scheduler))
        for kind, payload in events:
            self.store.add_event(self.session, kind, payload)

    def add_pin(self, text: str) -> None:
        self.pins.append(text)
        self.pin_terms = self.pin_terms | extract_terms(text)
