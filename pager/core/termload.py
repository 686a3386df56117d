"""The reference index and the terms of a reopened history, built compactly. Pure.

A reopen hands the mirror every page's terms (about 37 a page: 1.9 M at
50k messages). Indexing them one by one (``TermIndex.add_page``) is a dict
operation per term in Python, ~2 s at 50k, and keeps a frozenset per page
(~100 MB). Here the loaded pages' postings are one compressed-sparse table
built by C calls (one pass to number the distinct terms, numpy to sort the
page ids by term); a term's list of page ids is made the first time a call
asks for it, and from then on is the ordinary, growing list ``TermIndex``
keeps. The pages recorded after the reopen are added as always. A page's
terms stay the tuple the store gave (``TermColumn``), read as a frozenset.
"""

from __future__ import annotations

import itertools
from collections import abc
from typing import Any, Iterable, Sequence

import numpy as np

from pager.core.terms import TermIndex

__all__ = ["LoadedTermIndex", "TermColumn", "TermRows", "TermTable", "postings"]


class TermTable:
    """A store's numbering of terms and one branch's pages' terms as those numbers (``SQLiteStore``).

    ``words[i]`` is term ``i`` and ``ids`` its inverse (the store's own, read
    only here; it may grow, with numbers past ``len(words)`` at load, which
    this table ignores); ``tid`` holds each page's term numbers one page
    after the other, ``lens`` how many each page has. Page ``r``'s terms are
    made (a frozenset) when asked for: a reopen makes no object per page.
    """

    __slots__ = ("words", "ids", "tid", "lens", "size", "posted", "_ends")

    def __init__(self, words: Sequence[str | None], ids: Any, tid: np.ndarray, lens: np.ndarray,
                 posted: np.ndarray | None = None) -> None:
        self.words = words
        self.ids = ids
        self.tid = tid
        self.lens = lens
        self.size = len(words)
        self.posted = posted  # ``postings`` of these pages, when the store kept it (a snapshot)
        self._ends: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lens)

    def numbers(self, r: int) -> np.ndarray:
        """Return page ``r``'s term numbers (a view)."""
        ends = self._ends
        if ends is None:
            ends = self._ends = np.zeros(len(self.lens) + 1, dtype=np.int64)
            np.cumsum(self.lens, out=ends[1:])
        return self.tid[ends[r] : ends[r + 1]]

    def row(self, r: int) -> frozenset[str]:
        """Return page ``r``'s terms."""
        return frozenset(map(self.words.__getitem__, self.numbers(r).tolist()))  # type: ignore[arg-type]

    def rows(self) -> "TermRows":
        """Return each page's terms, as a sequence of frozensets made on read."""
        return TermRows(self)


