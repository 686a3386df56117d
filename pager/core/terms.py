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
import itertools
import keyword
import re
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping

import numpy as np

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

# Longer "terms" are blobs (base64, minified code), not names anyone repeats.
MAX_TERM_CHARS = 200

# Characters of one text scanned for terms: its head and its tail. A huge
# output's referable names are near its start (the command, the first
# error) and its end (a test run's summary, the final error); a 50 MB body of
# short words took 96 s to scan in full (issue 20). 256 Ki characters is over
# 3x the largest message of the development traces (78 K), so their terms,
# and the bench, are unchanged.
MAX_SCAN_CHARS = 256 * 1024
SCAN_TAIL_CHARS = MAX_SCAN_CHARS // 4

# relevance(): sharing this many terms with the focus makes a page fully relevant.
RELEVANCE_K = 8

# File extensions that make ``name.ext`` a file name rather than a dotted
# identifier (``fields.py`` vs ``schema.load``). Kept to extensions that are
# rarely also attribute names.
_FILE_EXTS = frozenset(
    """
    py pyi pyx pxd ipynb js mjs cjs ts tsx jsx vue svelte json jsonl ndjson md rst txt adoc
    toml yaml yml cfg ini conf env lock csv tsv xml html htm css scss sass less svg
    c h cc cpp cxx hpp hh rs go java kt kts scala rb php pl pm lua swift cs fs r jl
    sh bash zsh fish ps1 bat sql proto graphql gql tf hcl gradle mk cmake
    patch diff log out err tmp bak png jpg jpeg gif webp pdf zip gz tgz bz2 xz tar whl so dll dylib exe
    o a pyc db sqlite sqlite3 parquet npy npz pkl pickle traj
    """.split()
)

# Words that look like identifiers (backticked, followed by "(", all caps) but
# refer to nothing in particular: English function words and common words,
# Python and JS keywords and builtins, shell commands, shouting in prompts.
_STOP = frozenset(
    w.lower()
    for w in (
        keyword.kwlist
        + keyword.softkwlist
        + """
    a about above after again against all also although always among an and another any are
    aren't around as at be because been before being below between both but by can cannot could
    did does doing done down during each either else enough even ever every few first for from
    further had has have having here how however into just last least less like made make many
    may maybe might more most much must need needs never next none not now often once only onto
    other others otherwise our ours out over own perhaps please rather really same several shall
    should since some still such than that the their theirs them then there these they this those
    though through thus till together too under unless until upon very want was were what whatever
    when where whether which while who whom whose why will with within without would yes yet you
    your yours sure okay thanks thank note notes todo fixme important warning warnings error errors
    info debug trace true false null none nil undefined void self this that cls args kwargs
    function functions method methods class classes value values file files line lines code test
    tests data name names type types path paths text string strings number numbers result results
    output input list dict items item keys key object objects module modules param params option
    options config setting settings example examples issue issues problem change changes update
    updates check fix fixed work works working used using use run runs running call calls called
    return returns print len range open read write show find look make copy move done next step
    steps time main init exit sys echo grep head tail sort echo find cat less more sudo bash
    json yaml html http https url uri utf8 ascii todo ok api cli sdk critical required
    task tasks response command commands discussion thought thoughts action observation
    instructions instruction always only
    const let var async await function typeof instanceof new delete switch case default break
    continue catch throw throws try finally extends implements interface enum public private
    protected static final abstract package import export require module exports string int
    float bool bytes tuple set frozenset object str dict list isinstance getattr setattr hasattr
    super property staticmethod classmethod enumerate zip map filter sorted reversed min max sum
    abs any all iter next repr format input open print
    """.split()
    )
)

