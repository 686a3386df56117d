"""The SQLite store's numbering of terms: table ``vocab``, and each page's terms as numbers.

A page keeps its terms twice: as JSON (``pages.terms``, what ``PageRecord``
reads, unchanged) and as little-endian int32 numbers into ``vocab``
(``pages.term_ids``). A reopen reads the numbers: one ``bytes.join`` and
numpy, no string made per term, so 1.9 M term occurrences at 50k pages
cost a table read instead of ~2 s of Python (issue 23). The numbering is
the store's, shared by every session and every process: a number, once
committed, never changes its word; a process learns the numbers other
processes added by reading the rows past the last it knows.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable, Sequence

import numpy as np
import orjson

__all__ = ["VOCAB_SCHEMA", "TermVocab", "fill_term_ids"]

VOCAB_SCHEMA = "CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)"
_INT32 = np.dtype("<i4")


class TermVocab:
    """A process's copy of the store's ``vocab``: ``words[i]`` is term ``i``, ``ids`` the inverse."""

    def __init__(self) -> None:
        self.words: list[str | None] = [None]  # numbers start at 1 (SQLite's first rowid)
        self.ids: dict[str, int] = {}
        self._committed = 1
        self._fresh = False  # read inside the write transaction under way: no other writer can add a number

    def refresh(self, db: sqlite3.Connection) -> None:
        """Read the numbers added since this copy last looked (by this or another process)."""
        # two JSON arrays from one pass: one string each to parse in C, not a Python tuple per term
        got = db.execute("SELECT json_group_array(id), json_group_array(term) FROM "
                         "(SELECT id, term FROM vocab WHERE id >= ? ORDER BY id)", (len(self.words),)).fetchone()
        numbers, terms = orjson.loads(got[0]), orjson.loads(got[1])
        if not numbers:
            return
        words = self.words
        if numbers[0] == len(words) and numbers[-1] == len(words) + len(numbers) - 1:
            words.extend(terms)  # dense and in order, as SQLite numbers rows
        else:
            for i, term in sorted(zip(numbers, terms)):
                words.extend([None] * (i - len(words)))  # a gap: keep the list indexable by number
                words.append(term)
        self.ids.update(zip(terms, numbers))

    def encode(self, db: sqlite3.Connection, terms: Sequence[str]) -> bytes:
        """Return ``terms`` as numbers (int32 bytes), numbering the new ones (inside the caller's write transaction).

        The table is read once per transaction, the first time a term is new:
        the transaction holds SQLite's write lock (``BEGIN IMMEDIATE``), so no
        other writer adds a number until it ends, and new terms take the
        numbers SQLite would give them (the highest plus one, in order),
        written with them, not read back (issue 23: three statements a page
        with new terms became one, and one read per call).
        """
        ids = self.ids
        if any(t not in ids for t in terms):
            if not self._fresh:
                self.refresh(db)
                self._fresh = db.in_transaction  # committed() or rolled_back() ends it with the transaction
            new = [t for t in dict.fromkeys(terms) if t not in ids]
            if new:
                words = self.words
                first = len(words)  # refresh pads gaps: the highest number in the table is first - 1
                numbered = list(zip(range(first, first + len(new)), new))
                db.executemany("INSERT INTO vocab (id, term) VALUES (?, ?)", numbered)
                words.extend(new)
                ids.update((t, i) for i, t in numbered)
        return np.fromiter(map(ids.__getitem__, terms), dtype=_INT32, count=len(terms)).tobytes()

    def committed(self) -> None:
        self._committed = len(self.words)
        self._fresh = False

    def rolled_back(self) -> None:
        """Forget the numbers this transaction added: rolled back, another writer may reuse them."""
        self._fresh = False
        for term in self.words[self._committed :]:
            if term is not None:
                self.ids.pop(term, None)
        del self.words[self._committed :]


def decode(blobs: Iterable[bytes]) -> np.ndarray:
    """Return the term numbers of pages one after the other (``blobs``: each page's ``term_ids``)."""
    return np.frombuffer(b"".join(blobs), dtype=_INT32).astype(np.int32)  # a native copy: sorts fastest


def fill_term_ids(db: sqlite3.Connection) -> None:
    """Number the terms of every page stored before ``term_ids`` (a migration: once, O(pages))."""
    vocab = TermVocab()
    vocab.refresh(db)
    last = 0
    while True:
        rows = db.execute("SELECT id, terms FROM pages WHERE id > ? AND terms IS NOT NULL AND term_ids IS NULL "
                          "ORDER BY id LIMIT 2000", (last,)).fetchall()
        if not rows:
            return
        db.executemany("UPDATE pages SET term_ids=? WHERE id=?",
                       [(vocab.encode(db, orjson.loads(t)), pid) for pid, t in rows])
        last = rows[-1][0]
