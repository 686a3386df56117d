"""Write a page's tsvector on PostgreSQL: the words of the Tantivy index's analyzer, with positions and keys.

Words are cut by the analyzer the Tantivy index uses (``pager.storage.index``):
the same tokens, the same lowercasing, the same CJK bigrams, so the two indexes
differ only in how they rank. The vector is built in Python as a tsvector
literal (not ``to_tsvector``, whose parser keeps ``a/b.py`` or ``x-y`` whole):
text words at weight D with their positions (so term frequency counts, capped
at ``MAX_POSITIONS``), and exact keys — path, file name, handle, labels, each
prefixed ``=`` — at weight A. ``PostgresStore.record`` writes it with the page;
``pager.storage.pg_index`` searches it, quoting query lexemes the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

from pager.storage.index_schema import (  # the Tantivy index's analysis, shared on purpose: same words
    _TEXT_ANALYZER,
    MAX_KEY_CHARS,
    _bigrams,
    _clean,
)

__all__ = ["MAX_POSITIONS", "lexeme_fits", "page_vector", "quote_lexeme"]

MAX_POSITIONS = 32  # term frequency saturates long before; PostgreSQL keeps at most 256
MAX_POSITION = 16383  # PostgreSQL's largest lexeme position
MAX_LEXEMES = 20_000  # keeps a huge tool output's vector far under the 1 MB tsvector limit
MAX_LEXEME_BYTES = 2046


def quote_lexeme(lexeme: str) -> str:
    """Return ``lexeme`` quoted for a tsvector / tsquery literal (no normalisation applies)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def lexeme_fits(lexeme: str) -> bool:
    """Return whether PostgreSQL takes ``lexeme`` (not empty, at most ``MAX_LEXEME_BYTES`` bytes)."""
    return 0 < len(lexeme.encode("utf-8")) <= MAX_LEXEME_BYTES


def _keys(labels: Iterable[str], path: str | None, handle: str | None) -> list[str]:
    keys = [_clean(x) for x in labels]
    if path:
        p = _clean(path)
        keys += [p, p.rsplit("/", 1)[-1]]  # "index.py" finds ".../pager/index.py"
    if handle:
        keys.append(handle)
    return list(dict.fromkeys("=" + k[:MAX_KEY_CHARS].lower() for k in keys if k))


def page_vector(text: str, labels: Iterable[str] = (), path: str | None = None, handle: str | None = None) -> str:
    """Return the tsvector literal of a page (words at weight D with positions, keys at A)."""
    text = _clean(text)
    labels = tuple(labels)
    words = _TEXT_ANALYZER.analyze(text)
    for extra in (*labels, path or ""):
        if extra:
            words += _TEXT_ANALYZER.analyze(_clean(extra))
    if not text.isascii():
        words += _bigrams(text)
    positions: dict[str, list[int]] = {}
    for i, w in enumerate(words, 1):
        got = positions.get(w)
        if got is None:
            if len(positions) >= MAX_LEXEMES:
                continue
            positions[w] = got = []
        if len(got) < MAX_POSITIONS:
            got.append(min(i, MAX_POSITION))
    parts = [
        f"{quote_lexeme(w)}:{','.join(str(p) + 'D' for p in dict.fromkeys(ps))}"
        for w, ps in positions.items()
        if lexeme_fits(w)
    ]
    parts += [f"{quote_lexeme(k)}:1A" for k in _keys(labels, path, handle) if lexeme_fits(k)]
    return " ".join(parts)
