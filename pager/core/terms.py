"""Reference tracking: the terms a page introduces, and who refers back to them.

Theory of operation
-------------------
A page heats up when a later message refers back to it. pager detects that
without a model: at ingest, :func:`extract_terms` pulls the *referable* terms
out of a message (file paths, identifiers, numbers, error names, handles),
and a :class:`TermIndex` maps each term to the pages that contained it. When
message ``s`` arrives, the pages sharing enough of its terms are the pages it
refers to; the caller sets their ``last_ref`` to ``s`` and bumps their
``ref_count``, then adds the new page to the index.

Terms are not equal evidence. A path, a handle, an exception name or a commit
hash names one thing; ``count`` or ``1024`` may be a coincidence. So
:meth:`TermIndex.references` returns a *strength* per page, the sum of
:func:`term_weight` over the shared terms (2 for strong terms, 1 for the
rest), and :data:`MIN_STRENGTH` (2) is the recommended threshold: one strong
term or two ordinary ones make a reference. A term found in more than
``max_df`` pages (``__init__.py``, ``self.assertEqual``, ``200``) says nothing
about which page is meant and is ignored.

Case: paths, URLs and handles keep their case (file systems and handles are
case-sensitive); identifiers, error names and hex numbers are lower-cased, so
``MAX_RETRIES`` in code and ``max_retries`` in prose match.

Everything here is pure Python, no I/O: the index lives in memory and is
rebuilt from the store when a session is opened.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from typing import Collection, Iterable, Mapping

import numpy as np

from pager.core.termscan import (  # noqa: F401  the scan's bounds are documented as this module's names
    ERROR_TERM,
    HEX_ID,
    MAX_SCAN_CHARS,
    MAX_TERM_CHARS,
    SCAN_TAIL_CHARS,
    TRAILING,
    is_file_name,
)
from pager.core.termscan import scan as _scan
from pager.core.termscan import scanned as _scanned

__all__ = [
    "MIN_STRENGTH",
    "TermIndex",
    "extract_terms",
    "relevance",
    "term_weight",
]

# One strong term, or two ordinary ones, make a reference.
MIN_STRENGTH = 2
STRONG = 2
ORDINARY = 1

# relevance(): sharing this many terms with the focus makes a page fully relevant.
RELEVANCE_K = 8

def extract_terms(text: str, *, limit: int = 2000) -> frozenset[str]:
    """Return the salient, referable terms of ``text``, at most ``limit`` of them.

    Kinds of term, in the order they appear (the first ``limit`` distinct
    ones are kept):

    - handles ``pg:123-abcdef`` and URLs, as written;
    - file paths (``a/b.py``, ``./x/y``, ``/abs/p``, ``~/p``) with leading
      ``./`` and trailing punctuation removed, plus the file name of a path
      (``b.py``), and bare file names ``name.ext`` with a known extension;
      paths keep their case;
    - identifiers of at least 4 characters that look like code: snake_case,
      camelCase / PascalCase with two humps, CONSTANTS, names with digits,
      dotted names (``os.path.join``, plus the last part ``join``), and any
      word written in backticks or directly followed by ``(``; lower-cased;
      English stopwords, common words, keywords and builtins excluded;
    - error names (``ValueError``, ``KeyboardInterrupt``), lower-cased;
    - numbers with 3 or more digits, decimals and versions (``3.14``,
      ``1.2.3``), hex (``0x1f``), commit-like hex ids (``a1b2c3d``), and
      ``line 123`` locations.

    Terms longer than ``MAX_TERM_CHARS`` are dropped. A text longer than
    ``MAX_SCAN_CHARS`` is scanned in its first three quarters of that and its
    last quarter (``SCAN_TAIL_CHARS``), each cut at a word boundary, so the
    cost is bounded whatever its length. Never raises on odd input (lone
    surrogates, binary noise). Pure; pieces of text seen before are not
    scanned again (``pager.core.termscan``).
    """
    if limit <= 0 or not text:
        return frozenset()
    found = _scan(_scanned(text))
    terms = frozenset(itertools.chain.from_iterable(found))
    if len(terms) <= limit:
        return terms
    # over the limit: the first ``limit`` distinct terms in text order (a dict is an ordered set)
    return frozenset(itertools.islice(dict.fromkeys(itertools.chain.from_iterable(found)), limit))


def term_weight(term: str) -> int:
    """Return how much one shared ``term`` says about a reference: 2 strong, 1 ordinary.

    Strong: handles, URLs, paths and file names, error names, commit-like hex
    ids. Ordinary: identifiers, numbers, ``line N``.
    """
    if term.startswith("pg:") or "/" in term:
        return STRONG
    if is_file_name(term) and term == term.rstrip(TRAILING):
        # A lower-cased dotted identifier cannot end in a file extension: the
        # extractor would have kept it as a file name, with its case.
        return STRONG
    if ERROR_TERM.fullmatch(term.rsplit(".", 1)[-1]):
        return STRONG
    if HEX_ID.fullmatch(term):
        return STRONG
    return ORDINARY


# ``term_weight`` memoised (a pure function of the term): each referring message weighs every term it
# shares, a regex or two each, and terms recur across messages (issue 23)
_weight = functools.lru_cache(maxsize=1 << 16)(term_weight)


def relevance(page_terms: frozenset[str], focus_terms: frozenset[str], *, k: int = RELEVANCE_K) -> float:
    """Return how much a page is about the focus, in [0, 1].

    ``|page & focus| / min(|focus|, k)``, capped at 1: sharing ``k`` terms
    (or all of a small focus) makes a page fully relevant. An empty focus
    makes every page irrelevant (0.0).
    """
    if not focus_terms or not page_terms:
        return 0.0
    shared = len(page_terms & focus_terms) if len(page_terms) > len(focus_terms) else len(focus_terms & page_terms)
    return min(1.0, shared / min(len(focus_terms), max(k, 1)))


class TermIndex:
    """In-memory inverted map term -> pages that contained it, for reference detection.

    Pure Python/numpy, no I/O; rebuilt from the store on open. Pages are
    usually added in increasing id order (the order they were ingested);
    other orders work, a little slower.
    """

    def __init__(self, max_df: int = 50) -> None:
        """Make an empty index; a term in more than ``max_df`` pages is ignored."""
        if max_df < 1:
            raise ValueError(f"max_df must be at least 1, got {max_df!r}")
        self.max_df = max_df
        self._postings: dict[str, list[int]] = {}  # term -> sorted page ids
        self._terms: dict[int, frozenset[str]] = {}

    def __len__(self) -> int:
        """Return the number of pages indexed."""
        return len(self._terms)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._terms

    def add_page(self, page_id: int, terms: Iterable[str]) -> None:
        """Index ``page_id`` under ``terms``; adding a page again adds only new terms."""
        page_id = int(page_id)
        old = self._terms.get(page_id)
        if old is None:  # the usual case: keep the caller's frozenset itself (the mirror holds it too)
            new = terms if isinstance(terms, frozenset) else frozenset(terms)
            self._terms[page_id] = new
        else:
            new = frozenset(terms) - old
            self._terms[page_id] = old | new
        for term in new:
            ids = self._postings.get(term)
            if ids is None:
                self._postings[term] = [page_id]
            elif ids[-1] < page_id:
                ids.append(page_id)
            else:
                bisect.insort(ids, page_id)

    def terms_of(self, page_id: int) -> frozenset[str]:
        """Return the terms ``page_id`` was indexed under (empty if unknown)."""
        return self._terms.get(int(page_id), frozenset())

    def df(self, term: str) -> int:
        """Return how many pages contain ``term``."""
        return len(self._postings.get(term, ()))

    def references(
        self, terms: Iterable[str], *, exclude: Collection[int] = (), before: int | None = None
    ) -> dict[int, int]:
        """Return the pages sharing ``terms``, with the strength of each reference.

        Strength is the sum of :func:`term_weight` over the shared terms; a
        page with strength >= :data:`MIN_STRENGTH` is a reference. Only pages
        with id < ``before`` (if given) and not in ``exclude`` count; terms in
        more than ``max_df`` pages are skipped.
        """
        out: dict[int, int] = {}
        excluded = exclude if isinstance(exclude, (set, frozenset, dict)) else set(exclude)
        for term in terms if isinstance(terms, (set, frozenset)) else set(terms):  # a page's frozenset: no copy
            ids = self._postings.get(term)
            if ids is None or len(ids) > self.max_df:
                continue
            if before is not None and ids and ids[-1] >= before:  # a new page is above every posting: no copy
                ids = ids[: bisect.bisect_left(ids, before)]
            weight = _weight(term)
            for pid in ids:
                if pid not in excluded:
                    out[pid] = out.get(pid, 0) + weight
        return out

    def relevance(
        self, page_ids: Iterable[int] | np.ndarray, focus_terms: Iterable[str], *, k: int = RELEVANCE_K
    ) -> np.ndarray:
        """Return the relevance column for ``page_ids``: :func:`relevance` of each page.

        Walks the postings of the focus terms, not every page's terms, so it
        costs O(postings of the focus), whatever the number of pages. Focus
        terms in more than ``max_df`` pages are dropped first: they match
        everything and would make every page look relevant.
        """
        ids = np.asarray(page_ids, dtype=np.int64).reshape(-1)
        focus = [t for t in set(focus_terms) if len(self._postings.get(t, ())) <= self.max_df]
        col = np.zeros(len(ids), dtype=np.float64)
        if not focus or not len(ids):
            return col
        shared: dict[int, int] = {}
        for term in focus:
            for pid in self._postings.get(term, ()):
                shared[pid] = shared.get(pid, 0) + 1
        if not shared:
            return col
        hit = np.fromiter(shared.keys(), dtype=np.int64, count=len(shared))
        cnt = np.fromiter(shared.values(), dtype=np.float64, count=len(shared))
        order = np.argsort(hit)
        hit, cnt = hit[order], cnt[order]
        pos = np.clip(np.searchsorted(hit, ids), 0, len(hit) - 1)
        found = hit[pos] == ids
        col[found] = cnt[pos[found]]
        return np.minimum(col / min(len(focus), max(k, 1)), 1.0)

    def mapping(self) -> Mapping[str, list[int]]:
        """Return the postings (term -> sorted page ids), read-only by convention."""
        return self._postings