class TermRows(abc.Sequence):  # type: ignore[type-arg]
    """The pages' terms of a ``TermTable`` as a sequence (``PageColumns.terms``): each a frozenset, made on read."""

    __slots__ = ("table",)

    def __init__(self, table: TermTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.table.row(r) for r in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self.table.row(i % n)


class TermColumn(list):  # type: ignore[type-arg]
    """Per row, a page's terms: kept as stored (a tuple or a frozenset), read as a frozenset.

    Indexing a row returns a frozenset (built for that read when the row
    holds a tuple). Rows loaded with the store's numbers hold None and are
    read from ``table`` (its row ``r`` is row ``r`` here): no object per
    loaded page. A prefix slice is a ``TermColumn`` on the same table; any
    other slice reads its rows. Iterating yields the stored values.
    """

    __slots__ = ("table",)

    def __init__(self, values: Iterable[Any] = (), table: TermTable | None = None) -> None:
        super().__init__(values)
        self.table = table

    def __getitem__(self, i: Any) -> Any:
        value = list.__getitem__(self, i)
        if isinstance(i, slice):
            if self.table is None:
                return TermColumn(value)
            if i.start in (None, 0) and i.step in (None, 1):
                return TermColumn(value, self.table)
            return TermColumn([self[r] for r in range(*i.indices(len(self)))])
        if value is None:
            return self.table.row(i if i >= 0 else i + len(self))  # type: ignore[union-attr]
        return value if type(value) is frozenset else frozenset(value)

    def numbers(self, r: int) -> np.ndarray | None:
        """Return row ``r``'s term numbers when it holds them (a loaded row), else None."""
        if self.table is not None and list.__getitem__(self, r) is None:
            return self.table.numbers(r)
        return None


class _Postings(dict):  # type: ignore[type-arg]
    """term -> sorted page ids; a loaded term's list is made from the table on first read."""

    __slots__ = ("_vocab", "_start", "_pages")

    def __init__(self, vocab: dict[str, int], start: np.ndarray, pages: np.ndarray) -> None:
        super().__init__()
        self._vocab = vocab
        self._start = start
        self._pages = pages

    def _made(self, term: str) -> list[int] | None:
        i = self._vocab.get(term)
        if i is None or i + 1 >= len(self._start):  # unknown, or numbered after the load
            return None
        a, b = self._start[i], self._start[i + 1]
        if a == b:  # numbered by the store (another session's word) but on no page loaded here
            return None
        ids = self._pages[a:b].tolist()
        dict.__setitem__(self, term, ids)
        return ids

    def get(self, term: str, default: Any = None) -> Any:
        got = dict.get(self, term)
        if got is None:
            got = self._made(term)
        return default if got is None else got

    def __getitem__(self, term: str) -> list[int]:
        got = self.get(term)
        if got is None:
            raise KeyError(term)
        return got  # type: ignore[no-any-return]

    def __contains__(self, term: object) -> bool:
        return dict.__contains__(self, term) or self._made(term) is not None  # type: ignore[arg-type]


def postings(ids: Sequence[int], tid: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Return the page ids of ``ids`` (page ``i`` holding the ``lens[i]`` numbers next in ``tid``), by term, then id.

    Term ``t``'s pages are the run ``start[t]:start[t + 1]`` of the result,
    ``start`` the running count of the terms' occurrences.
    """
    pages = np.repeat(np.asarray(ids, dtype=np.int64), lens)
    if len(pages) and 0 <= pages.min() and pages.max() < 2**32:
        # one sort of (term, page id) keys: each term's run in id order, as a stable sort by term would
        # leave ascending ids (and a lexsort any others); numpy's int64 sort is the fastest it has
        key = np.asarray(tid, dtype=np.int64) << 32
        key |= pages
        del pages
        key.sort()
        key &= 0xFFFFFFFF
        posted = key
    else:  # ids a 32-bit key cannot hold (a store that numbers pages otherwise)
        posted = pages[np.lexsort((pages, tid))]
    if not len(posted) or posted.max() < 2**31:
        posted = posted.astype(np.int32)  # half the memory; ids read back as Python ints
    return posted


class LoadedTermIndex(TermIndex):
    """A ``TermIndex`` that starts from loaded pages' terms, indexed in bulk (see the module docstring)."""

    def __init__(
        self, max_df: int, ids: Sequence[int], terms: Sequence[Iterable[str]] | None, table: TermTable | None = None
    ) -> None:
        """Index pages ``ids`` under ``terms`` (one iterable per page) or, numbered by the store, ``table``."""
        super().__init__(max_df)
        if table is not None:  # numbered by the store: no word is looked at, a page's terms made on read
            self._loaded: dict[int, Any] = dict(zip(map(int, ids), range(len(ids))))
            self._row: Any = table.row
            vocab, size, tid, lens = table.ids, table.size, table.tid, table.lens
        else:
            assert terms is not None
            self._loaded = dict(zip(map(int, ids), terms))
            self._row = frozenset
            lens = np.fromiter(map(len, terms), dtype=np.int64, count=len(terms))
            flat = list(itertools.chain.from_iterable(terms))
            vocab = dict(zip(dict.fromkeys(flat), itertools.count()))
            size = len(vocab)
            tid = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
            del flat
        start = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(tid, minlength=size), out=start[1:])
        posted = table.posted if table is not None and table.posted is not None else None
        if posted is None or len(posted) != len(tid):
            posted = postings(ids, tid, lens)
        self._postings = _Postings(vocab, start, posted)

    def __len__(self) -> int:
        return len(self._terms) + len(self._loaded)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._terms or page_id in self._loaded

    def add_page(self, page_id: int, terms: Iterable[str]) -> None:
        page_id = int(page_id)
        loaded = self._loaded.pop(page_id, None)
        if loaded is not None:  # a loaded page indexed again: only its new terms are added
            self._terms[page_id] = self._row(loaded)
        super().add_page(page_id, terms)

    def terms_of(self, page_id: int) -> frozenset[str]:
        loaded = self._loaded.get(int(page_id))
        return self._row(loaded) if loaded is not None else super().terms_of(page_id)

    def mapping(self) -> Any:
        """Return the postings (term -> sorted page ids), read-only by convention; a loaded term's are made on read."""
        return self._postings
