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
bulk build pays nothing for it).

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
posting lists cost 2 ms. The audiences of a page, by scope: ``session`` its
session; ``private`` its owner only (the owner defaults to the session);
``project`` its session and its pool (``"pool:<name>"``); ``shared`` its
session and everyone (``shared``). A query from session ``S`` reads key ``S``,
the keys of the ``audiences`` it names (its owner, the pools it may read:
the facade decides from the pools' ACLs, ``pager.core.pools``) and, with
``cross_session=True``, ``shared``; per word the best of those scores counts,
not their sum.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path
from collections.abc import Collection, Iterable

import attrs
import tantivy
from tantivy import Occur, Query

from pager.core.pages import SCOPES
from pager.errors import RecallIndexError

__all__ = ["Hit", "IndexDoc", "PageIndex", "SCOPES", "shared_index"]

log = logging.getLogger("pager.index")
# Another process holding Tantivy's writer lock is waited for this long (it holds it only while
# it commits) before the commit fails with RecallIndexError.
WRITER_WAIT_SECONDS = 30.0

MAX_QUERY_TERMS = 64
MAX_QUERY_CHARS = 4096
MAX_KEY_CHUNKS = 16
MAX_KEY_CHARS = 512  # paths, handles, labels: exact terms must stay under tantivy's term limit
STORED_TEXT_CHARS = 16_384  # snippets come from the stored prefix; the whole text is indexed
SNIPPET_CHARS = 200
WRITER_HEAP = 64_000_000
KEY_BOOST = 2.0
# A word on more than PRUNE_SHARE of the pages an audience sees (and on more
# than PRUNE_MIN_DF pages) is dropped from the query, keeping the PRUNE_KEEP
# rarest if all are that common: its BM25 weight is small, its posting list long.
PRUNE_SHARE = 0.2
PRUNE_MIN_DF = 2000
PRUNE_KEEP = 3
_SHARED = "shared"  # audience key of shared pages; session keys start with "h"
POOL_PREFIX = "pool:"  # a project pool's audience is the hash of "pool:<name>"
_META = "upto"
_OVERFETCH = 8  # extra candidates so ties at the cut are broken by page_id, not doc order

# Han, kana, Hangul (and their compatibility / extension blocks).
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+"
)
# Dropped from queries (unless nothing else is left): they match most pages
# and make the disjunction slow without changing which page wins.
_STOPWORDS = frozenset(
    "a an and are as at be by do for from has have i if in is it its no not of on or "
    "that the this to was we were will with you".split()
)
_CHUNK_STRIP = "\"'`()[]{}<>,;!?"


@attrs.frozen
class IndexDoc:
    """One page as the index sees it; built by the store."""

    page_id: int
    session: str
    step: int
    kind: str
    text: str
    labels: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    path: str | None = None
    handle: str | None = None
    owner: str = ""  # empty means the page's session
    scope: str = attrs.field(default="session", validator=attrs.validators.in_(SCOPES))
    pool: str | None = None  # the project pool of a "project" page


@attrs.frozen
class Hit:
    """One recalled page: where it came from, its BM25 score and a short excerpt."""

    page_id: int
    session: str
    step: int
    kind: str
    score: float
    path: str | None
    handle: str | None
    snippet: str
    owner: str | None = None
    pool: str | None = None
    scope: str = "session"


