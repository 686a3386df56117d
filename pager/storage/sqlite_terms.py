"""The SQLite store's numbering of terms: table ``vocab``, and each page's terms as numbers.

A page keeps its terms twice: as JSON (``pages.terms``, what ``PageRecord``
reads, unchanged) and as little-endian int32 numbers into ``vocab``
(``pages.term_ids``). A reopen reads the numbers: one ``bytes.join`` and
numpy, no string made per term, so 1.9 M term occurrences at 50k pages
cost a table read instead of ~2 s of Python (issue 23). The numbering is
the store's, shared by every session and every process: a number, once
committed, never changes its word; a process learns the numbers other
processes added by reading the rows past the last it knows
(``pager.storage.sqlite_words``: one copy of the committed numbers per
store per process).

Each connection's ``TermVocab`` numbers new terms inside its write
transaction (which holds SQLite's write lock, so no other writer numbers
meanwhile) into an **overlay** of its own: the shared copy learns them
when the transaction commits (``committed``), and a rollback just drops
them, so a sibling never sees a number that was taken back.
"""

from __future__ import annotations

import sqlite3
from itertools import repeat
from typing import Any, Iterable, Sequence

import numpy as np
import orjson

from pager.storage.sqlite_words import StoreWords, _Numbers

__all__ = ["VOCAB_SCHEMA", "TermVocab", "decode", "fill_term_ids"]

VOCAB_SCHEMA = "CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)"
_INT32 = np.dtype("<i4")


class _Merged:
    """A shared copy's ``ids`` with a transaction's own numbers over it (read only: ``TermVocab.ids``)."""

    __slots__ = ("own", "base")

    def __init__(self, own: dict[str, int], base: _Numbers) -> None:
        self.own, self.base = own, base

    def get(self, term: str, default: Any = None) -> Any:
        got = self.own.get(term)
        return self.base.get(term, default) if got is None else got

    def __getitem__(self, term: str) -> int:
        got = self.own.get(term)
        return self.base[term] if got is None else got

    def __contains__(self, term: object) -> bool:
        return term in self.own or term in self.base


