"""Pages: the unit pager schedules. Frozen values, no I/O.

A page is one message of the caller's history, classified:

- ``system``: a system (or developer) message; pinned in L1.
- ``user`` / ``assistant``: turn pages. The first user message is pinned in L1
  verbatim and read-only.
- ``tool``: one tool call's output, always scheduled together with the
  assistant message that made the call (see ``pairing``).
- ``file``: a tool output recognised as a file read (``cat path``,
  ``read_file``, an editor's ``view``); keyed by ``path``. A newer read of the
  same path makes the older ones ``stale``.

Pages are never altered: the store keeps the original message bytes; what
changes over time (last reference, reference count, staleness, labels) lives
in the store's page table and is passed to the planner as numpy columns.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

import attrs
import orjson

__all__ = [
    "KINDS",
    "Page",
    "content_hash",
    "hash_bytes",
    "handle_for",
]

KINDS = ("system", "user", "assistant", "tool", "file")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
# Kinds that are one tool call's output: paired with their call, stubbed when big.
TOOL_KINDS = ("tool", "file")


def content_hash(message: Mapping[str, Any]) -> str:
    """Return a stable hash of a message's bytes (keys sorted), for dedup and branching."""
    return hash_bytes(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))


def hash_bytes(data: bytes) -> str:
    """Return the hash ``content_hash`` gives for already-encoded (sorted-key orjson) bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def handle_for(session: str, seq: int, hash: str) -> str:
    """Return the handle the model sees for an off-prompt page.

    Derived from the session, the message's position and its content hash, so
    it is known before the store assigns an id, survives a rebuild, and a
    re-emitted stub is byte-identical (the prompt cache survives). Short and
    greppable: ``pg:<position>-<6 hex>``.
    """
    digest = hashlib.blake2b(f"{session}\x00{seq}\x00{hash}".encode(), digest_size=3).hexdigest()
    return f"pg:{seq}-{digest}"


@attrs.frozen(slots=True)
class Page:
    """One scheduled message: identity, size and the facts heat policies read.

    ``step`` is the logical clock when the page was created: the number of
    assistant messages before it in its history.
    """

    id: int
    session: str
    seq: int
    step: int
    kind: str
    role: str
    tokens: int
    chars: int
    hash: str
    call_id: str | None = None
    call_ids: tuple[str, ...] = ()
    tool_name: str | None = None
    path: str | None = None
    stale: bool = False
    labels: tuple[str, ...] = ()
    last_ref: int = 0
    ref_count: int = 0

    @property
    def handle(self) -> str:
        return handle_for(self.session, self.seq, self.hash)

    @property
    def is_tool_output(self) -> bool:
        return self.kind in ("tool", "file")
