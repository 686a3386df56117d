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

import hashlib
import sqlite3
from itertools import repeat
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import orjson

from pager.errors import StoreError

__all__ = ["VOCAB_SCHEMA", "TermVocab", "fill_term_ids", "save_vocab_snapshot"]

VOCAB_SCHEMA = "CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)"
_INT32 = np.dtype("<i4")


class _Numbers(dict):  # type: ignore[type-arg]
    """term -> number: those this process has read, and those a vocabulary snapshot covers, looked up on demand.

    A reopen reads the snapshot's words (one string split, ``TermVocab.load``)
    but not this inverse: 238k dict entries at 50k pages cost 0.2 s. A term
    numbered below ``covered`` is looked up in ``vocab`` the first time it is
    asked for (its number never changes: kept from then on); one numbered
    later is read by ``refresh`` as before.
    """

    __slots__ = ("_lookup", "_absent")

    def __init__(self) -> None:
        super().__init__()
        self._lookup: Callable[[str], int | None] | None = None
        self._absent: set[str] = set()  # terms with no number below ``covered`` (that never changes either)

    def _find(self, term: str) -> int | None:
        if self._lookup is None or term in self._absent or not isinstance(term, str):
            return None
        got = self._lookup(term)
        if got is None:
            self._absent.add(term)
            return None
        dict.__setitem__(self, term, got)
        return got

    def __missing__(self, term: str) -> int:
        got = self._find(term)
        if got is None:
            raise KeyError(term)
        return got

    def __contains__(self, term: object) -> bool:
        return dict.__contains__(self, term) or self._find(term) is not None  # type: ignore[arg-type]

    def get(self, term: str, default: Any = None) -> Any:
        got = dict.get(self, term)
        if got is None:
            got = self._find(term)
        return default if got is None else got


class TermVocab:
    """A process's copy of the store's ``vocab``: ``words[i]`` is term ``i``, ``ids`` the inverse."""

    def __init__(self) -> None:
        self.words: list[str | None] = [None]  # numbers start at 1 (SQLite's first rowid)
        self.ids: dict[str, int] = _Numbers()
        self._committed = 1
        self._fresh = False  # read inside the write transaction under way: no other writer can add a number
        self._covered = 0  # words 1 .. covered-1 came from the vocabulary snapshot
        # the connection's ``PRAGMA data_version`` when this copy was last read whole inside a write transaction,
        # and the one the transaction under way began at (``begin``): while the two agree no other connection
        # committed since, so no other writer numbered a term this copy lacks
        self._known: int | None = None
        self._began: int | None = None

    def begin(self, data_version: int | None) -> None:
        """Say a write transaction began at the connection's ``data_version`` (the store calls it after BEGIN).

        When no other connection committed since this copy was last read
        whole, the transaction need not read the table again: only this
        process numbered terms since, and it kept them (issue 23: a read per
        call with a new term, about every other call).
        """
        self._began = data_version
        self._fresh = data_version is not None and data_version == self._known

    def load(self, db: sqlite3.Connection) -> None:
        """Start from the store's vocabulary snapshot, if it has a sound one and nothing was read yet."""
        if len(self.words) > 1:
            return
        try:
            row = db.execute("SELECT words, data FROM vocab_snapshot WHERE id=1").fetchone()
        except sqlite3.OperationalError:  # a store mid-migration, before the table
            return
        words = _unpack_words(row[1], int(row[0])) if row is not None else None
        if not words:
            return
        self.words.extend(words)
        covered = self._covered = len(self.words)
        ids = self.ids
        if isinstance(ids, _Numbers):
            def lookup(term: str) -> int | None:
                try:
                    got = db.execute("SELECT id FROM vocab WHERE term=? AND id<?", (term, covered)).fetchone()
                except sqlite3.Error as exc:  # the store was closed under a mirror still in use
                    raise StoreError(f"cannot read the store's term numbers: {exc}") from exc
                return int(got[0]) if got else None
            ids._lookup = lookup

    def refresh(self, db: sqlite3.Connection) -> None:
        """Read the numbers added since this copy last looked (by this or another process)."""
        if len(self.words) == 1:
            self.load(db)
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
        """Return ``terms`` as numbers (int32 bytes), numbering the new ones (inside the caller's write transaction)."""
        return self.encode_many(db, [terms])[0]

    def encode_many(self, db: sqlite3.Connection, pages: Sequence[Sequence[str]]) -> list[bytes]:
        """Return each page's ``terms`` as numbers (int32 bytes), numbering the new ones of all pages at once.

        Inside the caller's write transaction. The table is read once per
        transaction, the first time a term is new (and not even then when no
        other connection committed since it was last read: ``begin``): the
        transaction holds SQLite's write lock (``BEGIN IMMEDIATE``), so no
        other writer adds a number until it ends, and new terms take the
        numbers SQLite would give them (the highest plus one, in order of
        first appearance), written in one statement, not read back (issue 23).
        """
        ids = self.ids
        out: list[bytes] = []
        lacking: list[tuple[int, list[int | None]]] = []
        for terms in pages:
            # looked up in C (``dict.get`` skips ``_Numbers``' own lookups): only the terms this copy lacks
            # (new, or covered by the vocabulary snapshot) take the slow path below
            nums = list(map(dict.get, repeat(ids), terms))
            if None in nums:
                lacking.append((len(out), nums))
                out.append(b"")
            else:
                out.append(np.array(nums, dtype=_INT32).tobytes())
        if lacking:
            self._number(db, list(dict.fromkeys(
                t for i, nums in lacking for t, n in zip(pages[i], nums) if n is None)))
            for i, _nums in lacking:
                terms = pages[i]
                out[i] = np.fromiter(map(ids.__getitem__, terms), dtype=_INT32, count=len(terms)).tobytes()
        return out

    def _number(self, db: sqlite3.Connection, absent: Sequence[str]) -> None:
        """Give the terms of ``absent`` (distinct) without a number the next ones, in order.

        Reads the table first, once a transaction (see ``encode_many``).
        """
        ids = self.ids
        new = [t for t in absent if t not in ids]  # ``in`` finds those below the vocabulary snapshot's cover
        if new and not self._fresh:
            self.refresh(db)
            self._fresh = db.in_transaction  # committed() or rolled_back() ends it with the transaction
            if self._fresh:
                self._known = self._began
            new = [t for t in new if t not in ids]
        if new:
            words = self.words
            first = len(words)  # refresh pads gaps: the highest number in the table is first - 1
            numbered = list(zip(range(first, first + len(new)), new))
            db.executemany("INSERT INTO vocab (id, term) VALUES (?, ?)", numbered)
            words.extend(new)
            ids.update((t, i) for i, t in numbered)

    def committed(self) -> None:
        self._committed = len(self.words)
        self._fresh = False
        self._began = None

    def rolled_back(self) -> None:
        """Forget the numbers this transaction added: rolled back, another writer may reuse them."""
        self._fresh = False
        self._began = None
        for term in self.words[self._committed :]:
            if term is not None:
                self.ids.pop(term, None)
        del self.words[self._committed :]
        if self._committed < self._covered:  # read from the snapshot in the rolled-back transaction: anew
            self._covered = 0
            self._known = None  # read anew, whole
            del self.words[1:]
            self.ids.clear()
            if isinstance(self.ids, _Numbers):
                self.ids._lookup = None
                self.ids._absent.clear()


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


