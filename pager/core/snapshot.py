"""A branch's page columns as one compact blob: what a reopen reads instead of every page row. Pure.

A reopen of a 50k-page branch read 50k rows x 18 columns from SQLite: a
Python object per value (~1 s), then a transposition and a decode of the
vocabulary (issue 23). A snapshot holds the same columns as a few arrays:
numbers as numpy bytes, strings as one JSON list per column (repeated ones,
kinds, roles, labels, tool names, paths, as a table of distinct values and
a code per row), each page's terms as the store's term numbers. Decoding it
is a handful of C calls.

A snapshot is derived data. It is encoded from the history mirror (the rows
a ``Pager`` recorded or loaded, whose columns are the store's by
construction) at close, and it covers the first ``rows`` pages of one
branch; the store validates it on open and reads from its rows whatever it
does not cover (``pager.storage.sqlite``). ``decode`` checks a SHA-256 of
the payload and the shape of every part: anything unexpected is
``SnapshotError``, and the caller reads the rows instead.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from pager.core.termload import postings

__all__ = ["FORMAT", "SnapshotError", "Snapshot", "decode", "encode", "history_snapshot"]

FORMAT = 1
_MAGIC = b"pager-snapshot\x00\x01"
_HEAD = struct.Struct("<32sI")  # sha256 of what follows the header, then the length of the JSON header

# columns of ``PageColumns`` a snapshot holds, and how each is coded
_INTS = ("id", "step", "tokens", "stub_tokens", "last_ref", "ref_count")  # int64
_TEXTS = ("hash", "handle", "call_id")  # one JSON list each (mostly distinct values)
_CODED = ("kind", "role", "tool_name", "path", "labels")  # distinct values + an int32 code per row
_LISTS = ("call_ids",)  # a JSON list of lists
_I64, _I32, _U8 = np.dtype("<i8"), np.dtype("<i4"), np.dtype("u1")


class SnapshotError(ValueError):
    """A snapshot blob that does not decode (corrupt, truncated, another format): read the rows instead."""


class Snapshot:
    """A decoded snapshot: ``columns`` (name -> list, as ``PageColumns`` holds them) and the terms as numbers.

    ``tid`` holds each page's term numbers one page after the other (int32),
    ``lens`` how many each page has; ``words`` is the size of the store's
    numbering the snapshot refers to (every number is below it).
    """

    __slots__ = ("rows", "words", "columns", "tid", "lens", "posted")

    def __init__(self, rows: int, words: int, columns: dict[str, list[Any]], tid: np.ndarray,
                 lens: np.ndarray, posted: np.ndarray | None) -> None:
        self.rows = rows
        self.words = words
        self.columns = columns
        self.tid = tid
        self.lens = lens
        self.posted = posted  # the pages' ids by term (``pager.core.termload.postings``): no sort at a reopen

    def cut(self, k: int) -> "Snapshot":
        """Return the first ``k`` rows (a branch that shares only that prefix; its postings are made anew)."""
        if k >= self.rows:
            return self
        end = int(self.lens[:k].sum())
        return Snapshot(k, self.words, {n: c[:k] for n, c in self.columns.items()}, self.tid[:end], self.lens[:k],
                        None)


def encode(columns: Mapping[str, Sequence[Any]], tid: np.ndarray, lens: np.ndarray, words: int,
           posted: np.ndarray | None = None) -> bytes:
    """Return the blob of ``columns`` (the ``PageColumns`` fields) with the terms as numbers ``tid``/``lens``.

    ``posted``: their ``postings`` (made here when not given).
    """
    rows = len(columns["id"])
    parts: list[tuple[str, bytes]] = []
    for name in _INTS:
        parts.append((name, np.asarray(columns[name], dtype=_I64).tobytes()))
    parts.append(("stale", np.asarray(columns["stale"], dtype=bool).astype(_U8).tobytes()))
    for name in _TEXTS:
        parts.append((name, orjson.dumps(list(columns[name]))))
    for name in _CODED:
        values = {v: i for i, v in enumerate(dict.fromkeys(columns[name]))}
        codes = np.fromiter(map(values.__getitem__, columns[name]), dtype=_I32, count=rows)
        parts.append((name, codes.tobytes()))
        parts.append((name + ".values", orjson.dumps(list(values))))
    for name in _LISTS:  # the lists one after the other, and the length of each (no list object per row)
        parts.append((name, orjson.dumps(list(itertools.chain.from_iterable(columns[name])))))
        parts.append((name + ".lens", np.fromiter(map(len, columns[name]), dtype=_I32, count=rows).tobytes()))
    digests = [(i, d) for i, d in enumerate(columns["digest"]) if d is not None]
    parts.append(("digest.rows", np.asarray([i for i, _ in digests], dtype=_I32).tobytes()))
    parts.append(("digest", orjson.dumps([d for _, d in digests])))
    parts.append(("lens", np.asarray(lens, dtype=_I32).tobytes()))
    parts.append(("tid", np.asarray(tid, dtype=_I32).tobytes()))
    if posted is None:
        posted = postings(columns["id"], np.asarray(tid, dtype=np.int64), np.asarray(lens, dtype=np.int64))
    if not len(posted) or int(np.max(posted)) < 2**31:  # else a reopen sorts them (ids past 32 bits)
        parts.append(("posted", np.asarray(posted, dtype=_I32).tobytes()))
    offset, index = 0, []
    for name, data in parts:
        index.append([name, offset, len(data)])
        offset += len(data)
    header = orjson.dumps({"format": FORMAT, "rows": rows, "words": int(words), "parts": index})
    body = header + b"".join(data for _, data in parts)
    return _MAGIC + _HEAD.pack(hashlib.sha256(body).digest(), len(header)) + body


def decode(blob: bytes | memoryview) -> Snapshot:
    """Return the snapshot in ``blob``; ``SnapshotError`` for anything but a sound blob of this format."""
    view = memoryview(blob)
    start = len(_MAGIC) + _HEAD.size
    if len(view) < start or view[: len(_MAGIC)] != _MAGIC:
        raise SnapshotError("not a snapshot of this format")
    digest, hlen = _HEAD.unpack(view[len(_MAGIC) : start])
    body = view[start:]
    if hashlib.sha256(body).digest() != digest:
        raise SnapshotError("the snapshot's checksum does not match")
    try:
        header = orjson.loads(body[:hlen])
        rows, words = int(header["rows"]), int(header["words"])
        if header["format"] != FORMAT:
            raise SnapshotError(f"snapshot format {header['format']}")
        data = body[hlen:]
        part = {name: data[off : off + size] for name, off, size in header["parts"]}
        cols: dict[str, list[Any]] = {}
        for name in _INTS:
            cols[name] = _array(part[name], _I64, rows).tolist()
        cols["stale"] = _array(part["stale"], _U8, rows).astype(bool).tolist()
        for name in _TEXTS:
            cols[name] = _list(part[name], rows)
        for name in _CODED:
            values = orjson.loads(part[name + ".values"])
            if name == "labels":
                values = list(map(tuple, values))
            codes = _array(part[name], _I32, rows)
            if rows and (codes.min() < 0 or codes.max() >= len(values)):
                raise SnapshotError(f"column {name}: a code out of range")
            cols[name] = list(map(values.__getitem__, codes.tolist()))
        for name in _LISTS:
            lens = _array(part[name + ".lens"], _I32, rows)
            flat = _list(part[name], int(lens.sum()) if rows else 0)
            if rows and lens.min() < 0:
                raise SnapshotError(f"column {name}: a negative length")
            cols[name] = _tuples(flat, lens)
        where = _array(part["digest.rows"], _I32, None).tolist()
        hexes = orjson.loads(part["digest"])
        if len(hexes) != len(where) or any(not 0 <= i < rows for i in where):
            raise SnapshotError("column digest: rows out of range")
        digest_col: list[str | None] = [None] * rows
        for i, h in zip(where, hexes):
            digest_col[i] = h
        cols["digest"] = digest_col
        lens = _array(part["lens"], _I32, rows)
        tid = _array(part["tid"], _I32, None)
        if rows and lens.min() < 0 or int(lens.sum()) != len(tid):
            raise SnapshotError("the terms do not add up")
        if len(tid) and (tid.min() < 1 or tid.max() >= words):
            raise SnapshotError("a term number outside the numbering")
        posted = _array(part["posted"], _I32, len(tid)) if "posted" in part else None
        if posted is not None and len(posted) and (posted.min() < min(cols["id"]) or posted.max() > max(cols["id"])):
            raise SnapshotError("postings of other pages")
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise SnapshotError(f"a malformed snapshot: {exc}") from None
    return Snapshot(rows, words, cols, tid.astype(np.int32), lens.astype(np.int64),
                    None if posted is None else posted.copy())


def _tuples(flat: list[Any], lens: np.ndarray) -> list[tuple[Any, ...]]:
    """Return ``flat`` cut into tuples of ``lens`` items (most rows hold none or one: made in C)."""
    out: list[tuple[Any, ...]] = [()] * len(lens)
    rows = np.flatnonzero(lens).tolist()
    if len(flat) == len(rows):  # one item each
        values: Any = zip(flat)
    else:
        ends = np.cumsum(lens)
        values = (tuple(flat[a:b]) for a, b in zip((ends - lens)[rows].tolist(), ends[rows].tolist()))
    for r, v in zip(rows, values):
        out[r] = v
    return out


def _array(data: memoryview, dtype: np.dtype, rows: int | None) -> np.ndarray:
    if len(data) % dtype.itemsize:
        raise SnapshotError("a part of the wrong size")
    out = np.frombuffer(data, dtype=dtype)
    if rows is not None and len(out) != rows:
        raise SnapshotError("a column of the wrong length")
    return out


def _list(data: memoryview, rows: int) -> list[Any]:
    out = orjson.loads(data)
    if not isinstance(out, list) or len(out) != rows:
        raise SnapshotError("a column of the wrong length")
    return out


def history_snapshot(
    h: Any, numbers: Mapping[str, int], words: int, digests: Mapping[int, str],
    stats: tuple[Sequence[bool], Sequence[int], Sequence[int]] | None = None,
) -> bytes | None:
    """Return the snapshot of mirror ``h`` (``pager.core.history.History``), or None when it cannot be made.

    ``numbers`` maps a term to its number in the store's numbering (a term
    without one: no snapshot), ``words`` is the size of that numbering,
    ``digests`` the running digests stored with the pages (page id -> hex),
    ``stats`` the statistics columns (stale, last_ref, ref_count) to take
    rather than the mirror's. The terms of loaded
    rows are numbers already; the others are numbered here, in the order
    the store numbered them (a recorded page's frozenset is the one whose
    tuple ``prepare`` stored).
    """
    n = len(h.page)
    col = h.terms
    table = getattr(col, "table", None)
    # the rows loaded with the store's numbers come first: their numbers as one run of the table
    m = min(n, len(table)) if table is not None else 0
    while m and list.__getitem__(col, slice(0, m)).count(None) != m:
        m = 0  # not the leading rows (never so today): number every row
    head = table.tid[: int(table.lens[:m].sum())] if m else np.zeros(0, np.int32)
    chunks: list[Any] = [np.asarray(head, dtype=np.int32)]
    lens = [np.asarray(table.lens[:m], dtype=np.int64)] if m else []
    get = numbers.get
    rest: list[int] = []
    for r in range(m, n):
        value = list.__getitem__(col, r)
        ids = col.numbers(r) if value is None else list(map(get, value))
        if value is not None and None in ids:
            return None
        chunks.append(np.asarray(ids, dtype=np.int32))
        rest.append(len(ids))
    lens.append(np.asarray(rest, dtype=np.int64))
    tid = np.concatenate(chunks)
    lens_all = np.concatenate(lens)
    if len(tid) and (int(tid.max()) >= words or int(tid.min()) < 1):
        return None
    stale, last_ref, ref_count = stats if stats is not None else (h.stale, h.last_ref, h.ref_count)
    if not len(stale) == len(last_ref) == len(ref_count) == n:
        return None
    columns = {
        "id": h.page, "hash": h.hash, "kind": h.kind, "role": h.role, "step": h.step, "tokens": h.tokens,
        "stub_tokens": h.stub_tokens, "call_id": h.answers, "call_ids": h.call_ids, "tool_name": h.tool_name,
        "path": h.path, "stale": stale, "labels": h.labels, "last_ref": last_ref, "ref_count": ref_count,
        "handle": h.handle, "digest": [digests.get(p) for p in h.page],
    }
    return encode(columns, tid, lens_all, words)