# One pass finds every candidate, as (token, backtick before, "(" or backtick after). The kind of a
# token (handle, URL, path, "line N", number, word) follows from its text alone (see _kind), so the
# alternatives need no group of their own; only a word's terms depend on its neighbours, and those
# two characters are captured by zero-width groups, which leave the matches themselves unchanged.
_SCAN = re.compile(
    r"""
    (
      pg:\d+(?:-[0-9a-f]{6})?(?![\w-])                                    # handle
    | https?://[^\s<>"'`)\]}]+                                            # url
    | (?<![\w.@+~/<-])(?:(?:~|\.{1,2})?/[\w.@+-][\w.@+/-]*+|[\w.@+-]++/[\w.@+/-]*+)   # path
    | \b[Ll]ine\ \d+\b                                                    # line N
    | (?<![\w.])\d[\w.]*+                                                 # number
    | (?<![\w.-])(?:(?<=(`))|)[A-Za-z_]\w*+(?:-\w++)*+(?:\.[A-Za-z_]\w*+)*+(?=([(`]?))  # word
    )
    """,
    re.VERBOSE | re.ASCII,
)

_ERROR_WORD = re.compile(r"\w{2,}(?:Error|Exception|Warning|Fault|Failure|Interrupt)", re.ASCII)
_ERROR_TERM = re.compile(r"\w{2,}(?:error|exception|warning|fault|failure|interrupt)", re.ASCII)
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z][a-z]+[A-Z]", re.ASCII)
_HEX_ID = re.compile(r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,64}", re.ASCII)
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|\d+(?:\.\d+)+|\d{3,}", re.ASCII)
_TRAILING = ".,:;!?'\")]}>"

# The scan runs on whitespace-separated chunks, and each distinct chunk's terms are memoised:
# chunks ("self.assertEqual(", "the", "src/x.py:12:") repeat enormously within and across messages,
# and the per-match Python work was 2.9 ms per message (issue 23). No match of _SCAN spans ASCII
# whitespace but "line N", whose space stays inside the chunk, and a chunk's neighbours look like
# the text's start and end to every assertion of _SCAN (whitespace is no \w, backtick, "(" or
# anything a lookbehind looks for), so the matches of the chunks, in order, are those of the text.
# Any run of whole chunks would do as well, so joining more than needed only costs memo hits.
#
# _CHUNK splits at ASCII whitespace (what \s means under re.ASCII), keeping "[Ll]ine" + " " + digit
# together. str.split() is twice as fast but splits at more (the Unicode spaces, \x1c-\x1f), so it
# is used on a text holding none of those, after the space of every "ine " is swapped for a NUL
# (hence no NUL in the text either), and the NUL is swapped back before a chunk is scanned.
_CHUNK = re.compile(r"[^ \t\n\r\f\v]++(?:(?<=[Ll]ine) (?=\d)[^ \t\n\r\f\v]++)*+")
_SPLIT_SPACES = " \t\n\r\f\v\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501  what str.split() splits at
_NOT_SPLITTABLE = re.compile("[\x00" + _SPLIT_SPACES[6:] + "]")
_JOIN = "\x00"
# Memo bounds: entries (each memo: at most ~3 MB), and the length of a key worth keeping (over the
# development traces, chunks over 64 characters are 0.4% of all and their repeats 0.2%). A
# session's distinct chunks are under 9,000 in the traces: the largest fits.
_MEMO_ENTRIES = 16_384
_MEMO_KEY_CHARS = 64


