"""One process's copy of a SQLite store's committed term numbers, and the vocabulary snapshot it starts from.

Theory of operation
-------------------
One process keeps **one copy of the committed numbering per store**
(``StoreWords``, shared by every ``SQLiteStore`` of that database file
while one is open: ``store_words``). A proxy or a worker pool runs many
sessions of one store, each with its own connection; with a copy each,
every session read again every number the others had added, and held its
own copy (measured in ``bench/proxy_overhead.py``: up to 97 ms of CPU in
one request, 34 of 41 ms in ``refresh``). The shared copy:

- holds committed numbers only, and only grows: ``words[i]`` never changes
  once set, so a ``TermTable`` may hold ``words`` and ``ids`` by reference;
- reads the table through a connection of its own (``_Reader``), never
  through a writer's: a connection inside a write transaction sees its own
  uncommitted rows, which a rollback takes back;
- checks, each time it reads on, that its last number still has its word
  in the table: a database replaced under a live process is refused
  (``StoreError``), not silently renumbered.

A connection's own, uncommitted numbers are ``pager.storage.sqlite_terms``'
(``TermVocab``).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import orjson

from pager.errors import StoreError

__all__ = ["VOCAB_SNAPSHOT_SCHEMA", "StoreWords", "release_words", "save_vocab_snapshot", "store_words"]


class _Numbers(dict):  # type: ignore[type-arg]
    """term -> number: those this process has read, and those a vocabulary snapshot covers, looked up on demand.

    A reopen reads the snapshot's words (one string split, ``StoreWords``)
    but not this inverse: 238k dict entries at 50k pages cost 0.2 s. A term
    numbered below ``covered`` is looked up in ``vocab`` the first time it is
    asked for (its number never changes: kept from then on); one numbered
    later is read by ``catch_up`` as before.
    """

    __slots__ = ("_lookup", "_lookup_many", "_absent")

    def __init__(self) -> None:
        super().__init__()
        self._lookup: Callable[[str], int | None] | None = None
        self._lookup_many: Callable[[list[str]], dict[str, int]] | None = None
        self._absent: set[str] = set()  # terms with no number below ``covered`` (that never changes either)

    def find_many(self, terms: Iterable[str]) -> None:
        """Look up at once those of ``terms`` the snapshot may cover and this dict has not read.

        A call's new terms are all asked for (a new term is one no number
        covers): one statement per 900, not one each (700 new terms cost
        2.6 ms more than without a snapshot, one statement each).
        """
        if self._lookup_many is None:
            return
        absent = self._absent
        ask = [t for t in terms if isinstance(t, str) and not dict.__contains__(self, t) and t not in absent]
        if not ask:
            return
        found = self._lookup_many(ask)
        for term in ask:
            got = found.get(term)
            if got is None:
                absent.add(term)
            else:
                dict.__setitem__(self, term, got)

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


class _Reader:
    """The shared copy's own connection, for committed rows only (serialised: one statement at a time).

    Apart from ``StoreWords`` so that a ``_Numbers`` still in a mirror's
    hands keeps it open without keeping the copy (no reference cycle: freed
    by reference counting, closed by ``weakref.finalize``).
    """

    def __init__(self, path: Path) -> None:
        self.lock = threading.Lock()
        try:
            self.db: sqlite3.Connection | None = sqlite3.connect(
                path, isolation_level=None, timeout=30.0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from exc
        weakref.finalize(self, _close_in, self.db, os.getpid())

    def all(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Run ``sql``; every row, read to the end (no read transaction left open to hold back a checkpoint)."""
        with self.lock:
            if self.db is None:
                raise StoreError("cannot read the store's term numbers: the store is closed")
            try:
                return self.db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # a store not yet created or migrated: no numbers yet
                    return []
                raise StoreError(f"cannot read the store's term numbers: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read the store's term numbers: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            if self.db is not None:
                self.db.close()
                self.db = None


def _close_in(db: sqlite3.Connection, pid: int) -> None:
    """Close ``db`` in the process that opened it only: a forked child (a finalizer run at its exit) must not.

    SQLite forbids using a connection across ``fork``; closing one may
    checkpoint and delete the WAL the parent still has mapped.
    """
    if os.getpid() == pid:
        db.close()


class StoreWords:
    """One process's copy of a store's committed numbering: ``words[i]`` is term ``i``, ``ids`` the inverse.

    Shared by the store's connections in this process (``store_words``);
    see the module docstring. ``words`` only grows.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.words: list[str | None] = [None]  # numbers start at 1 (SQLite's first rowid)
        self.ids: _Numbers = _Numbers()
        self.covered = 0  # words 1 .. covered-1 came from the vocabulary snapshot
        self.users = 0  # open stores using this copy (``store_words``)
        self.key: tuple[int, int, int] | None = None  # its place in ``store_words``' table
        self._lock = threading.Lock()
        self._reader = _Reader(self.path)

    def catch_up(self) -> int:
        """Read the numbers committed since this copy last looked (by any connection); return ``len(words)``."""
        with self._lock:
            words = self.words
            if len(words) == 1:
                self._load()
            last = len(words) - 1
            check = last > 0 and words[last] is not None
            start = last if check else len(words)
            # two JSON arrays from one pass: one string each to parse in C, not a Python tuple per term
            got = self._reader.all("SELECT json_group_array(id), json_group_array(term) FROM "
                                   "(SELECT id, term FROM vocab WHERE id >= ? ORDER BY id)", (start,))
            numbers, terms = (orjson.loads(got[0][0]), orjson.loads(got[0][1])) if got else ([], [])
            if check:
                if not numbers or numbers[0] != last or terms[0] != words[last]:
                    raise StoreError(f"store {self.path}: the term numbered {last} is no longer in its table: "
                                     "was pager.db replaced while open? Close every store of it and open again")
                numbers, terms = numbers[1:], terms[1:]
            if numbers:
                if numbers[0] == len(words) and numbers[-1] == len(words) + len(numbers) - 1:
                    words.extend(terms)  # dense and in order, as SQLite numbers rows
                else:
                    for i, term in sorted(zip(numbers, terms)):
                        words.extend([None] * (i - len(words)))  # a gap: keep the list indexable by number
                        words.append(term)
                self.ids.update(zip(terms, numbers))
            return len(words)

    def absorb(self, first: int, new: Sequence[str]) -> None:
        """Learn the numbers ``first``, ``first+1``, ... a transaction of this process just committed for ``new``.

        Skipped when this copy is not at ``first``: past it (a ``catch_up``
        read them already) or short of it (numbers committed in between it
        has not read: the next ``catch_up`` reads them all, these included).
        """
        with self._lock:
            if len(self.words) == first:
                self.words.extend(new)
                self.ids.update(zip(new, range(first, first + len(new))))

    def _load(self) -> None:
        """Start from the store's vocabulary snapshot, if it has a sound one (under the lock, nothing read yet)."""
        row = self._reader.all("SELECT words, data FROM vocab_snapshot WHERE id=1")
        words = _unpack_words(row[0][1], int(row[0][0])) if row else None
        if not words:
            return
        self.words.extend(words)
        covered = self.covered = len(self.words)
        reader = self._reader

        def lookup(term: str) -> int | None:
            got = reader.all("SELECT id FROM vocab WHERE term=? AND id<?", (term, covered))
            return int(got[0][0]) if got else None

        def lookup_many(terms: list[str]) -> dict[str, int]:
            out: dict[str, int] = {}
            for i in range(0, len(terms), 900):  # under SQLite's bound on parameters
                chunk = terms[i : i + 900]
                marks = ",".join("?" * len(chunk))
                out.update(reader.all(f"SELECT term, id FROM vocab WHERE id<? AND term IN ({marks})",
                                      (covered, *chunk)))
            return out
        self.ids._lookup, self.ids._lookup_many = lookup, lookup_many

    def close(self) -> None:
        """Close the connection: numbers not yet looked up then raise ``StoreError`` (the store is closed)."""
        self._reader.close()


# weakly: a store dropped without ``close`` drops its copy too (its reader closes when nothing holds it)
_OPEN: "weakref.WeakValueDictionary[tuple[int, int, int], StoreWords]" = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def store_words(path: str | os.PathLike[str]) -> StoreWords:
    """Return this process's copy of the numbering of the database file ``path`` (opened, or shared).

    One per file (device and inode: a file replaced is another file) while
    a store of it is open; ``release_words`` when that store closes.
    """
    st = os.stat(path)
    key = (os.getpid(), st.st_dev, st.st_ino)  # a forked child opens its own: the connection is not its to use
    with _OPEN_LOCK:
        got = _OPEN.get(key)
        if got is None:
            got = _OPEN[key] = StoreWords(path)
            got.key = key
        got.users += 1
        return got


def release_words(words: StoreWords) -> None:
    """Say a store that had ``words`` from ``store_words`` closed; the last one closes the copy."""
    with _OPEN_LOCK:
        words.users -= 1
        if words.users > 0:
            return
        if words.key is not None and _OPEN.get(words.key) is words:
            del _OPEN[words.key]
    words.close()


# The vocabulary snapshot (schema 5): the words numbered 1 .. words-1, one blob, written with a session's
# snapshot (``SQLiteStore.save_snapshot``). Numbers never change their word, so it never goes stale; a
# reopen splits it instead of reading 238k rows (``StoreWords._load``).
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
