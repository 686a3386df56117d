"""The scan behind :func:`pager.core.terms.extract_terms`: candidate terms, fast.

Theory of operation
-------------------
One regex, ``_SCAN``, finds the candidates (handles, URLs, paths, ``line N``,
numbers, words) and a few rules per kind decide which are terms. That is
correct but slow when run per match in Python (issue 23: 2.9 ms per message),
so the work is arranged to happen once per distinct piece of text:

- No match of ``_SCAN`` spans ASCII whitespace but ``line N``, so a text is
  split into whitespace-separated *chunks* (``line N`` kept whole), and the
  matches of its chunks, in order, are the matches of the text.
- Each distinct chunk's terms are memoised (``_Memo``: a bounded dict whose
  misses compute), and so are each distinct match's; chunks repeat enormously
  within and across messages, so a message mostly costs a split, a dedup and
  C-level dict lookups.
- The kind of a match follows from its text alone (:func:`_kind`); only a
  word's terms depend on its neighbours (a backtick before it, a backtick or
  ``(`` after it), which ``_SCAN`` captures with zero-width groups.

:func:`scan` returns the terms of each distinct chunk in the order each first
appears: a repeated chunk adds nothing its first occurrence did not, so the
order of the distinct terms, which decides what a ``limit`` keeps, is the
text's. ``tests/test_terms_oracle.py`` holds the straightforward per-match
scan this replaced and checks both agree on random texts and on every message
of the development traces. Pure Python, no I/O; the memos are caches of pure
functions, so no result depends on what they hold.
"""

from __future__ import annotations

import itertools
import keyword
import re
from typing import Any, Callable, Iterable, Iterator

from pager.core.memo import Memo

__all__ = [
    "ERROR_TERM",
    "HEX_ID",
    "MAX_SCAN_CHARS",
    "MAX_TERM_CHARS",
    "SCAN_TAIL_CHARS",
    "TRAILING",
    "is_file_name",
    "scan",
    "scanned",
]

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

_ERROR_SUFFIXES = ("Error", "Exception", "Warning", "Fault", "Failure", "Interrupt")
_ERROR_WORD = re.compile(r"\w{2,}(?:" + "|".join(_ERROR_SUFFIXES) + ")", re.ASCII)
ERROR_TERM = re.compile(r"\w{2,}(?:error|exception|warning|fault|failure|interrupt)", re.ASCII)
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z][a-z]+[A-Z]", re.ASCII)
HEX_ID = re.compile(r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,64}", re.ASCII)
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|\d+(?:\.\d+)+|\d{3,}", re.ASCII)
TRAILING = ".,:;!?'\")]}>"