class _Memo(dict):  # type: ignore[type-arg]
    """A bounded memo of a pure function of one key: computed on a miss; when full, the older half goes.

    A pure function's cache, so no result depends on what it holds; ``dict``
    so that a hit costs one C-level lookup (``map(memo.__getitem__, keys)``).
    """

    def __init__(self, fn: Callable[[Any], tuple[str, ...]]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key: Any) -> tuple[str, ...]:
        value = self.fn(key)
        if len(key[0] if isinstance(key, tuple) else key) <= _MEMO_KEY_CHARS:
            if len(self) >= _MEMO_ENTRIES:
                for old in list(itertools.islice(self, len(self) // 2 or 1)):  # insertion order: oldest first
                    self.pop(old, None)  # None: another thread may have dropped it
            self[key] = value
        return value


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
    surrogates, binary noise); one regex pass.
    """
    if limit <= 0 or not text:
        return frozenset()
    found = _scan(_scanned(text))
    terms = frozenset(itertools.chain.from_iterable(found))
    if len(terms) <= limit:
        return terms
    # over the limit: the first ``limit`` distinct terms in text order (a dict is an ordered set)
    return frozenset(itertools.islice(dict.fromkeys(itertools.chain.from_iterable(found)), limit))


def _scanned(text: str) -> str:
    """Return the part of ``text`` that is scanned: all of it, or its head and tail (at most ``MAX_SCAN_CHARS``)."""
    if len(text) <= MAX_SCAN_CHARS:
        return text
    head_end = MAX_SCAN_CHARS - SCAN_TAIL_CHARS
    tail_start = len(text) - SCAN_TAIL_CHARS
    # cut at a space or newline, so no term is cut in two (a text with no break near a cut is cut where it is)
    cut = max(text.rfind(" ", 0, head_end), text.rfind("\n", 0, head_end))
    head = text[: cut if cut > head_end // 2 else head_end]
    cut = min((i for i in (text.find(" ", tail_start), text.find("\n", tail_start)) if i >= 0), default=-1)
    tail = text[cut + 1 if 0 <= cut < tail_start + SCAN_TAIL_CHARS // 2 else tail_start:]
    return head + "\n" + tail


def _scan(text: str) -> list[tuple[str, ...]]:
    """Return the terms of each distinct chunk of ``text``, in the order each first appears.

    A repeated chunk adds nothing: its terms came with its first occurrence,
    which is earlier, so dropping repeats keeps every term's first position
    and the order of the distinct terms. On memo hits this is all C.
    """
    if _NOT_SPLITTABLE.search(text) is None:
        return list(map(_SPLIT_CHUNK_TERMS.__getitem__, dict.fromkeys(text.replace("ine ", "ine" + _JOIN).split())))
    return list(map(_CHUNK_TERMS.__getitem__, dict.fromkeys(_CHUNK.findall(text))))


def _chunk_terms(chunk: str) -> tuple[str, ...]:
    """Return the terms of one chunk, in order (repeats kept: the caller dedups)."""
    return tuple(itertools.chain.from_iterable(map(_MATCH_TERMS.__getitem__, _SCAN.findall(chunk))))


def _split_chunk_terms(chunk: str) -> tuple[str, ...]:
    """Return the terms of one chunk of str.split(), where a NUL stands for a space (above)."""
    return _chunk_terms(chunk.replace(_JOIN, " "))


def _kind(tok: str) -> str:
    """Return which alternative of ``_SCAN`` matched ``tok``, from its text alone.

    Only a handle starts with ``pg:`` and holds a colon but no ``//``, only
    a URL holds ``://``, only ``line N`` a space, only a path (or a URL) a
    slash, only a number starts with a digit; the rest are words.
    """
    if "://" in tok:
        return "url"
    if tok.startswith("pg:"):
        return "handle"
    if " " in tok:
        return "line"
    if "/" in tok:
        return "path"
    if tok[0] in "0123456789":
        return "num"
    return "word"


def _match_terms(match: tuple[str, str, str]) -> tuple[str, ...]:
    """Return the terms of one match: (token, a backtick before it or "", "(" or a backtick after it or "")."""
    tok, before, after = match
    kind = _kind(tok)
    if kind == "word":
        terms: Iterable[str] = _word_terms(tok, before, after)
    elif kind == "path":
        terms = _path_terms(tok)
    elif kind == "num":
        tok = tok.rstrip(".")
        terms = (tok.lower(),) if _NUMBER.fullmatch(tok) or _HEX_ID.fullmatch(tok) else ()
    elif kind == "line":
        terms = ("line " + tok[5:], tok[5:]) if len(tok) >= 8 else ("line " + tok[5:],)  # 3+ digits: the number too
    elif kind == "handle":
        terms = (tok,)
    else:  # url
        tok = tok.rstrip(_TRAILING)
        terms = (tok,) if len(tok) > 10 else ()
    return tuple(t for t in terms if len(t) <= MAX_TERM_CHARS)


def _path_terms(tok: str) -> Iterator[str]:
    path = tok.rstrip(_TRAILING)
    while path.startswith("./"):
        path = path[2:]
    if not path or path in ("/", "~", "..", "~/", "../"):
        return
    has_root = tok[0] in "/~."
    body = path.rstrip("/")
    name = body.rsplit("/", 1)[-1]
    is_file = _is_file_name(name)
    # "and/or", "I/O", "10/20", "/s" are prose; a path needs a root, two
    # slashes, a file name, or a trailing slash (a directory).
    if not (
        (has_root and len(body) >= 4)
        or body.count("/") >= 2
        or is_file
        or (path.endswith("/") and len(body) >= 3)
    ):
        return
    if not any(c.isalpha() for c in body):
        return  # dates and fractions: 2024/01/02
    # Keep a directory's trailing slash when it is the only slash: "src/"
    # must still read as a path, not the word "src".
    yield body if "/" in body else path
    if is_file and name != body:
        yield name


def _is_file_name(name: str) -> bool:
    stem, dot, ext = name.rpartition(".")
    return bool(dot) and bool(stem.strip(".")) and ext.lower() in _FILE_EXTS


def _word_terms(tok: str, before: str, after: str) -> tuple[str, ...]:
    if "." in tok:
        if _is_file_name(tok):
            return (tok,)
        last = tok.rsplit(".", 1)[1]
        low = tok.lower()
        out = []
        if len(low) >= 4 and low.split(".", 1)[0] not in ("e", "i"):  # e.g., i.e.
            out.append(low)
        if len(last) >= 4 and last.lower() not in _STOP:
            out.append(last.lower())
        return tuple(out)
    if not 4 <= len(tok) <= MAX_TERM_CHARS:
        # below: every term is the word itself, dropped when too long; checking first keeps a
        # model-written 50 MB "word" from costing seconds of per-character tests
        return ()
    low = tok.lower()
    if low in _STOP:
        return ()
    if _ERROR_WORD.fullmatch(tok):
        return (low,)
    if "-" in tok:
        # Kebab-case is mostly prose ("well-known"); keep ids like "spotter-4te".
        salient = any(c.isdigit() for c in tok) or "_" in tok
        return (low,) if salient or before == "`" else ()
    salient = (
        "_" in tok
        or _CAMEL.search(tok) is not None
        or (tok.isupper() and any(c.isalpha() for c in tok))
        or any(c.isdigit() for c in tok)
        # Code in prose: `word` or word( ... ).
        or (before == "`" and after == "`")
        or after == "("
    )
    return (low,) if salient else ()


_MATCH_TERMS = _Memo(_match_terms)
_CHUNK_TERMS = _Memo(_chunk_terms)
_SPLIT_CHUNK_TERMS = _Memo(_split_chunk_terms)  # apart: its keys' NULs mean spaces


def term_weight(term: str) -> int:
    """Return how much one shared ``term`` says about a reference: 2 strong, 1 ordinary.

    Strong: handles, URLs, paths and file names, error names, commit-like hex
    ids. Ordinary: identifiers, numbers, ``line N``.
    """
    if term.startswith("pg:") or "/" in term:
        return STRONG
    if _is_file_name(term) and term == term.rstrip(_TRAILING):
        # A lower-cased dotted identifier cannot end in a file extension: the
        # extractor would have kept it as a file name, with its case.
        return STRONG
    if _ERROR_TERM.fullmatch(term.rsplit(".", 1)[-1]):
        return STRONG
    if _HEX_ID.fullmatch(term):
        return STRONG
    return ORDINARY


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
        for term in set(terms):
            ids = self._postings.get(term)
            if ids is None or len(ids) > self.max_df:
                continue
            if before is not None:
                ids = ids[: bisect.bisect_left(ids, before)]
            weight = term_weight(term)
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
