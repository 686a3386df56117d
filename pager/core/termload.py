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
from typing import Any, Iterable, Sequence

import numpy as np

from pager.core.terms import TermIndex

__all__ = ["IdTerms", "LoadedTermIndex", "TermColumn", "TermTable"]


class TermTable:
    """A store's numbering of terms and one branch's pages' terms as those numbers (``SQLiteStore``).

    ``words[i]`` is term ``i`` and ``ids`` its inverse (the store's own, read
    only here; it may grow, with numbers past ``len(words)`` at load, which
    this table ignores); ``tid`` holds each page's term numbers one page
    after the other, ``lens`` how many each page has.
    """

    __slots__ = ("words", "ids", "tid", "lens", "size")

    def __init__(self, words: Sequence[str | None], ids: dict[str, int], tid: np.ndarray, lens: np.ndarray) -> None:
        self.words = words
        self.ids = ids
        self.tid = tid
        self.lens = lens
        self.size = len(words)

    def rows(self) -> list["IdTerms"]:
        """Return each page's terms, as numbers read as words on iteration."""
        ends = np.cumsum(self.lens).tolist()
        starts = [0] + ends[:-1]
        tid, words = self.tid, self.words
        return [IdTerms(tid[a:b], words) for a, b in zip(starts, ends)]


class IdTerms:
    """One page's terms kept as the store's term numbers; iterating yields the words."""

    __slots__ = ("ids", "words")

    def __init__(self, ids: np.ndarray, words: Sequence[str | None]) -> None:
        self.ids = ids
        self.words = words

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Any:
        return map(self.words.__getitem__, self.ids.tolist())


class TermColumn(list):  # type: ignore[type-arg]
    """Per row, a page's terms: kept as stored (a tuple or a frozenset), read as a frozenset.

    Indexing a row returns a frozenset (built for that read when the row
    holds a tuple); a slice is a ``TermColumn`` again. Iterating yields the
    stored values.
    """

    __slots__ = ()

    def __getitem__(self, i: Any) -> Any:
        value = list.__getitem__(self, i)
        if isinstance(i, slice):
            return TermColumn(value)
        return value if type(value) is frozenset else frozenset(value)


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


class LoadedTermIndex(TermIndex):
    """A ``TermIndex`` that starts from loaded pages' terms, indexed in bulk (see the module docstring)."""

    def __init__(
        self, max_df: int, ids: Sequence[int], terms: Sequence[Iterable[str]], table: TermTable | None = None
    ) -> None:
        """Index pages ``ids`` under ``terms`` (one iterable per page); ``table``: those terms as numbers."""
        super().__init__(max_df)
        self._loaded: dict[int, Any] = dict(zip(map(int, ids), terms))
        if table is not None:  # numbered by the store: no word is looked at
            vocab, size, tid, lens = table.ids, table.size, table.tid, table.lens
        else:
            lens = np.fromiter(map(len, terms), dtype=np.int64, count=len(terms))
            flat = list(itertools.chain.from_iterable(terms))
            vocab = dict(zip(dict.fromkeys(flat), itertools.count()))
            size = len(vocab)
            tid = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
            del flat
        pages = np.repeat(np.asarray(ids, dtype=np.int64), lens)
        if len(pages) and pages[-1] < 2**31:
            pages = pages.astype(np.int32)  # half the memory; ids read back as Python ints
        order = np.argsort(tid, kind="stable")  # stable: each term's pages stay in id order
        start = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(tid, minlength=size), out=start[1:])
        if len(pages) > 1 and not (np.diff(pages) >= 0).all():
            # ids not ascending (a store that numbers pages otherwise): sort each term's run by id
            order = np.lexsort((pages, tid))
        self._postings = _Postings(vocab, start, pages[order])

    def __len__(self) -> int:
        return len(self._terms) + len(self._loaded)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._terms or page_id in self._loaded

    def add_page(self, page_id: int, terms: Iterable[str]) -> None:
        page_id = int(page_id)
        loaded = self._loaded.pop(page_id, None)
        if loaded is not None:  # a loaded page indexed again: only its new terms are added
            self._terms[page_id] = frozenset(loaded)
        super().add_page(page_id, terms)

    def terms_of(self, page_id: int) -> frozenset[str]:
        loaded = self._loaded.get(int(page_id))
        return frozenset(loaded) if loaded is not None else super().terms_of(page_id)

    def mapping(self) -> Any:
        """Return the postings (term -> sorted page ids), read-only by convention; a loaded term's are made on read."""
        return self._postings
