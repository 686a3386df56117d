"""The recall index on disk: opening it, loading searchers, and healing it when damaged (a mixin of ``PageIndex``).

See ``pager.storage.index_files`` for what counts as damage and how it is
found; this mixin applies it: a damaged folder is moved aside, an empty index
started in its place, and a store bound with ``bind_source`` rebuilds it, at
open or at any later call (``_guarded``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import tantivy

from pager.errors import PagerError, RecallIndexError
from pager.storage.index_files import IndexDamage, is_damage, move_aside, tighten, verify
from pager.storage.index_schema import _SCHEMA

__all__ = ["DiskMixin"]

log = logging.getLogger("pager.index")
_T = TypeVar("_T")


class _Damaged(RecallIndexError):
    """The index on disk is damaged: set it aside and rebuild it (callers see ``RecallIndexError``)."""


class _StaleFormat(Exception):
    """The index was written under another ``INDEX_FORMAT``: rebuild it."""


@contextlib.contextmanager
def damage_as(what: str, *keep: type[BaseException]) -> Iterator[None]:
    """Raise damage a Tantivy call reports as ``_Damaged("<what>: …")``; other errors, and ``keep``, as they are."""
    try:
        yield
    except keep:
        raise
    except BaseException as e:
        if not is_damage(e):
            raise
        raise _Damaged(f"{what}: {e}") from e


class DiskMixin:
    """Opening and healing of ``PageIndex`` (which provides ``_start`` and the buffers)."""

    _path: Path | None
    _lock: threading.RLock
    _writer: Any
    _index: Any
    _searcher: Any
    _sources: list[Any]
    _checked: set[tuple[str, int]]
    _healing: bool
    set_aside: int
    _buffer: dict[int, Any]
    _deletes: set[int]
    _pending: set[int]
    _pending_max: int
    generation: int
    _seen_stamp: tuple[int, int] | None
    _memo: dict[Any, Any]
    _recount_beyond: Callable[[], None]  # SearchMixin's (after this mixin in PageIndex's bases): beyond_session again

    def _start(self) -> None:  # provided by PageIndex
        raise NotImplementedError

    def _discard(self) -> None:  # provided by PageIndex: drop every page added and not committed
        raise NotImplementedError

    def _open_disk(self) -> None:
        """Open or create the index at ``self._path``; a stale format starts again; ``_Damaged`` otherwise."""
        assert self._path is not None
        p = self._path
        with damage_as(f"cannot open the recall index at {p}", _Damaged):
            if os.path.lexists(p) and not p.is_dir():
                raise IndexDamage(f"{p} is not a folder")
            p.mkdir(mode=0o700, parents=True, exist_ok=True)
            verify(p, self._checked)
            where = str(p)
            if tantivy.Index.exists(where) and not tantivy.Index.is_compatible(where):
                self._wipe()
            try:
                self._index = tantivy.Index(_SCHEMA, where, reuse=True)
            except ValueError as e:
                if "schema does not match" not in str(e):
                    raise
                # Written by another pager version: derived data, so start over;
                # indexed_upto() will read 0 and the store re-feeds everything.
                self._wipe()
                self._index = tantivy.Index(_SCHEMA, where, reuse=True)
            try:
                self._start()
            except _StaleFormat:
                log.info("recall index at %s has an older format; rebuilding it from the store", p)
                self._drop()
                self._wipe()
                self._index = tantivy.Index(_SCHEMA, where, reuse=True)
                self._start()
            tighten(p)

    def _drop(self) -> None:
        """Let go of Tantivy's objects (the writer's lock first) before the folder is moved or removed."""
        w, self._writer = self._writer, None
        if w is not None:
            try:
                w.rollback()
            except BaseException as e:
                if not is_damage(e):
                    raise
            del w
        self._searcher = None  # type: ignore[assignment]
        self._index = None  # type: ignore[assignment]

    def _set_aside(self, why: BaseException) -> None:
        """Move the damaged folder aside and start an empty index in its place (never the store)."""
        assert self._path is not None
        self._settled()  # a background commit's merges write in the folder until they end
        self._drop()
        where = move_aside(self._path)
        log.warning("recall index at %s is damaged (%s); moved aside to %s, rebuilding it from the store",
                    self._path, why, where)
        self.set_aside += 1
        self._checked.clear()
        self._discard()  # the rebuild reads every page from the store
        try:
            self._open_disk()
        except _Damaged as e:
            raise RecallIndexError(f"cannot start a new recall index at {self._path}: {e}") from e

    def _refresh(self) -> None:
        """Load a new searcher only if a commit landed since the last one was loaded (``meta.json``'s opstamp moved).

        A merge rewrites ``meta.json`` with the opstamp it found, so this
        object's own merges load nothing (``index_behind``: the answers stay
        those of the state the commit left, whenever the merges end).
        """
        with self._lock:
            if self._path is None:
                return  # in RAM only this object commits, and each of its commits loads a searcher
            seen = self._seen_stamp
            if seen is None or self._meta_stamp() != seen:
                self._reload()

    def _reload(self) -> None:
        with damage_as("cannot reload the recall index"):
            self._load_searcher()

    def _load_searcher(self) -> None:
        # meta.json is read *before* the reload: a commit landing in between leaves an older
        # copy, so the next refresh loads once more, where the other order could skip a commit
        stamp = self._meta_stamp()
        self._index.reload()
        self._searcher = self._index.searcher()
        self._seen_stamp = stamp
        self.generation += 1
        self._memo.clear()
        self._recount_beyond()

    def _meta_stamp(self) -> tuple[int, int] | None:
        """Return which commit the folder shows: its inode and ``meta.json``'s opstamp (None in RAM or unreadable).

        The inode tells a folder another process set aside and started again
        (its opstamps start over) from the one the searcher was loaded from.
        """
        if self._path is None:
            return None
        try:
            with open(self._path / "meta.json", "rb") as f:
                return os.stat(self._path).st_ino, int(orjson.loads(f.read())["opstamp"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # not written yet, moved aside, or not Tantivy's: the caller reloads

    def bind_source(self, source: Any) -> None:
        """Register what can rebuild this index (``source.rebuild(index)``) and knows its pages (``present``)."""
        with self._lock:
            self._sources.append(source)

    def unbind_source(self, source: Any) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def _heal(self, why: BaseException) -> bool:
        """Set the damaged index aside and rebuild it from a bound store; False when that is not possible."""
        if self._path is None or self._healing or not self._sources:
            return False
        self._healing = True
        try:
            self._set_aside(why)
            self._sources[-1].rebuild(self)
        finally:
            self._healing = False
        return True

    def _present(self, page_ids: list[int]) -> set[int] | None:
        """Return which of ``page_ids`` the store has (None when no store is bound: all are taken)."""
        if not self._sources or not page_ids:
            return None
        try:
            return self._sources[-1].present(page_ids)
        except PagerError as e:  # the store cannot say now: show the hits rather than none
            log.warning("recall index: cannot check hits against the store: %s", e)
            return None

    def _join(self) -> None:  # provided by BehindMixin (index_behind): wait for a background commit
        raise NotImplementedError

    def _settled(self) -> None:  # provided by BehindMixin: wait for a background commit's merges
        raise NotImplementedError

    def _guarded(self, what: str, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` (Tantivy calls); on damage heal and run it once more; every failure is typed.

        A background commit is waited for first: ``fn`` sees what it committed.
        """
        self._join()
        with self._lock:
            try:
                return fn()
            except RecallIndexError as e:
                if not isinstance(e, _Damaged) or not self._heal(e):
                    raise RecallIndexError(str(e)) from e
            except PagerError:
                raise  # the caller's error (a bad argument), or the store's: not the index's damage
            except BaseException as e:
                if not is_damage(e):
                    raise
                if not self._heal(e):
                    raise RecallIndexError(f"{what}: {e}") from e
            try:
                return fn()
            except PagerError as e:
                if not isinstance(e, RecallIndexError):
                    raise
                raise RecallIndexError(f"{what}, even after a rebuild: {e}") from e
            except BaseException as e:
                if not is_damage(e):
                    raise
                raise RecallIndexError(f"{what}, even after a rebuild: {e}") from e

    def _wipe(self) -> None:
        assert self._path is not None
        shutil.rmtree(self._path, ignore_errors=True)
        self._path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._checked.clear()

