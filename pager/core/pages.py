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
from typing import Any, Mapping, Sequence

import attrs
import orjson

__all__ = [
    "KINDS",
    "KIND_CODE",
    "TOOL_KINDS",
    "SCOPES",
    "NewPage",
    "PageColumns",
    "PageRecord",
    "StatUpdate",
    "handle_for",
    "hash_bytes",
    "page_record",
]

KINDS = ("system", "user", "assistant", "tool", "file")
# Who may see a page, narrowest first: its owner only, its session, its session and a project
# pool (readers by the pool's ACL), every session of the store.
SCOPES = ("private", "session", "project", "shared")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
# Kinds that are one tool call's output: paired with their call, stubbed when big.
TOOL_KINDS = ("tool", "file")


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


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


@attrs.frozen(slots=True)
class NewPage:
    """A page to record: a classified neutral message and the figures the scheduler keeps.

    ``message`` is the neutral message encoded with ``orjson`` (sorted keys);
    ``hash`` is the digest of its canonical form (``pager.core.canonical``: the same bytes
    unless the message carries cache marks or Responses item ids), by ``hash_bytes``.
    """

    hash: str
    kind: str
    role: str
    step: int
    tokens: int
    stub_tokens: int
    chars: int
    handle: str
    message: bytes
    call_id: str | None = None
    call_ids: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    tool_name: str | None = None
    path: str | None = None
    labels: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    scope: str = "session"
    owner: str | None = None
    pool: str | None = None  # the project pool of a "project" page
    # the page's referable terms (paths, identifiers, errors), kept so a reopen need not re-extract them
    terms: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    # the running digest of the branch up to and including this page (``pager.core.digest``): set on the
    # last page of each ``record``, so a reopen matches the resent history in one pass
    digest: str | None = None


@attrs.frozen(slots=True)
class PageRecord:
    """A stored page, without its message bytes (read those with ``Store.message``)."""

    id: int
    session: str
    hash: str
    kind: str
    role: str
    seq: int
    step: int
    tokens: int
    stub_tokens: int
    chars: int
    call_id: str | None
    call_ids: tuple[str, ...]
    tool_name: str | None
    path: str | None
    stale: bool
    labels: tuple[str, ...]
    last_ref: int
    ref_count: int
    scope: str
    handle: str
    owner: str | None = None
    pool: str | None = None
    terms: tuple[str, ...] | None = None  # None: not stored (a page written before terms were kept)
    created: float | None = None  # when it was stored (epoch seconds); None: stored before pager kept it
    digest: str | None = None  # ``NewPage.digest``; None on most pages, and on pages stored before digests


@attrs.frozen(slots=True)
class PageColumns:
    """The pages of one branch, in branch order, one sequence per field: what a reopen loads.

    Columns, not one ``PageRecord`` per page, so a store can hand a 50k-page
    branch over without building 50k objects (``SQLiteStore.branch_columns``);
    ``of`` turns records into columns for any other store. ``terms`` holds a
    frozenset (or tuple) per page, None for a page stored without its terms.
    """

    id: Sequence[int]
    hash: Sequence[str]
    kind: Sequence[str]
    role: Sequence[str]
    step: Sequence[int]
    tokens: Sequence[int]
    stub_tokens: Sequence[int]
    call_id: Sequence[str | None]
    call_ids: Sequence[tuple[str, ...]]
    tool_name: Sequence[str | None]
    path: Sequence[str | None]
    stale: Sequence[bool]
    labels: Sequence[tuple[str, ...]]
    last_ref: Sequence[int]
    ref_count: Sequence[int]
    handle: Sequence[str]
    terms: Sequence[Any]
    digest: Sequence[str | None]
    # the terms as the store numbers them (``pager.core.termload.TermTable``), when it does: a reopen then
    # indexes them without looking at a word
    term_table: Any = None

    @classmethod
    def of(cls, records: Sequence[PageRecord]) -> "PageColumns":
        """Return the columns of ``records`` (in their order)."""
        return cls(**{f: [getattr(r, f) for r in records] for f in _COLUMN_FIELDS})

    def __len__(self) -> int:
        return len(self.id)


_COLUMN_FIELDS = tuple(a.name for a in attrs.fields(PageColumns) if a.name != "term_table")


@attrs.frozen(slots=True)
class StatUpdate:
    """What later messages changed of a page: its last reference, reference count, staleness."""

    page_id: int
    last_ref: int
    ref_count: int
    stale: bool


def page_record(values: Mapping[str, Any]) -> PageRecord:
    """Build a ``PageRecord`` from a row mapping as stores read it (JSON columns decoded here)."""
    def seq(v: Any) -> tuple[str, ...]:
        if isinstance(v, (bytes, str)):
            return tuple(orjson.loads(v or "[]"))
        return tuple(v or ())

    return PageRecord(
        id=int(values["id"]), session=values["session"], hash=values["hash"], kind=values["kind"],
        role=values["role"], seq=int(values["seq"]), step=int(values["step"]), tokens=int(values["tokens"]),
        stub_tokens=int(values["stub_tokens"]), chars=int(values["chars"]), call_id=values["call_id"],
        call_ids=seq(values["call_ids"]), tool_name=values["tool_name"], path=values["path"],
        stale=bool(values["stale"]), labels=seq(values["labels"]), last_ref=int(values["last_ref"]),
        ref_count=int(values["ref_count"]), scope=values["scope"] or "session", handle=values["handle"],
        owner=values.get("owner"),
        pool=values.get("pool"),
        terms=None if values.get("terms") is None else seq(values["terms"]),
        created=None if values.get("created") is None else float(values["created"]),
        digest=values.get("digest"),
    )
