"""The recall index's schema, analyzers and values: what a page and a hit look like to Tantivy.

Shared by ``pager.storage.index`` (writing) and ``pager.storage.index_search``
(querying); see ``pager.storage.index`` for the theory of operation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
import re

import attrs
import tantivy

from pager.core.pages import SCOPES
from pager.core.pools import SHARED, is_audience, session_audience
from pager.errors import InputError

__all__ = ["Hit", "IndexDoc", "SCOPES", "analyze_query", "analyze_terms", "clean_query"]

MAX_QUERY_TERMS = 64
MAX_QUERY_CHARS = 4096
MAX_KEY_CHUNKS = 16
MAX_KEY_CHARS = 512  # paths, handles, labels: exact terms must stay under tantivy's term limit
STORED_TEXT_CHARS = 16_384  # snippets come from the stored prefix; the whole text is indexed
SNIPPET_CHARS = 200
KEY_BOOST = 2.0
# A word on more than PRUNE_SHARE of the pages an audience sees (and on more
# than PRUNE_MIN_DF pages) is dropped from the query, keeping the PRUNE_KEEP
# rarest if all are that common: its BM25 weight is small, its posting list long.
PRUNE_SHARE = 0.2
PRUNE_MIN_DF = 2000
PRUNE_KEEP = 3
_SHARED = "shared"  # the JSON key of the SHARED audience; every other key starts with "h"
# The index's format: documents written under another one are rebuilt from the store on open.
# 2 (2026-12): audience keys are typed (pager.core.pools: s:/o:/p:), no longer bare names
# that a session could share with an owner or a "pool:<name>".
INDEX_FORMAT = 2
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
    created: float | None = None  # when the page was stored (the facade fills it for other sessions' pages)


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


def _audience(audience: str) -> str:
    """Return the JSON key of a typed audience (``pager.core.pools``), hashed so dots cannot break the path."""
    if audience == SHARED:
        return _SHARED
    return "h" + hashlib.blake2b(_clean(audience).encode("utf-8"), digest_size=8).hexdigest()


def split_audiences(session: str, audiences: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """Return the sessions, owners and pools a query from ``session`` reads (typed audiences only)."""
    sessions, owners, pools = [_clean(session)], [], []
    for a in audiences:
        if not is_audience(a) or a == SHARED:
            if a == SHARED:
                continue  # cross_session says that
            raise InputError(
                f"recall audience {a!r} is not typed; build it with pager.core.pools "
                "(owner_audience, pool_audience)"
            )
        {"s:": sessions, "o:": owners, "p:": pools}[a[:2]].append(_clean(a[2:]))
    return list(dict.fromkeys(sessions)), list(dict.fromkeys(owners)), list(dict.fromkeys(pools))


def reader_keys(session: str, audiences: Iterable[str], cross_session: bool) -> list[str]:
    """Return the JSON keys a query reads: its session's, each typed audience's, and shared ones.

    A bare name (not ``s:``, ``o:``, ``p:``) is refused: it could be a session
    that happens to be called like an owner or a pool.
    """
    out = [_audience(session_audience(session))]
    for a in audiences:
        if not is_audience(a):
            raise InputError(
                f"recall audience {a!r} is not typed; build it with pager.core.pools "
                "(owner_audience, pool_audience)"
            )
        out.append(_audience(a))
    if cross_session:
        out.append(_SHARED)
    return list(dict.fromkeys(out))


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
    sb.add_integer_field("format", stored=True)  # INDEX_FORMAT, on the meta document
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


def analyze_terms(terms: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """Return the words, CJK bigrams and whole chunks of pre-extracted query terms (capped).

    Each term is analyzed like page text, so "pager/index.py" matches its words
    and, as a whole chunk, a page whose path is exactly that. Every recall index
    (Tantivy, PostgreSQL) reads its queries through this.
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
    return words, grams, chunks


def analyze_query(query: str) -> tuple[list[str], list[str], list[str]]:
    """Return the words, CJK bigrams and whitespace chunks of free-text ``query`` (cut to 4 KB)."""
    q = _clean(query[:MAX_QUERY_CHARS])
    return _TEXT_ANALYZER.analyze(q), _bigrams(q), q.split()


def clean_query(
    words: list[str], grams: list[str], chunks: list[str]
) -> tuple[list[str], list[str], list[str]] | None:
    """Return the (words, grams, exact keys) a recall query searches; None when nothing is left.

    Every recall index (Tantivy, PostgreSQL) cleans its queries here, so both
    search the same terms: words and grams deduplicated, stopwords dropped
    (unless nothing else is left), each capped at ``MAX_QUERY_TERMS``; the
    first ``MAX_KEY_CHUNKS`` chunks, stripped of quotes and brackets and
    lowercased, as ``=``-prefixed exact keys (paths, handles, labels).
    """
    words = list(dict.fromkeys(words))
    kept = [w for w in words if w not in _STOPWORDS]
    words = (kept or words)[:MAX_QUERY_TERMS]
    grams = list(dict.fromkeys(grams))[:MAX_QUERY_TERMS]
    keys = [c.strip(_CHUNK_STRIP).lower() for c in chunks[:MAX_KEY_CHUNKS]]
    keys = list(dict.fromkeys("=" + c[:MAX_KEY_CHARS] for c in keys if c))
    if not words and not grams:
        return None
    return words, grams, keys
