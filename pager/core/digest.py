"""A running digest of a history's canonical bytes: matching a resent history in one pass. Pure.

A restarted harness resends its whole history, as new objects: nothing can
be matched by identity. Hashing each message and comparing it with its
recorded row costs a Python round trip per message (15 us: 0.7 s at 50k
messages, issue 23). Instead, the recorder keeps one running digest over
the canonical bytes (``pager.core.canonical``) of the branch's messages,
joined by commas, and stores it with the last page of every ``record``. On
the first call after a reopen the incoming messages up to that page are
encoded in chunks by one ``orjson.dumps`` each (the elements of a list
encode to exactly the bytes each message encodes to alone, joined by
commas), the chunks are hashed, and one comparison says whether the whole
prefix is the recorded one.

A format that converts (Anthropic Messages, Responses) also keeps a *wire*
digest: the same running digest over the caller's own items
(``digest_wire``), without their transport fields (``Transport``), stored
beside the canonical one with the number of items it covers and the rows they
made (``StoredDigest``). It leaves out the newest ``WIRE_LAG`` items, which a
client re-marks (Claude Code marks the newest message): a digest cannot be
taken back. On a reopen it vouches for the items without
converting them: the format hands the scheduler a lazy prefix
(``pager.formats.lazy``), converting an item only when one of its rows is
read (issue 23: a reopen of 50,000 messages converted every one, 1.2 s).

The digest is a function of the canonical bytes only, so it is the same
whoever recorded the rows (two writers, a fork that shares the prefix). A
chunk holding a transport field (a ``cache_control`` mark, a Responses
``native`` item) is encoded message by message in canonical form instead;
the tests that find them (the mark's substring in the chunk's bytes, a
top-level ``native`` key) can say yes for a chunk without one, never no for
a chunk with one. The chunk's bytes are hashed where orjson wrote them (a
memoryview, not a copy). A digest that does
not match (a corrupted column, an edited or rewound history, a message
orjson cannot encode) is never trusted either way: the caller falls back to
matching message by message, which decides exactly as before.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Sequence

import attrs
import orjson

from pager.core.canonical import CACHE_KEY, canonical_bytes, item_has_transport, unmarked, unmarked_item

__all__ = ["CHUNK", "ITEM_KEYS", "MARKS", "NO_DIGEST", "WIRE_LAG", "RunningDigest", "StoredDigest", "Transport",
           "WireRun", "digest_messages", "digest_wire", "wire_bytes"]

WIRE_LAG = 4  # the newest items a wire digest leaves out (see the module docstring)
CHUNK = 512  # messages encoded per orjson call: ~1.5 MB of a typical agent history, freed at once
# the substring that may mean a cache mark (see the module docstring): it sends a chunk the slow way, as a
# message with a top-level ``native`` does
_MARK = f'"{CACHE_KEY}"'.encode()
_SORTED = orjson.OPT_SORT_KEYS


class RunningDigest:
    """The digest of the first ``rows`` messages of a history (SHA-256 of their canonical bytes, comma-joined)."""

    __slots__ = ("rows", "_hash")

    def __init__(self) -> None:
        self.rows = 0
        self._hash = hashlib.sha256()

    def add(self, canon: bytes) -> None:
        """Append one message's canonical bytes."""
        if self.rows:
            self._hash.update(b",")
        self._hash.update(canon)
        self.rows += 1

    def add_joined(self, joined: bytes | memoryview, count: int) -> None:
        """Append ``count`` messages whose canonical bytes are ``joined`` (comma-joined)."""
        if not count:
            return
        if self.rows:
            self._hash.update(b",")
        self._hash.update(joined)
        self.rows += count

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def copy(self) -> "RunningDigest":
        out = RunningDigest()
        out.rows = self.rows
        out._hash = self._hash.copy()
        return out


def _joined(chunk: Sequence[Mapping[str, Any]]) -> bytes | memoryview:
    """Return the comma-joined canonical bytes of ``chunk`` (orjson errors propagate)."""
    raw = orjson.dumps(chunk if isinstance(chunk, list) else list(chunk), option=_SORTED)
    # with no mark in the bytes, what is left of transport is a Responses item's keys in a top-level
    # ``native`` (``has_transport``): tested on the messages that have one (an Anthropic tool result's
    # ``native`` is its block: no item, and a full canonical pass cost 0.28 s a reopen at 10k messages)
    if _MARK not in raw and not any(map(_native_transport, chunk)):
        return memoryview(raw)[1:-1]  # no transport field anywhere: each element's bytes are its canonical bytes
    return b",".join(canonical_bytes(m) for m in chunk)


def _native_transport(message: Any) -> bool:
    if type(message) is not dict:
        return True  # another mapping: the full canonical pass
    native = message.get("native")
    return native is not None and item_has_transport(native)


def digest_messages(messages: Sequence[Mapping[str, Any]], n: int) -> RunningDigest | None:
    """Return the running digest of ``messages[:n]``, or None when one of them cannot be encoded.

    Costs one C pass over their bytes, in chunks of ``CHUNK`` messages (never
    a second copy of the whole history).
    """
    run = RunningDigest()
    try:
        for i in range(0, n, CHUNK):
            chunk = messages[i : min(i + CHUNK, n)]
            run.add_joined(_joined(chunk), len(chunk))
    except (orjson.JSONEncodeError, TypeError, ValueError):
        return None  # the message-by-message path raises the MessageError that names it
    return run