# The vocabulary snapshot (schema 5): the words numbered 1 .. words-1, one blob, written with a session's
# snapshot (``SQLiteStore.save_snapshot``). Numbers never change their word, so it never goes stale; a
# reopen splits it instead of reading 238k rows (``TermVocab.load``).
VOCAB_SNAPSHOT_SCHEMA = ("CREATE TABLE IF NOT EXISTS vocab_snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), "
                         "words INTEGER NOT NULL, data BLOB NOT NULL)")
_LINES, _JSON = b"L", b"J"  # the words joined by newlines, or (one of them holds a newline) a JSON list


def _pack(body: bytes) -> bytes:
    return hashlib.sha256(body).digest() + body


def _pack_words(words: list[str]) -> bytes:
    if any("\n" in w for w in words):
        return _pack(_JSON + orjson.dumps(words))
    return _pack(_LINES + "\n".join(words).encode("utf-8", "surrogatepass"))


def _sound(data: bytes) -> bytes | None:
    """Return the body of a vocabulary snapshot whose checksum holds, else None."""
    body = data[32:]
    return body if len(data) > 32 and hashlib.sha256(body).digest() == data[:32] else None


def _unpack_words(data: bytes, count: int) -> list[str] | None:
    """Return the words of a vocabulary snapshot (None when it is not sound: then ``refresh`` reads them all)."""
    body = _sound(data)
    if body is None:
        return None
    try:
        if body[:1] == _LINES:
            words = body[1:].decode("utf-8", "surrogatepass").split("\n") if count > 1 else []
        elif body[:1] == _JSON:
            words = orjson.loads(body[1:])
        else:
            return None
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        return None
    return words if len(words) == count - 1 else None


def save_vocab_snapshot(db: sqlite3.Connection) -> None:
    """Extend the vocabulary snapshot by the words numbered since (inside the caller's transaction).

    Read from the table, not from a process's copy (which may miss words
    another process numbered); skipped while the numbers are not dense.
    """
    row = db.execute("SELECT words, data FROM vocab_snapshot WHERE id=1").fetchone()
    body = _sound(row[1]) if row is not None else None
    have = int(row[0]) - 1 if body is not None else 0
    got = db.execute("SELECT count(*), min(id), max(id) FROM vocab WHERE id > ?", (have,)).fetchone()
    count, low, high = int(got[0]), got[1], got[2]
    if not count or low != have + 1 or high != low + count - 1:
        return  # nothing new, or a gap in the numbers: the snapshot stays as it is
    new = orjson.loads(db.execute("SELECT json_group_array(term) FROM (SELECT term FROM vocab WHERE id >= ? "
                                  "ORDER BY id)", (low,)).fetchone()[0])
    if body is not None and have and body[:1] == _LINES and not any("\n" in w for w in new):
        data = _pack(body + b"\n" + "\n".join(new).encode("utf-8", "surrogatepass"))  # appended, not re-read
    else:
        old = _unpack_words(row[1], have + 1) if body is not None else []
        if old is None:
            return
        data = _pack_words(old + new)
    db.execute("INSERT OR REPLACE INTO vocab_snapshot VALUES (1, ?, ?)", (have + count + 1, data))