# Chunks: why their matches are the text's. No match of _SCAN spans ASCII whitespace (what \s
# means under re.ASCII) but "line N", whose space stays inside its chunk; whitespace next to a chunk
# looks like the text's start or end to every assertion of _SCAN (it is no \w, backtick, "(" or
# anything a lookbehind looks for). Any run of whole chunks would do as well, so joining more than
# needed only costs memo hits.
#
# _CHUNK splits at ASCII whitespace, keeping "[Ll]ine" + " " + digit together. str.split() is twice
# as fast but splits at more (the Unicode spaces, \x1c-\x1f), so it is used on a text holding none
# of those, after the space of every "ine " is swapped for a NUL (hence no NUL in the text either),
# and the NUL is swapped back before a chunk is scanned.
_CHUNK = re.compile(r"[^ \t\n\r\f\v]++(?:(?<=[Ll]ine) (?=\d)[^ \t\n\r\f\v]++)*+")
# what str.split() splits at: ASCII whitespace, then the rest (tests/test_terms_oracle.py checks it)
_SPLIT_SPACES = (
    " \t\n\r\f\v"
    "\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_NOT_SPLITTABLE = re.compile("[\x00" + _SPLIT_SPACES[6:] + "]")
_JOIN = "\x00"
# Memo bounds: entries a generation (``pager.core.memo``: two generations, each memo at most ~3 MB in
# all), and the length of a key worth keeping (over the development traces, chunks over 64 characters
# are 0.4% of all and their repeats 0.2%). A session's distinct chunks are under 9,000 in the traces:
# the largest fits in the two generations, its keys in use moved back at each turn.
_MEMO_ENTRIES = 8_192
_MEMO_KEY_CHARS = 64


def _Memo(fn: Callable[[Any], tuple[str, ...]]) -> Memo:
    """A memo of ``fn`` with the bounds above (``pager.core.memo``; read when made, so a test may lower them)."""
    return Memo(fn, _MEMO_ENTRIES, _MEMO_KEY_CHARS)


def scanned(text: str) -> str:
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


def scan(text: str) -> list[tuple[str, ...]]:
    """Return the terms of each distinct chunk of ``text``, in the order each first appears.

    A repeated chunk adds nothing: its terms came with its first occurrence,
    which is earlier, so dropping repeats keeps every term's first position
    and the order of the distinct terms. On memo hits this is all C.
    """
    if _splittable(text):
        chunks = dict.fromkeys(text.replace("ine ", "ine" + _JOIN).split())  # dict: distinct, in order
        return list(map(_SPLIT_CHUNK_TERMS.__getitem__, chunks))
    return list(map(_CHUNK_TERMS.__getitem__, dict.fromkeys(_CHUNK.findall(text))))


def _splittable(text: str) -> bool:
    """Return whether ``_NOT_SPLITTABLE`` finds nothing in ``text``.

    An ASCII text can hold only five of its characters, and five substring
    tests (memchr) cost a microsecond where the class's scan cost 50 over a
    call's messages (issue 23).
    """
    if text.isascii():
        return not ("\x00" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text)
    return _NOT_SPLITTABLE.search(text) is None


def _chunk_terms(chunk: str) -> tuple[str, ...]:
    """Return the terms of one chunk, in order (repeats kept: the caller dedups)."""
    return tuple(itertools.chain.from_iterable(map(_MATCH_TERMS.__getitem__, _SCAN.findall(chunk))))


def _split_chunk_terms(chunk: str) -> tuple[str, ...]:
    """Return the terms of one chunk of str.split(), where a NUL stands for a space (above).

    ``_chunk_terms`` inlined: a new tool output misses this memo once a chunk (765 times in 43 KB of test
    names), and a Python call less each is measurable there.
    """
    matches = _SCAN.findall(chunk.replace(_JOIN, " "))
    return tuple(itertools.chain.from_iterable(map(_MATCH_TERMS.__getitem__, matches)))


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
        terms = (tok.lower(),) if _NUMBER.fullmatch(tok) or HEX_ID.fullmatch(tok) else ()
    elif kind == "line":
        terms = ("line " + tok[5:], tok[5:]) if len(tok) >= 8 else ("line " + tok[5:],)  # 3+ digits: the number too
    elif kind == "handle":
        terms = (tok,)
    else:  # url
        tok = tok.rstrip(TRAILING)
        terms = (tok,) if len(tok) > 10 else ()
    if len(tok) <= MAX_TERM_CHARS:  # no term is longer than its token (each is a part of it, or it lower-cased)
        return tuple(terms)
    return tuple(t for t in terms if len(t) <= MAX_TERM_CHARS)


def _path_terms(tok: str) -> Iterator[str]:
    path = tok.rstrip(TRAILING)
    while path.startswith("./"):
        path = path[2:]
    if not path or path in ("/", "~", "..", "~/", "../"):
        return
    has_root = tok[0] in "/~."
    body = path.rstrip("/")
    name = body.rsplit("/", 1)[-1]
    is_file = is_file_name(name)
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


def is_file_name(name: str) -> bool:
    stem, dot, ext = name.rpartition(".")
    return bool(dot) and bool(stem.strip(".")) and ext.lower() in _FILE_EXTS


def _word_terms(tok: str, before: str, after: str) -> tuple[str, ...]:
    if "." in tok:
        if is_file_name(tok):
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
    if tok.endswith(_ERROR_SUFFIXES) and _ERROR_WORD.fullmatch(tok):  # the suffix test first: most words fail it
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