def _marked(items: Sequence[Any]) -> bool | None:
    """Return whether a cache mark is where clients put one (None: an item that is not a plain dict).

    On an item, one of its content blocks, or a block inside a tool result's content: a walk over the
    blocks, where a substring search for the mark over every chunk's bytes cost 0.08 s a reopen at
    50k Anthropic messages (``"`` ends the needle, and JSON is full of them). A mark anywhere else
    stays in the digest: a digest that then differs only sends the reopen down the eager path.
    """
    for it in items:
        if type(it) is not dict:
            return None
        if CACHE_KEY in it:
            return True
        content = it.get("content")
        if type(content) is list:
            for block in content:
                if type(block) is dict:
                    if CACHE_KEY in block:
                        return True
                    inner = block.get("content")
                    if type(inner) is list and any(type(x) is dict and CACHE_KEY in x for x in inner):
                        return True
    return False


@attrs.frozen(slots=True)
class Transport:
    """A wire format's transport fields, for its wire digest: where one may be, and its removal.

    Cache marks where clients put them (``_marked``; on items that are not plain dicts, a substring
    search of their bytes); ``keys``: top-level keys of an item that may be transport (a Responses
    item's ``id``, ``status``: tested on the items, a substring search for ``"id"`` over every chunk
    cost 0.3 s a reopen at 76k items).
    """

    keys: tuple[str, ...]
    clean: Callable[[Any], Any]

    def found(self, raw: bytes, items: Sequence[Any]) -> bool:
        marked = _marked(items)
        if marked or (marked is None and _MARK in raw):
            return True
        return bool(self.keys) and any(k in it for it in items for k in self.keys)


MARKS = Transport((), unmarked)  # Anthropic Messages: cache marks
ITEM_KEYS = Transport(("id", "status"), unmarked_item)  # Responses: marks, an item's id and status


def wire_bytes(item: Any, transport: Transport = MARKS) -> bytes:
    """Return a wire item's sorted-key bytes without its transport fields (what ``digest_wire`` hashes for it)."""
    raw = orjson.dumps(item, option=_SORTED)
    return orjson.dumps(transport.clean(item), option=_SORTED) if transport.found(raw, (item,)) else raw


def digest_wire(items: Sequence[Any], n: int, run: RunningDigest | None = None,
                transport: Transport = MARKS) -> RunningDigest | None:
    """Return the running digest of wire ``items[:n]`` (``run``: extend it from ``run.rows``), None if unencodable.

    Chunks as ``digest_messages`` does: a chunk with no trace of a transport field is hashed as orjson
    wrote it, one that may hold one item by item without it.
    """
    run = run if run is not None else RunningDigest()
    try:
        for i in range(run.rows, n, CHUNK):
            chunk = items[i : min(i + CHUNK, n)]
            raw = orjson.dumps(chunk if isinstance(chunk, list) else list(chunk), option=_SORTED)
            if transport.found(raw, chunk):
                run.add_joined(b",".join([wire_bytes(x, transport) for x in chunk]), len(chunk))
            else:
                run.add_joined(memoryview(raw)[1:-1], len(chunk))
    except (orjson.JSONEncodeError, TypeError, ValueError):
        return None
    return run


# what a conversation's head memo keeps when its items cannot be encoded (an SDK object orjson does not
# know): not tried again while the head is the same (a retry would encode the whole head every call)
NO_DIGEST = RunningDigest()


@attrs.frozen(slots=True)
class WireRun:
    """A format's wire digest of a conversation's items: ``run`` over the first ``run.rows`` items.

    ``rows``: the neutral rows those items converted to (the lead, a system prompt, included).
    """

    format: str
    run: RunningDigest
    rows: int


@attrs.frozen(slots=True)
class StoredDigest:
    """What a page's digest column holds: the canonical running digest and the wire one, either may be absent.

    Stored as text: the canonical hex (``-`` when unknown), then, when there is a wire digest,
    `` <format> <items> <rows> <hex>``: the digest of the first ``items`` wire items, which made the
    first ``rows`` rows. A column written before wire digests is the canonical hex alone.
    """

    canonical: str | None
    wire_format: str | None = None
    wire_items: int = 0
    wire_rows: int = 0
    wire: str | None = None

    @classmethod
    def of(cls, canonical: RunningDigest | None, wire: WireRun | None) -> "StoredDigest":
        canon = canonical.hexdigest() if canonical is not None else None
        if wire is None:
            return cls(canon)
        return cls(canon, wire.format, wire.run.rows, wire.rows, wire.run.hexdigest())

    def text(self) -> str | None:
        if self.canonical is None and self.wire is None:
            return None
        head = self.canonical or "-"
        if self.wire is None:
            return head
        return f"{head} {self.wire_format} {self.wire_items} {self.wire_rows} {self.wire}"

    def vouches(self, name: str, items: Sequence[Any], transport: Transport = MARKS) -> RunningDigest | None:
        """Return the digest of the first ``wire_items`` of ``items`` when it is this wire digest of format ``name``.

        None when there is none of that format, ``items`` is not a list that long, or its digest differs.
        """
        n = self.wire_items
        if self.wire is None or self.wire_format != name or not 0 < n <= len(items) or not isinstance(items, list):
            return None
        run = digest_wire(items, n, transport=transport)
        return run if run is not None and run.hexdigest() == self.wire else None

    @classmethod
    def parse(cls, text: str | None) -> "StoredDigest":
        if not text:
            return cls(None)
        parts = text.split(" ")
        canon = None if parts[0] == "-" else parts[0]
        if len(parts) == 5 and parts[2].isdigit() and parts[3].isdigit():
            return cls(canon, parts[1], int(parts[2]), int(parts[3]), parts[4])
        return cls(canon)
