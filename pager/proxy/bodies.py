"""Request bodies parsed in proportion to what is new: a conversation's resent history is not parsed again.

Theory of operation
-------------------
A client resends its whole history as JSON on every call; at 1k messages that
is megabytes, and parsing it (then comparing it with the previous request to
reuse its objects, ``pager.core.canonical.resent``) grew with the history. But the
bytes of the history's first items are the previous request's bytes: where
two bodies agree byte for byte up to the end of item k, items 0..k-1 parse to
equal values. ``BodyCache.parse`` keeps, per recent conversation, the previous
body, the byte offset where each history item ends and the parsed items. For a
new body it finds the longest run of leading items whose bytes are unchanged
(``bytes.startswith`` at an offset: memcmp, no copy), hands back the previous
objects for them, and scans and parses only the rest: the new items, and the
request without its history array (model, system, tools). A body that matches
nothing, or is not the shape this expects, is parsed whole with orjson, so the
result always equals ``orjson.loads(body)``.

Conversations are found by the body's first ``KEY_BYTES`` bytes (model, system
prompt, first messages: what a client resends unchanged); two conversations
with the same opening are told apart by which one's items the body extends.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import attrs
import orjson

__all__ = ["BodyCache", "KEY_BYTES"]

KEY_BYTES = 4096
CHAIN = 4  # conversations remembered per opening (forks, subagents with one system prompt)
FORK_ITEMS = 2  # a body that keeps all but this many items is the same conversation (a cache mark moved)
MIN_BYTES = 64 * 1024  # a smaller body parses whole in well under a millisecond
# a JSON string (escapes included) or a bracket: what item boundaries are found from
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_WS = b" \t\r\n"


@attrs.define(slots=True)
class _Seen:
    raw: bytes
    items: list[Any]
    start: int | None = None  # offset just after the history array's '[' (-1: not a shape to extend)
    ends: list[int] = attrs.field(factory=list)  # offset just after each item's closing bracket

    def scanned(self, key: str) -> bool:
        """Find the item boundaries of ``raw``, once: only a body some later body extends pays for it."""
        if self.start is None:
            self.start, self.ends = _bounds(self.raw, key, len(self.items))
        return self.start >= 0


def _bounds(raw: bytes, key: str, n_items: int) -> tuple[int, list[int]]:
    """Return (offset after the history array's ``[``, each item's end offset), or (-1, []) for another shape."""
    start, ends = _find_array(raw, key), []  # type: ignore[var-annotated]
    if start is not None and _scan_items(raw, start, ends) is not None and len(ends) == n_items:
        return start, ends
    return -1, []


def _scan_items(body: bytes, pos: int, ends: list[int]) -> int | None:
    """Append the end offset of each item from ``pos`` (inside the array, at an item boundary) to ``ends``.

    Return the offset of the array's closing ``]``, or None when the array holds
    anything but objects and arrays (the caller then parses the body whole).
    """
    depth = 1
    prev = pos
    for m in _TOKEN.finditer(body, pos):
        at = m.start()
        c = body[at]
        if c == 0x22:  # '"'
            if depth == 1:
                return None  # a string item
            continue
        if c in (0x7B, 0x5B):  # '{' '['
            if depth == 1:
                gap = body[prev:at].strip(_WS)
                if gap != (b"," if ends and prev == ends[-1] else b""):
                    return None  # a scalar item, or an item boundary not where it was expected
            depth += 1
            continue
        depth -= 1
        if depth == 1:
            ends.append(m.end())
            prev = m.end()
        elif depth == 0:
            if body[prev:at].strip(_WS):
                return None
            return at
    return None


def _find_array(body: bytes, key: str) -> int | None:
    """Return the offset just after the ``[`` of the top-level ``key``'s array, or None."""
    want = orjson.dumps(key)
    depth = 0
    for m in _TOKEN.finditer(body):
        c = body[m.start()]
        if c == 0x22:
            if depth == 1 and m.group() == want:
                rest = body[m.end():m.end() + 64].lstrip(_WS)
                if rest[:1] == b":":
                    after = rest[1:].lstrip(_WS)
                    if after[:1] != b"[":
                        return None
                    return body.index(b"[", m.end()) + 1
            continue
        depth += 1 if c in (0x7B, 0x5B) else -1
    return None


class BodyCache:
    """Recent conversations' bodies, for ``parse``. See the module docstring."""

    def __init__(self, maxsize: int = 64, min_bytes: int = MIN_BYTES, key_bytes: int = KEY_BYTES) -> None:
        self.maxsize = maxsize
        self.min_bytes = min_bytes
        self.key_bytes = key_bytes
        self._seen: OrderedDict[tuple[str, bytes], list[_Seen]] = OrderedDict()
        self._pending: list[tuple[_Seen, str]] = []  # parsed whole, boundaries not yet found (take_pending)

    def parse(self, body: bytes, key: str, route: str = "") -> Any:
        """Return ``orjson.loads(body)``, reusing the previous request's objects for unchanged history items.

        ``key``: the request's history list (``messages``, ``input``).
        Raises ``orjson.JSONDecodeError`` as ``orjson.loads`` does.
        """
        if len(body) < self.min_bytes:
            return orjson.loads(body)
        ckey = (route, body[:self.key_bytes])
        chain = self._seen.get(ckey)
        best, lo = None, 0
        for seen in chain or ():
            n = self._match(seen, body, key)
            if n > lo:
                best, lo = seen, n
        if best is not None:
            out = self._extend(best, lo, body, key)
            if out is not None:
                if lo < len(best.ends) - FORK_ITEMS:
                    # a fork of that conversation (an edit, a retry): both go on, each extends its own
                    chain.insert(0, out[1])  # type: ignore[union-attr]
                    del chain[CHAIN:]
                else:
                    best.raw, best.ends, best.items = out[1].raw, out[1].ends, out[1].items
                self._seen.move_to_end(ckey)
                return out[0]
        req = orjson.loads(body)
        self._remember(ckey, body, key, req)
        return req

    @staticmethod
    def _match(seen: _Seen, body: bytes, key: str) -> int:
        """Return how many leading items of ``seen`` ``body`` holds byte for byte (comparing each byte about once)."""
        if not seen.scanned(key):
            return 0
        raw, start, ends = seen.raw, seen.start, seen.ends
        assert start is not None
        view = memoryview(raw)
        if not ends or not body.startswith(view[:start]):
            return 0
        lo, hi, off = 0, len(ends), start
        # the common cases first: every item kept, or all but the newest one or two (a client that marks its
        # newest block for caching, Claude Code, moves the mark off it on the next call). The item alone is
        # compared first, so the whole head is compared (memory-bound: ~0.5 ms a 2 MB body) about once
        for keep in range(hi, max(0, hi - 1 - FORK_ITEMS), -1):
            at = ends[keep - 2] if keep >= 2 else off
            if body.startswith(view[at:ends[keep - 1]], at):
                if body.startswith(view[off:at], off):
                    return keep
                hi = keep - 2  # something before it differs
                break
            hi = keep - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if body.startswith(view[off:ends[mid - 1]], off):
                lo, off = mid, ends[mid - 1]
            else:
                hi = mid - 1
        return lo

    @staticmethod
    def _extend(seen: _Seen, lo: int, body: bytes, key: str) -> tuple[Any, _Seen] | None:
        """Return the request of ``body`` and its record, ``seen``'s first ``lo`` items reused; None to parse whole."""
        start = seen.start
        assert start is not None
        new_ends = seen.ends[:lo]
        off = new_ends[-1]
        close = _scan_items(body, off, new_ends)
        if close is None:
            return None
        try:
            tail = body[off:close].lstrip(_WS)
            fresh = orjson.loads(b"[" + tail[1:] + b"]") if tail else []
            req = orjson.loads(body[:start] + body[close:])
        except orjson.JSONDecodeError:
            return None  # the caller parses it whole and raises what orjson says
        if not isinstance(req, dict) or req.get(key) != []:
            return None
        items = seen.items[:lo] + fresh
        req[key] = list(items)  # the caller's to change: the copy kept here is for the next body
        return req, _Seen(body, items, start, new_ends)

    def _remember(self, ckey: tuple[str, bytes], body: bytes, key: str, req: Any) -> None:
        items = req.get(key) if isinstance(req, dict) else None
        if not isinstance(items, list) or not items:
            return
        chain = self._seen.setdefault(ckey, [])
        seen = _Seen(body, items)
        chain.insert(0, seen)
        self._pending.append((seen, key))
        del self._pending[:-self.maxsize]
        del chain[CHAIN:]
        self._seen.move_to_end(ckey)
        while len(self._seen) > self.maxsize:
            self._seen.popitem(last=False)


    def take_pending(self) -> list[tuple[_Seen, bytes, str, int]]:
        """Hand over the bodies parsed whole since the last call, for ``find_bounds``.

        A conversation's first body (after a restart, a fork) is parsed whole,
        and the next one would scan it for item boundaries (~0.1 s for 2 MB)
        on its own path. The proxy finds them in a worker thread after the
        first body's answer is relayed (``find_bounds``, pure) and sets them
        on its own thread (``set_bounds``), so ``parse`` never races a scan.
        """
        pending, self._pending = self._pending, []
        return [(seen, seen.raw, key, len(seen.items)) for seen, key in pending if seen.start is None]

    @staticmethod
    def find_bounds(jobs: list[tuple[_Seen, bytes, str, int]]) -> list[tuple[_Seen, bytes, tuple[int, list[int]]]]:
        """Scan each job's body (safe in any thread: reads bytes only)."""
        return [(seen, raw, _bounds(raw, key, n)) for seen, raw, key, n in jobs]

    @staticmethod
    def set_bounds(found: list[tuple[_Seen, bytes, tuple[int, list[int]]]]) -> None:
        """Keep what ``find_bounds`` found, for a record still unscanned and still holding that body."""
        for seen, raw, (start, ends) in found:
            if seen.start is None and seen.raw is raw:
                seen.start, seen.ends = start, ends