class TermVocab:
    """A connection's numbering: the store's shared copy (``StoreWords``) and its write transaction's new numbers.

    ``words`` and ``ids`` read both; without new numbers under way they are
    the shared copy's own objects, which a ``TermTable`` may keep.
    """

    def __init__(self, shared: StoreWords) -> None:
        self.shared = shared
        self._first = 0  # the number of the first of _new (set when the transaction reads the table)
        self._fresh = False  # read inside the write transaction under way: no other writer can add a number
        self._drop()  # _new: the terms this transaction numbered, in order; _new_ids their numbers

    @property
    def words(self) -> list[str | None]:
        if not self._new:
            return self.shared.words
        return [*self.shared.words[: self._first], *self._new]  # a copy, only mid-transaction (rare)

    @property
    def ids(self) -> Any:
        return self.shared.ids if not self._new else _Merged(self._new_ids, self.shared.ids)

    def begin(self) -> None:
        """Say a write transaction began (the store calls it after BEGIN)."""
        self._drop()

    def refresh(self) -> None:
        """Read the numbers committed since the shared copy last looked (by this or another process)."""
        self.shared.catch_up()

    def encode(self, db: sqlite3.Connection, terms: Sequence[str]) -> bytes:
        """Return ``terms`` as numbers (int32 bytes), numbering the new ones (inside the caller's write transaction)."""
        return self.encode_many(db, [terms])[0]

    def encode_many(self, db: sqlite3.Connection, pages: Sequence[Sequence[str]]) -> list[bytes]:
        """Return each page's ``terms`` as numbers (int32 bytes), numbering the new ones of all pages at once.

        Inside the caller's write transaction. The table is read once per
        transaction, the first time a term is new: the transaction holds
        SQLite's write lock (``BEGIN IMMEDIATE``), so no other writer adds a
        number until it ends, and new terms take the numbers SQLite would
        give them (the highest plus one, in order of first appearance),
        written in one statement, not read back (issue 23).
        """
        ids = self.shared.ids
        out: list[bytes] = []
        lacking: list[tuple[int, list[int | None]]] = []
        for terms in pages:
            # looked up in C (``dict.get`` skips ``_Numbers``' own lookups): only the terms the shared copy
            # lacks (new, numbered in this transaction, or covered by the vocabulary snapshot) go on below
            nums = list(map(dict.get, repeat(ids), terms))
            if None in nums:
                lacking.append((len(out), nums))
                out.append(b"")
            else:
                out.append(np.array(nums, dtype=_INT32).tobytes())
        if lacking:
            self._number(db, list(dict.fromkeys(
                t for i, nums in lacking for t, n in zip(pages[i], nums) if n is None)))
            number = self.ids.__getitem__
            for i, _nums in lacking:
                terms = pages[i]
                out[i] = np.fromiter(map(number, terms), dtype=_INT32, count=len(terms)).tobytes()
        return out

    def _number(self, db: sqlite3.Connection, absent: Sequence[str]) -> None:
        """Give the terms of ``absent`` (distinct) without a number the next ones, in order.

        Reads the table first, once a transaction (see ``encode_many``).
        """
        ids, own = self.shared.ids, self._new_ids
        ids.find_many([t for t in absent if t not in own])  # those below the vocabulary snapshot's cover
        new = [t for t in absent if t not in own and t not in ids]
        if new and not self._fresh:
            size = self.shared.catch_up()
            self._fresh = db.in_transaction  # committed() or rolled_back() ends it with the transaction
            if not self._new:
                self._first = size
            new = [t for t in new if t not in ids]
        if new:
            first = self._first + len(self._new)  # catch_up pads gaps: the highest number in the table is one less
            numbered = list(zip(range(first, first + len(new)), new))
            self._new.extend(new)
            self._unwritten.extend(new)
            own.update((t, i) for i, t in numbered)
            if not db.in_transaction:  # no transaction: written and committed at once
                db.executemany("INSERT INTO vocab (id, term) VALUES (?, ?)", numbered)
                self.committed()

    def write(self, db: sqlite3.Connection) -> None:
        """Write this transaction's new numbers (the store calls it just before COMMIT).

        Not when numbered: nothing in the transaction reads the table (the
        shared copy reads committed rows only, through its own connection),
        so the rows wait for the end of the transaction, which the proxy
        runs after it has sent the request on (``Pager._assemble``'s
        ``ready``): a new tool output's few hundred new terms cost 2-3 ms of
        inserts into ``vocab``'s two B-trees (issue 23).
        """
        if self._new and db.in_transaction:
            start = len(self._new) - len(self._unwritten)
            db.executemany("INSERT INTO vocab (id, term) VALUES (?, ?)",
                           zip(range(self._first + start, self._first + len(self._new)), self._unwritten))
            self._unwritten = []

    def committed(self) -> None:
        if self._new:
            self.shared.absorb(self._first, self._new)
        self._drop()

    def rolled_back(self) -> None:
        """Forget the numbers this transaction added: rolled back, another writer may reuse them."""
        self._drop()

    def _drop(self) -> None:
        self._fresh = False
        self._new: list[str] = []
        self._unwritten: list[str] = []  # the end of _new, not yet in the table (``write``)
        self._new_ids: dict[str, int] = {}


def decode(blobs: Iterable[bytes]) -> np.ndarray:
    """Return the term numbers of pages one after the other (``blobs``: each page's ``term_ids``)."""
    return np.frombuffer(b"".join(blobs), dtype=_INT32).astype(np.int32)  # a native copy: sorts fastest


def fill_term_ids(db: sqlite3.Connection) -> None:
    """Number the terms of every page stored before ``term_ids`` (a migration: once, O(pages)).

    Inside the opening write transaction, with a numbering of its own (not
    the shared copy's: a rollback of the migration must leave that alone).
    """
    ids: dict[str, int] = dict(db.execute("SELECT term, id FROM vocab"))
    top = max(ids.values(), default=0)
    last = 0
    while True:
        rows = db.execute("SELECT id, terms FROM pages WHERE id > ? AND terms IS NOT NULL AND term_ids IS NULL "
                          "ORDER BY id LIMIT 2000", (last,)).fetchall()
        if not rows:
            return
        out = []
        for pid, text in rows:
            terms = orjson.loads(text)
            for t in terms:
                if t not in ids:
                    top += 1
                    ids[t] = top
                    db.execute("INSERT INTO vocab (id, term) VALUES (?, ?)", (top, t))
            out.append((np.fromiter(map(ids.__getitem__, terms), dtype=_INT32, count=len(terms)).tobytes(), pid))
        db.executemany("UPDATE pages SET term_ids=? WHERE id=?", out)
        last = rows[-1][0]