def _clean(s: str) -> str:
    """Return ``s`` encodable as UTF-8 (lone surrogates become '?')."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


def _bigrams(text: str) -> list[str]:
    """Cut every CJK run of ``text`` into overlapping bigrams (a lone character stays)."""
    out: list[str] = []
    for run in _CJK_RUN.findall(text):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _audience(name: str) -> str:
    """Return the JSON key for a session or owner, hashed so dots cannot break the path."""
    return "h" + hashlib.blake2b(name.encode("utf-8", "replace"), digest_size=8).hexdigest()


def _build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("page_id", stored=True, indexed=True, fast=True)
    sb.add_integer_field("step", stored=True)
    sb.add_text_field("session", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("kind", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("owner", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("pool", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("scope", stored=True, tokenizer_name="raw", index_option="basic")
    # JSON fields keyed by audience (see the module docstring).
    sb.add_json_field("text", tokenizer_name="pg_text", index_option="freq")
    sb.add_json_field("cjk", tokenizer_name="whitespace", index_option="freq")
    sb.add_json_field("key", tokenizer_name="pg_key", index_option="basic")
    # Stored, not indexed: a text field would index the whole prefix as one raw term.
    sb.add_bytes_field("body", stored=True)
    sb.add_text_field("path", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("handle", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("meta", tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("upto", stored=True)
    sb.add_integer_field("max_id", stored=True)
    return sb.build()


_SCHEMA = _build_schema()
_TEXT_ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(64))
    .filter(tantivy.Filter.lowercase())
    .build()
)
_KEY_ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw()).filter(tantivy.Filter.lowercase()).build()
)


class PageIndex:
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
        self._pending_max = 0
        self._index = self._open()
        try:
            self._start()
        except RecallIndexError as e:
            if self._path is None:
                raise
            # damage that opening did not notice (a segment file missing or cut short) shows on
            # the first read: derived data, so start it again
            log.warning("recall index at %s is damaged (%s); starting it again", self._path, e)
            self._index = self._searcher = None  # type: ignore[assignment]
            self._wipe()
            self._index = self._open_disk()
            self._start()

    def _start(self) -> None:
        try:
            self._index.register_tokenizer("pg_text", _TEXT_ANALYZER)
            self._index.register_tokenizer("pg_key", _KEY_ANALYZER)
            self._index.config_reader(reload_policy="Manual")
            self._index.reload()
            self._searcher = self._index.searcher()
            self._upto, self._max_id, self._has_meta = self._read_meta()
        except (ValueError, OSError, RuntimeError) as e:
            raise RecallIndexError(f"cannot read the recall index: {e}") from e

    # -- opening -------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        """Open or create the index; recreate it if its schema or format is stale, or it is damaged."""
        if self._path is None:
            return tantivy.Index(_SCHEMA)
        try:
            return self._open_disk()
        except RecallIndexError as e:
            # derived data: a damaged index (a crash mid-commit, a stray file) is rebuilt, never fatal
            log.warning("recall index at %s is damaged (%s); starting it again", self._path, e)
            self._wipe()
            return self._open_disk()

    def _open_disk(self) -> tantivy.Index:
        assert self._path is not None
        try:
            self._path.mkdir(parents=True, exist_ok=True)
            p = str(self._path)
            if tantivy.Index.exists(p) and not tantivy.Index.is_compatible(p):
                self._wipe()
            try:
                return tantivy.Index(_SCHEMA, p, reuse=True)
            except ValueError as e:
                if "schema does not match" not in str(e):
                    raise
                # Written by another pager version: derived data, so start over;
                # indexed_upto() will read 0 and the store re-feeds everything.
                self._wipe()
                return tantivy.Index(_SCHEMA, p, reuse=True)
        except (ValueError, OSError) as e:
            raise RecallIndexError(f"cannot open the recall index at {self._path}: {e}") from e

    def _wipe(self) -> None:
        assert self._path is not None
        shutil.rmtree(self._path, ignore_errors=True)
        self._path.mkdir(parents=True, exist_ok=True)

    def _read_meta(self) -> tuple[int, int, bool]:
        hits = self._searcher.search(Query.term_query(_SCHEMA, "meta", _META), 1).hits
        if not hits:
            return 0, 0, False
        doc = self._searcher.doc(hits[0][1])
        return int(doc.get_first("upto") or 0), int(doc.get_first("max_id") or 0), True

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
        # give Tantivy's lock back to the other writers, after its merge threads finished:
        # nothing of ours may write to the folder once commit (or close) returned
        w, self._writer = self._writer, None
        if w is not None:
            try:
                w.wait_merging_threads()
            except (ValueError, OSError, RuntimeError) as e:
                log.warning("recall index: waiting for merges failed: %s", e)

    # -- writing -------------------------------------------------------------

    def add(self, docs: Iterable[IndexDoc]) -> int:
        """Buffer pages for the next ``commit``; return how many were added.

        A page id already indexed (or already added in this batch) replaces
        the older document instead of duplicating it.
        """
        n = 0
        with self._lock:
            try:
                for d in docs:
                    pid = d.page_id
                    self._buffer[pid] = self._to_doc(d)
                    self._deletes.discard(pid)
                    self._pending.add(pid)
                    if pid > self._pending_max:
                        self._pending_max = pid
                    n += 1
            except (ValueError, OSError, RuntimeError) as e:
                raise RecallIndexError(f"cannot add to the recall index: {e}") from e
        return n

    @staticmethod
    def _to_doc(d: IndexDoc) -> tantivy.Document:
        session = _clean(d.session)
        owner = _clean(d.owner) if d.owner else session
        home, own = _audience(session), _audience(owner)
        # who may read it: its session; its owner only; its session and a project pool; everyone
        if d.scope == "private":
            audiences = [own]
        elif d.scope == "project" and d.pool:
            audiences = [home, _audience(POOL_PREFIX + _clean(d.pool))]
        elif d.scope == "shared":
            audiences = [home, _SHARED]
        else:
            audiences = [home]
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

    def commit(self, upto_page_id: int | None = None) -> None:
        """Publish buffered pages and record ``upto`` atomically with them.

        ``upto_page_id`` is the highest store page id the index now covers;
        ``None`` keeps the larger of the recorded value and the highest id added.
        """
        with self._lock:
            w = self._w()
            try:
                # another process may have committed since we last looked: its ids decide
                # which of ours replace a document, and its watermark is kept if higher
                self._reload()
                their_upto, their_max, _ = self._read_meta()
                upto = max(self._upto, self._pending_max) if upto_page_id is None else upto_page_id
                upto = max(upto, their_upto)
                max_id = max(self._max_id, their_max, self._pending_max)
                known = max(self._max_id, their_max)
                for pid in self._deletes:
                    w.delete_documents_by_term("page_id", pid)
                for pid, doc in self._buffer.items():
                    if pid <= known:
                        w.delete_documents_by_term("page_id", pid)
                    w.add_document(doc)
                w.delete_documents_by_term("meta", _META)
                meta = tantivy.Document()
                meta.add_text("meta", _META)
                meta.add_integer("upto", upto)
                meta.add_integer("max_id", max_id)
                w.add_document(meta)
                w.commit()
            except (ValueError, OSError, RuntimeError) as e:
                self._rollback()
                # the traceback keeps this frame alive: a writer left in it would hold Tantivy's
                # lock, and the caller's rebuild (in its except block) would wait for it in vain
                w = None
                raise RecallIndexError(f"cannot commit the recall index: {e}") from e
            finally:
                self._release()
            self._upto, self._max_id, self._has_meta = upto, max_id, True
            self._buffer.clear()
            self._deletes.clear()
            self._pending.clear()
            self._pending_max = 0
            self._reload()

    def _rollback(self) -> None:
        self._buffer.clear()
        self._deletes.clear()
        self._pending.clear()
        self._pending_max = 0
        if self._writer is not None:
            try:
                self._writer.rollback()
            except (ValueError, OSError, RuntimeError):
                pass
            self._writer = None  # a fresh writer starts from the last commit

    def _reload(self) -> None:
        try:
            self._index.reload()
            self._searcher = self._index.searcher()
        except (ValueError, OSError, RuntimeError) as e:
            raise RecallIndexError(f"cannot reload the recall index: {e}") from e

    @property
    def pending(self) -> int:
        """Return how many pages were added since the last commit.

        A commit on disk costs tens of milliseconds (fsync), so callers
        should commit per batch (or before a search that needs new pages),
        not per page.
        """
        return len(self._pending)

    def indexed_upto(self) -> int:
        """Return the highest store page id committed to the index (0 if none)."""
        return self._upto

    def delete(self, page_ids: Iterable[int]) -> None:
        """Buffer removal of pages (visible after the next ``commit``)."""
        with self._lock:
            for pid in page_ids:
                self._buffer.pop(pid, None)
                self._pending.discard(pid)
                self._deletes.add(pid)

    def clear(self) -> None:
        """Drop every page and reset ``indexed_upto`` to 0 (a rebuild starts here)."""
        with self._lock:
            w = self._w()
            try:
                w.delete_all_documents()
                w.commit()
            except (ValueError, OSError, RuntimeError) as e:
                self._rollback()
                w = None  # as in commit: no writer may outlive the call in a traceback
                raise RecallIndexError(f"cannot clear the recall index: {e}") from e
            finally:
                self._release()
            self._upto = self._max_id = 0
            self._has_meta = False
            self._buffer.clear()
            self._deletes.clear()
            self._pending.clear()
            self._pending_max = 0
            self._reload()

    def close(self) -> None:
        """Release the writer; pages added but not committed are discarded."""
        w, self._writer = self._writer, None
        self._buffer.clear()
        self._pending.clear()
        if w is not None:
            try:
                w.rollback()
                w.wait_merging_threads()
            except (ValueError, OSError, RuntimeError) as e:
                raise RecallIndexError(f"cannot close the recall index: {e}") from e
            finally:
                del w
        # drop the searcher and index too: tantivy's reader keeps a thread that
        # may touch the directory until the objects are freed, which races with
        # a caller removing the folder right after close()
        self._searcher = None  # type: ignore[assignment]
        self._index = None  # type: ignore[assignment]
        import gc

        gc.collect()

    def __enter__(self) -> PageIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Return the number of committed pages."""
        with self._lock:
            return self._searcher.num_docs - (1 if self._has_meta else 0)

    def page_ids(self) -> set[int]:
        """Return the ids of every committed page (a consistency check reads them; O(pages))."""
        with self._lock:
            self._reload()
            try:
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
            except (ValueError, OSError, RuntimeError) as e:
                raise RecallIndexError(f"cannot read the recall index: {e}") from e

    # -- searching -----------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        session: str,
        k: int = 5,
        exclude: Collection[int] = (),
        kinds: Collection[str] | None = None,
        cross_session: bool = False,
        min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching free text ``query``, best first.

        A query reads its session's pages, plus the pages of each name in
        ``audiences`` (an owner's private pages, ``"pool:<name>"`` for a project
        pool), plus shared pages with ``cross_session``.

        Never raises on odd input: syntax characters, empty, huge, emoji or
        CJK queries are all fine (huge ones are cut to 4 KB / 64 terms).
        """
        q = _clean(query[:MAX_QUERY_CHARS])
        with self._lock:
            self._reload()  # a person or the agent asked: see what other writers committed
        return self._run(
            _TEXT_ANALYZER.analyze(q), _bigrams(q), q.split(),
            session, k, exclude, kinds, cross_session, min_score, audiences,
        )  # fmt: skip

    def search_terms(
        self,
        terms: Iterable[str],
        *,
        session: str,
        k: int = 5,
        exclude: Collection[int] = (),
        kinds: Collection[str] | None = None,
        cross_session: bool = False,
        min_score: float = 0.0,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        """Return up to ``k`` pages matching pre-extracted ``terms``, best first.

        Each term is analyzed like page text, so "pager/index.py" matches its
        words and, boosted, a page whose path is exactly that.
        """
        words: list[str] = []
        grams: list[str] = []
        chunks: list[str] = []
        size = 0
        for t in terms:
            t = _clean(t[:MAX_QUERY_CHARS])
            size += len(t)
            if size > MAX_QUERY_CHARS or len(words) >= MAX_QUERY_TERMS:
                break
            words.extend(_TEXT_ANALYZER.analyze(t))
            grams.extend(_bigrams(t))
            chunks.append(t)
        return self._run(words, grams, chunks, session, k, exclude, kinds, cross_session, min_score, audiences)

    def _run(
        self,
        words: list[str],
        grams: list[str],
        chunks: list[str],
        session: str,
        k: int,
        exclude: Collection[int],
        kinds: Collection[str] | None,
        cross_session: bool,
        min_score: float,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        if k <= 0:
            return []
        words = list(dict.fromkeys(words))
        kept = [w for w in words if w not in _STOPWORDS]
        words = (kept or words)[:MAX_QUERY_TERMS]
        grams = list(dict.fromkeys(grams))[:MAX_QUERY_TERMS]
        keys = [c.strip(_CHUNK_STRIP).lower() for c in chunks[:MAX_KEY_CHUNKS]]
        keys = list(dict.fromkeys("=" + c[:MAX_KEY_CHARS] for c in keys if c))
        if not words and not grams:
            return []
        try:
            with self._lock:
                return self._query(
                    words, grams, keys, session, k, exclude, kinds, cross_session, min_score, audiences
                )
        except (ValueError, OSError, RuntimeError) as e:
            raise RecallIndexError(f"recall query failed: {e}") from e

    def _query(
        self,
        words: list[str],
        grams: list[str],
        keys: list[str],
        session: str,
        k: int,
        exclude: Collection[int],
        kinds: Collection[str] | None,
        cross_session: bool,
        min_score: float,
        audiences: Collection[str] = (),
    ) -> list[Hit]:
        home = _audience(_clean(session))
        readers = [home] + [_audience(_clean(a)) for a in audiences if a]
        readers += [_SHARED] if cross_session else []
        paths = [f"{{}}.{r}" for r in dict.fromkeys(readers)]

        def term(field: str, value: str) -> Query:
            qs = [Query.term_query(_SCHEMA, p.format(field), value) for p in paths]
            return qs[0] if len(qs) == 1 else Query.disjunction_max_query(qs)

        words = self._prune(words, paths)
        clauses = [(Occur.Should, term("text", w)) for w in words]
        clauses += [(Occur.Should, term("cjk", g)) for g in grams]
        clauses += [(Occur.Should, Query.boost_query(term("key", c), KEY_BOOST)) for c in keys]
        if kinds is not None:
            kinds = [_clean(x) for x in kinds]
            if not kinds:
                return []
            kq = Query.const_score_query(Query.term_set_query(_SCHEMA, "kind", kinds), 0.0)
            # Nested, so the kind filter intersects the matches instead of
            # turning every page of that kind into a zero-score candidate.
            clauses = [(Occur.Must, Query.boolean_query(clauses)), (Occur.Must, kq)]
        s = self._searcher
        # Excluded pages are filtered after the search: a must_not term set over
        # hundreds of ids cost more than the whole query; over-fetching by
        # len(exclude) still guarantees k survivors.
        excluded = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        limit = k + _OVERFETCH + len(excluded)
        found = s.search(Query.boolean_query(clauses), limit, count=False).hits
        if not found:
            return []
        pids = s.fast_field_values("page_id", [a for _, a in found])
        ranked = sorted(
            (
                (score, pid, addr)
                for (score, addr), pid in zip(found, pids)
                if pid not in excluded and score > 0.0 and score >= min_score
            ),
            key=lambda r: (-r[0], -r[1]),
        )[:k]
        needles = sorted(set(words) | set(grams), key=len, reverse=True)[:16]
        return [self._hit(s.doc(addr), pid, score, needles) for score, pid, addr in ranked]

    def _prune(self, words: list[str], paths: list[str]) -> list[str]:
        """Drop words so common in the audience's pages that they only cost time."""
        s = self._searcher
        seen = sum(s.doc_freq(p.format("key"), "=") for p in paths)
        if seen <= PRUNE_MIN_DF:
            return words  # no word can be common enough to matter
        fields = [p.format("text") for p in paths]
        df = {w: sum(s.doc_freq(f, w) for f in fields) for w in words}
        limit = max(seen * PRUNE_SHARE, PRUNE_MIN_DF)
        kept = [w for w in words if df[w] <= limit]
        return kept or sorted(words, key=df.__getitem__)[:PRUNE_KEEP]

    @staticmethod
    def _hit(doc: tantivy.Document, pid: int, score: float, needles: list[str]) -> Hit:
        return Hit(
            page_id=pid,
            session=doc.get_first("session"),
            step=doc.get_first("step"),
            kind=doc.get_first("kind"),
            score=score,
            path=doc.get_first("path"),
            handle=doc.get_first("handle"),
            snippet=_snippet((doc.get_first("body") or b"").decode(), needles),
            owner=doc.get_first("owner"),
            pool=doc.get_first("pool"),
            scope=doc.get_first("scope") or "session",
        )


def _snippet(text: str, needles: list[str]) -> str:
    """Return about ``SNIPPET_CHARS`` of ``text`` around the earliest needle, on one line."""
    low = text.lower()
    if len(low) != len(text):  # a few characters change length when lowered
        low = text
    best = len(low)
    for n in needles:
        i = low.find(n, 0, best + len(n))
        if 0 <= i < best:
            best = i
    if best == len(low):
        best = 0
    start = max(0, best - SNIPPET_CHARS // 4)
    out = " ".join(text[start : start + SNIPPET_CHARS].split())
    if start > 0:
        out = "…" + out
    if start + SNIPPET_CHARS < len(text):
        out += "…"
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
