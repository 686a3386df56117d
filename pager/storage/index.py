"""The recall index (L3): every page, searchable by words, paths, handles and labels.

Theory of operation
-------------------
The index is derived from the SQLite store and can always be rebuilt from it.
The store feeds pages with ``add`` and then calls ``commit(upto_page_id)``.
The commit writes the pages *and* a meta document holding ``upto`` in one
Tantivy commit, so the two are atomic: if the process dies before the commit
lands, ``indexed_upto()`` still reports the old value and the store re-feeds the
missing pages. Re-feeding is safe because ``add`` deletes any document with the
same ``page_id`` before adding (only when that id may already be present, so a
bulk build pays nothing for it). A commit adds its meta document beside the
ones before it and the watermark is the highest any holds (``upto`` and
``max_id`` never decrease); every ``META_KEEP`` commits one replaces them all.
Replacing it at every commit left a deleted document in every segment, and
Tantivy's merges copy a segment's stored fields block by block only when it
has none: otherwise they decompress and compress them again, which was about
half of what the merges after a commit cost (issue 23).

Queries are never fed to Tantivy's query parser. Terms are extracted with the
same analyzer the ``text`` field uses, so syntax characters are just
separators; CJK runs are cut into bigrams on both sides (Tantivy's tokenizers
keep a run of Han characters as one token, so "换窗" would not match
"上下文换窗"); whole whitespace-separated chunks are matched exactly, and
boosted, against paths, handles and labels. The terms are OR-ed and scored by
BM25; a kind filter scores zero, and excluded pages are dropped after the search.

Visibility is built into the terms, not checked by a filter: each page's
words are indexed under one JSON key per *audience* allowed to see it, so a
query walks only the posting lists of what its reader may see. That is what
keeps a query near 0.2 ms at 100k pages where a session filter over global
posting lists cost 2 ms. The audiences of a page are the one rule of
``pager.core.pools.page_audiences``, typed so that no name crosses kinds:
``session`` its session (``s:S``); ``private`` its owner only (``o:O``, the
owner defaulting to the session's name); ``project`` its session and its pool
(``p:P``); ``shared`` its session and everyone (``shared``). A query from
session ``S`` reads ``s:S``, the typed ``audiences`` it names (its owner, the
pools it may read: the facade decides from the pools' ACLs) and, with
``cross_session=True``, ``shared``; per word the best of those scores counts,
not their sum. The keys are hashes of the typed audiences.

Damage (``pager.storage.index_files``): on open every committed file is
checked against its checksum; any Tantivy failure at open or at a call is
damage, and the folder is moved aside, started again and rebuilt from the
store the feeder bound (``bind_source``), then the call runs once more. Hits
whose page the store lacks (phantoms) are dropped from results.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tantivy
from tantivy import Query

from pager.core.pools import page_audiences
from pager.errors import RecallIndexError
from pager.storage.index_schema import (
    _KEY_ANALYZER,
    _META,
    _SCHEMA,
    _TEXT_ANALYZER,
    INDEX_FORMAT,
    MAX_KEY_CHARS,
    SCOPES,
    STORED_TEXT_CHARS,
    Hit,
    IndexDoc,
    _audience,
    _bigrams,
    _clean,
)
from pager.storage.index_behind import BehindMixin
from pager.storage.index_disk import DiskMixin, _Damaged, _StaleFormat, damage_as
from pager.storage.index_files import is_damage, tighten
from pager.storage.index_search import SearchMixin

__all__ = ["Hit", "IndexDoc", "PageIndex", "SCOPES", "shared_index"]

log = logging.getLogger("pager.index")
# Another process holding Tantivy's writer lock is waited for this long (it holds it only while
# it commits) before the commit fails with RecallIndexError.
WRITER_WAIT_SECONDS = 30.0
WRITER_HEAP = 64_000_000
# Meta documents kept side by side before a commit replaces them all (the module docstring says why).
# Few: each counts in BM25's document count, as the deleted one did until a merge dropped it.
META_KEEP = 16

class PageIndex(BehindMixin, DiskMixin, SearchMixin):
    """A Tantivy index of pages, searched for page-fault recall.

    ``path=None`` keeps the index in RAM (tests). Added pages are buffered
    in this object; ``commit`` takes Tantivy's writer (waiting while another
    process holds it), applies the batch, commits and releases the writer
    again, so any number of processes can feed one index. Methods are
    serialised by a lock, so threads may share one object (``shared_index``
    hands out one per folder per process). The searcher is reused until the
    next commit. Every tantivy failure surfaces as ``RecallIndexError``.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._path = Path(path) if path is not None else None
        self._writer: tantivy.IndexWriter | None = None
        self._lock = threading.RLock()
        self._buffer: dict[int, tantivy.Document] = {}  # page id -> document, added since the last commit
        self._deletes: set[int] = set()
        self._pending: set[int] = set()  # ids added since the last commit
        # those of them that no session but their own may read (scope "session": ``buffered_session_ids``)
        self._own: set[int] = set()
        self._pending_max = 0
        self._keys: set[str] = set()  # the audience keys of the buffered pages (``beyond_session``)
        # ``add`` appends here and never waits: a background commit holds ``_lock`` while it runs, and
        # the next call's pages need not wait for it (issue 23). Whoever next takes ``_lock`` to read
        # or commit the buffer moves these into it first (``_drain``), in the order they came.
        self._inbox: list[tuple[int, tantivy.Document, tuple[str, ...], bool]] = []
        self._inbox_lock = threading.Lock()
        self._sources: list[Any] = []  # what rebuilds this index and knows its pages (IndexFeeder binds them)
        self._checked: set[tuple[str, int]] = set()  # committed files whose checksum was found good
        self._healing = False
        self.set_aside = 0  # damaged folders this object moved aside (a test and the chaos harness read it)
        self._searcher: tantivy.Searcher = None  # type: ignore[assignment]
        # Which committed state the searcher shows: bumped at every load of a searcher, so a
        # memoized search (``SearchMixin``) is never served from another state than its own.
        self.generation = 0
        self._seen_stamp: tuple[int, int] | None = None  # meta.json's opstamp when the searcher was loaded
        self._memo: dict[tuple[Any, ...], tuple[list[str], list[tuple[float, int, Any]]]] = {}
        # a commit under way in the background (``commit(wait=False)``), and how it failed
        self._bg: threading.Thread | None = None
        self._bg_ready = threading.Event()
        self._settling: threading.Thread | None = None  # a background commit waiting for its merges
        self._bg_failed: tuple[BaseException, int | None] | None = None
        self._bg_keys: frozenset[str] = frozenset()  # the audience keys of the pages it commits
        self._beyond: dict[tuple[int, tuple[str, ...]], bool] = {}  # beyond_session's answers, per generation
        self._alone: int | None = None  # while a commit holds the writer: the generation it builds on
        if self._path is None:
            self._index = tantivy.Index(_SCHEMA)
            self._start()
            return
        try:
            self._open_disk()
        except _Damaged as e:
            self._set_aside(e)  # the feeder that opened us rebuilds it from the store (it reads 0 indexed)

    def _start(self) -> None:
        """Register the analyzers, load a searcher and read the meta document (any failure is damage)."""
        with damage_as("cannot read the recall index", _StaleFormat):
            self._index.register_tokenizer("pg_text", _TEXT_ANALYZER)
            self._index.register_tokenizer("pg_key", _KEY_ANALYZER)
            self._index.config_reader(reload_policy="Manual")
            self._load_searcher()
            self._upto, self._max_id, _metas = self._read_meta()

    def _read_meta(self) -> tuple[int, int, int]:
        """Return the watermark the meta documents hold (their highest ``upto``, ``max_id``) and their number."""
        query = Query.term_query(_SCHEMA, "meta", _META)
        found = self._searcher.search(query, META_KEEP + 1, count=True)
        hits = found.hits
        if found.count > len(hits):  # more than one writer's between two replacements: read them all
            hits = self._searcher.search(query, found.count).hits
        upto = max_id = 0
        for _score, addr in hits:
            doc = self._searcher.doc(addr)
            if int(doc.get_first("format") or 0) != INDEX_FORMAT:
                raise _StaleFormat()
            upto = max(upto, int(doc.get_first("upto") or 0))
            max_id = max(max_id, int(doc.get_first("max_id") or 0))
        return upto, max_id, len(hits)

    def _meta_count(self) -> int:
        return int(self._searcher.search(Query.term_query(_SCHEMA, "meta", _META), 1, count=True).count)

    def _w(self) -> tantivy.IndexWriter:
        """Take Tantivy's writer, waiting while another process holds its lock."""
        if self._writer is not None:
            return self._writer
        deadline = time.monotonic() + WRITER_WAIT_SECONDS
        pause = 0.005
        while True:
            try:
                self._writer = self._index.writer(heap_size=WRITER_HEAP, num_threads=1)
                return self._writer
            except ValueError as e:
                busy = "lock" in str(e).lower()
                if not busy or time.monotonic() > deadline:
                    raise RecallIndexError(
                        f"cannot write the recall index at {self._path}: {e}"
                    ) from e
                time.sleep(pause)
                pause = min(pause * 2, 0.2)

    def _release(self) -> None:
        """Let go of the writer this object holds, after its merges (``_settle``)."""
        w, self._writer = self._writer, None
        if w is not None:
            self._settle(w)

    def _settle(self, w: tantivy.IndexWriter | None) -> None:
        # give Tantivy's lock back to the other writers, after its merge threads finished:
        # nothing of ours may write to the folder once the writer is let go
        if w is None:
            return
        try:
            w.wait_merging_threads()
        except BaseException as e:
            if not is_damage(e):
                raise
            log.warning("recall index: waiting for merges failed: %s", e)
        if self._path is not None:
            tighten(self._path)  # the merged segments' files: 0600, as the store's

    # -- writing -------------------------------------------------------------

    def add(self, docs: Iterable[IndexDoc]) -> int:
        """Buffer pages for the next ``commit``; return how many were added.

        A page id already indexed (or already added in this batch) replaces
        the older document instead of duplicating it. Never waits for a
        background commit: that one commits what was buffered when it was
        asked for, and these pages come with the next.
        """
        try:
            made = [(d.page_id, self._to_doc(d), self._keys_of(d), d.scope == "session") for d in docs]
        except BaseException as e:
            if not is_damage(e):
                raise
            raise RecallIndexError(f"cannot add to the recall index: {e}") from e
        with self._inbox_lock:
            self._inbox.extend(made)
        return len(made)

    def _drain(self) -> None:
        """Move what ``add`` left in the inbox into the buffer (under ``_lock``)."""
        with self._inbox_lock:
            came, self._inbox = self._inbox, []
        for pid, doc, keys, own in came:
            self._buffer[pid] = doc
            self._deletes.discard(pid)
            self._pending.add(pid)
            if own:
                self._own.add(pid)
            else:
                self._own.discard(pid)
            if pid > self._pending_max:
                self._pending_max = pid
            self._keys.update(keys)

    def _take(self) -> tuple[dict[int, tantivy.Document], set[int], int, frozenset[str]]:
        """Return the buffer as a batch to commit and start an empty one (under ``_lock``)."""
        self._drain()
        batch = (self._buffer, self._deletes, self._pending_max, frozenset(self._keys))
        self._buffer, self._deletes, self._pending, self._pending_max, self._keys = {}, set(), set(), 0, set()
        self._own = set()
        return batch

    def _discard(self) -> None:
        """Drop every page added and not committed (the inbox too)."""
        with self._inbox_lock:
            self._inbox = []
        self._buffer.clear()
        self._deletes.clear()
        self._pending.clear()
        self._own.clear()
        self._pending_max = 0
        self._keys.clear()

    @staticmethod
    def _keys_of(d: IndexDoc) -> tuple[str, ...]:
        return tuple(_audience(a) for a in page_audiences(d.scope, d.session, d.owner or None, d.pool))

    @staticmethod
    def _to_doc(d: IndexDoc) -> tantivy.Document:
        session = _clean(d.session)
        owner = _clean(d.owner) if d.owner else session
        # who may read it: the one rule of pager.core.pools, as typed audience keys
        audiences = [_audience(a) for a in page_audiences(d.scope, d.session, d.owner or None, d.pool)]
        text = _clean(d.text)
        labels = [_clean(x) for x in d.labels]
        words = [text, *labels]
        keys = list(labels)
        doc = tantivy.Document()
        doc.add_integer("page_id", d.page_id)
        doc.add_integer("step", d.step)
        doc.add_text("session", session)
        doc.add_text("kind", d.kind)
        if d.owner:
            doc.add_text("owner", owner)
        if d.pool:
            doc.add_text("pool", _clean(d.pool))
        doc.add_text("scope", d.scope)
        if d.path:
            path = _clean(d.path)
            doc.add_text("path", path)
            words.append(path)
            keys.append(path)
            keys.append(path.rsplit("/", 1)[-1])  # "index.py" finds ".../pager/index.py"
        if d.handle:
            doc.add_text("handle", d.handle)
            keys.append(d.handle)
        # JSON fields index a string that parses as an RFC 3339 date as a date,
        # not text: a trailing space (text) or "=" prefix (keys) prevents that.
        words = [x + " " if x[:1].isdigit() and len(x) < 64 else x for x in words]
        # The bare "=" counts the pages an audience sees (for query pruning).
        keys = ["="] + ["=" + x[:MAX_KEY_CHARS] for x in keys]
        doc.add_json("text", {a: words for a in audiences})
        doc.add_json("key", {a: keys for a in audiences})
        if not text.isascii():
            grams = _bigrams(text)
            if grams:
                joined = " ".join(grams)
                doc.add_json("cjk", {a: joined for a in audiences})
        doc.add_bytes("body", text[:STORED_TEXT_CHARS].encode())
        return doc

    def commit(self, upto_page_id: int | None = None, *, wait: bool = True) -> None:
        """Publish buffered pages and record ``upto`` atomically with them.

        ``upto_page_id`` is the highest store page id the index now covers;
        ``None`` keeps the larger of the recorded value and the highest id added.
        A damaged index is set aside and rebuilt from the store first.

        ``wait=False`` commits in a background thread and returns at once:
        tantivy-py releases the GIL while it commits, so the ~100 ms of a
        commit on disk (mostly fsync) overlap the caller's work or its wait
        for the model. Every later use of this object (a search, ``add``,
        ``delete``, ``commit``, ``clear``, ``close``, ``len``, ``pending``,
        ``indexed_upto``, a refresh) waits for it first, so what any of them
        sees is exactly what it saw when the commit ran in the caller's thread.
        A commit that failed raises its error there, typed as it would have been
        (``RecallIndexError``; a damaged index is set aside and rebuilt first).
        """
        self._join()
        if not wait:
            if self._start_behind(upto_page_id):
                return
            self._join()  # another thread's commit started since: wait for it, commit here
        self._settled()
        self._guarded("cannot commit the recall index", lambda: self._settle(self._commit(upto_page_id)))

    def _commit(self, upto_page_id: int | None, batch: Any = None) -> tantivy.IndexWriter:
        """Commit ``batch`` (``_take``: a background commit's, taken when it was asked for), else the buffer.

        Return the writer, still holding Tantivy's lock while its merges run:
        the caller lets it go with ``_settle``. The searcher is loaded before
        the merges end (``index_behind`` says why the answers do not depend on when they end).
        """
        with self._lock:
            buffer, deletes, pending_max, _keys = self._take() if batch is None else batch
            w = self._w()
            committed = False
            try:
                # another process may have committed since we last looked: its ids decide
                # which of ours replace a document, and its watermark is kept if higher
                self._refresh()
                # from here to the release of the writer no other process can commit: a change of
                # meta.json is ours (this commit, its merges), the searcher's generation says on what
                self._alone = self.generation
                their_upto, their_max, metas = self._read_meta()
                upto = max(self._upto, pending_max) if upto_page_id is None else upto_page_id
                upto = max(upto, their_upto)
                max_id = max(self._max_id, their_max, pending_max)
                known = max(self._max_id, their_max)
                for pid in deletes:
                    w.delete_documents_by_term("page_id", pid)
                for pid, doc in buffer.items():
                    if pid <= known:
                        w.delete_documents_by_term("page_id", pid)
                    w.add_document(doc)
                if metas >= META_KEEP:  # this one replaces them (their highest values are in it)
                    w.delete_documents_by_term("meta", _META)
                meta = tantivy.Document()
                meta.add_text("meta", _META)
                meta.add_integer("upto", upto)
                meta.add_integer("max_id", max_id)
                meta.add_integer("format", INDEX_FORMAT)
                w.add_document(meta)
                w.commit()
                committed = True
            except BaseException as e:
                if not is_damage(e):
                    self._rollback()
                    raise
                self._rollback()
                # the traceback keeps this frame alive: a writer left in it would hold Tantivy's
                # lock, and the caller's rebuild (in its except block) would wait for it in vain
                w = None
                raise _Damaged(f"cannot commit the recall index: {e}") from e
            finally:
                self._alone = None  # before the writer's lock is let go
                if committed:
                    self._writer = None  # the caller's now, until its merges end (``_settle``)
                else:
                    self._release()
            if self._path is not None:
                tighten(self._path)  # the new segment's files: 0600, as the store's
            self._upto, self._max_id = upto, max_id
            try:
                self._reload()
            except BaseException:
                self._settle(w)  # no writer may outlive a failed call (a rebuild would wait for it)
                raise
            return w

    def _rollback(self) -> None:
        # the batch being committed is dropped (the store re-feeds it on the next open, or a rebuild
        # does); pages added since it was taken stay buffered for the next commit
        if self._writer is not None:
            try:
                self._writer.rollback()
            except BaseException as e:
                if not is_damage(e):
                    raise
            self._writer = None  # a fresh writer starts from the last commit

    def refresh(self) -> None:
        """See what other processes committed since (a reader that never writes calls this).

        Costs a read of ``meta.json`` when nothing was committed since: the
        searcher, and the searches memoized on it, are kept.
        """
        self._guarded("cannot reload the recall index", self._refresh)

    @property
    def pending(self) -> int:
        """Return how many pages were added since the last commit.

        A commit on disk costs tens of milliseconds (fsync), so callers
        should commit per batch (or before a search that needs new pages),
        not per page.
        """
        self._join()
        with self._lock:
            self._drain()
            return len(self._pending)

    def buffered_session_ids(self) -> frozenset[int]:
        """Return the ids of the pages added and not committed yet that no session but their own may read.

        Sessions of one process share this buffer: a session opened beside others that have not
        committed finds their newest pages here, not in the index, and ``heal_index`` leaves those of
        scope ``session`` to the commit that will take them.
        """
        self._join()
        with self._lock:
            self._drain()
            return frozenset(self._own)

    def indexed_upto(self) -> int:
        """Return the highest store page id committed to the index (0 if none)."""
        self._join()
        return self._upto

    def delete(self, page_ids: Iterable[int]) -> None:
        """Buffer removal of pages (visible after the next ``commit``)."""
        self._join()
        with self._lock:
            self._drain()
            for pid in page_ids:
                self._buffer.pop(pid, None)
                self._pending.discard(pid)
                self._own.discard(pid)
                self._deletes.add(pid)

    def clear(self) -> None:
        """Drop every page and reset ``indexed_upto`` to 0 (a rebuild starts here).

        A damaged index is set aside instead: a new empty one is as clear.
        """
        self._join()
        self._settled()
        with self._lock:
            try:
                self._clear()
            except _Damaged as e:
                if self._path is None:
                    raise RecallIndexError(str(e)) from e
                self._set_aside(e)

    def _clear(self) -> None:
        with self._lock:
            w = self._w()
            try:
                w.delete_all_documents()
                w.commit()
            except BaseException as e:
                self._rollback()
                self._discard()
                w = None  # as in commit: no writer may outlive the call in a traceback
                if not is_damage(e):
                    raise
                raise _Damaged(f"cannot clear the recall index: {e}") from e
            finally:
                self._release()
            self._upto = self._max_id = 0
            self._discard()
            self._reload()

    def close(self) -> None:
        """Release the writer; pages added but not committed are discarded.

        A background commit is waited for first (and its failure raised, after closing).
        """
        try:
            self._join()
        finally:
            try:
                self._settled()
            finally:
                self._close()

    def _close(self) -> None:
        w, self._writer = self._writer, None
        self._discard()
        if w is not None:
            try:
                w.rollback()
                w.wait_merging_threads()
            except BaseException as e:
                if not is_damage(e):
                    raise
                log.warning("recall index at %s: closing its writer failed: %s", self._path, e)
            finally:
                del w
        # drop the searcher and index too: tantivy's reader keeps a thread that
        # may touch the directory until the objects are freed, which races with
        # a caller removing the folder right after close(). Nothing else holds
        # them, so reference counting frees them here; a full gc.collect() cost
        # up to 0.5 s per close in a process with a large heap.
        self._searcher = None  # type: ignore[assignment]
        self._index = None  # type: ignore[assignment]

    def __enter__(self) -> PageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Return the number of committed pages."""
        return self._guarded("cannot read the recall index", self._len)

    def _len(self) -> int:
        with damage_as("cannot read the recall index"):
            return self._searcher.num_docs - self._meta_count()

    def page_ids(self) -> set[int]:
        """Return the ids of every committed page (a consistency check reads them; O(pages))."""
        return self._guarded("cannot read the recall index", self._page_ids)

    def _page_ids(self) -> set[int]:
        with self._lock:
            self._refresh()
            with damage_as("cannot read the recall index"):
                n = self._searcher.num_docs
                if not n:
                    return set()
                hits = self._searcher.search(Query.all_query(), n).hits
                out = set()
                for _score, addr in hits:
                    pid = self._searcher.doc(addr).get_first("page_id")
                    if pid is not None:
                        out.add(int(pid))
                return out

# -- one index per folder per process ------------------------------------------------

_OPEN: dict[str, tuple["PageIndex", int]] = {}
_OPEN_LOCK = threading.Lock()


class _SharedHandle:
    """A reference to a process-wide ``PageIndex``; ``close`` drops the reference."""

    def __init__(self, key: str, index: PageIndex) -> None:
        self._key = key
        self._index: PageIndex | None = index

    def __getattr__(self, name: str) -> object:
        index = self.__dict__.get("_index")
        if index is None:
            raise RecallIndexError("this recall index handle is closed")
        return getattr(index, name)

    def __len__(self) -> int:
        return len(self._target())

    def _target(self) -> PageIndex:
        if self._index is None:
            raise RecallIndexError("this recall index handle is closed")
        return self._index

    def close(self) -> None:
        if self._index is None:
            return
        self._index = None
        with _OPEN_LOCK:
            index, refs = _OPEN[self._key]
            if refs > 1:
                _OPEN[self._key] = (index, refs - 1)
                return
            del _OPEN[self._key]
        index.close()


def shared_index(path: str | os.PathLike[str]) -> PageIndex:
    """Return this process's index for folder ``path``, opening it on first use.

    Sessions of one store in one process share it (Tantivy allows one writer
    per folder): close each handle when done; the last close closes the index.
    """
    key = os.path.realpath(path)
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is None:
            index = PageIndex(path)
            _OPEN[key] = (index, 1)
        else:
            index = entry[0]
            _OPEN[key] = (index, entry[1] + 1)
    return _SharedHandle(key, index)  # type: ignore[return-value]
