"""Recording: which of the caller's messages are new, and storing them as pages.

The caller resends its whole history every call. ``Recorder`` finds where it
stops matching what was recorded (by object identity first; after a reopen,
by the running digest stored with the branch, ``pager.core.digest``; then by
content hash, message by message), forks a branch when it diverged, and
records the rest through the store, inside the facade's transaction. Each
``record`` stores the running digest of the branch with its last page. It returns the index documents of the
new pages; the facade adds them to the index only after the store committed.

Matching a history against the recorded branch (the head branch, as the
mirror holds it, after catching up with any other writer):

- it extends the branch (the recorded rows, then new ones): the new ones are
  recorded;
- it equals the branch: nothing is recorded;
- it is a strict prefix of the branch (a request overtaken by a newer one of
  the same conversation: threads sharing a ``Pager``, concurrent requests
  through the proxy, another writer ahead): nothing is recorded and nothing
  forks; the facade plans this one call on the recorded prefix (``behind``
  says how many recorded rows lie past it);
- it diverges (a message differs from the recorded one at the same place: an
  edited or rewound conversation with new messages): a new branch forks at
  the first difference and the rest is recorded on it; the old branch is kept.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import attrs

from pager.core.aside import aside_page
from pager.core.canonical import canonical_bytes, same_objects
from pager.core.digest import RunningDigest, StoredDigest, WireRun, digest_messages
from pager.core.history import History, hash_message, hash_messages
from pager.core.messages import classify, tool_calls
from pager.core.pages import StatUpdate
from pager.storage.base import Store
from pager.storage.index import IndexDoc
from pager.formats.lazy import first_pending, slots
from pager.storage.indexing import index_doc

__all__ = ["Recorded", "Recorder", "record_aside"]


@attrs.frozen(slots=True)
class Recorded:
    """What one ``Recorder.record`` did: the pages added, their index documents, how far behind the request was."""

    pages: int
    docs: list[IndexDoc]
    behind: int = 0  # recorded rows past the request's history (> 0: a strict prefix, nothing recorded)


def record_aside(
    store: Store, session: str, kind: str, text: str, *, seq: int, step: int, count: Callable[[str], int],
    scope: str = "session", owner: str | None = None, pool: str | None = None,
) -> IndexDoc:
    """Keep a pin, note or handoff: its row for the card (pins and notes) and its page, in one transaction.

    Returns the page's index document; the caller adds it to the index after the commit.
    """
    page = aside_page(kind, text, session=session, seq=seq, step=step, count=count, scope=scope, owner=owner,
                      pool=pool)
    with store.transaction():
        if kind == "note":
            store.add_note(session, text, step)
        elif kind == "pin":
            store.add_pin(session, text)
        (pid,) = store.record_aside(session, seq, [page])
    return index_doc(store.load_pages([pid])[0], {"role": page.role, "content": text}, text)


class Recorder:
    """Record one session's new messages into its history mirror and its store."""

    def __init__(
        self, session: str, history: History, scope: str, owner: str | None = None, pool: str | None = None
    ) -> None:
        self.session = session
        self.history = history
        self.scope = scope
        self.owner = owner
        self.pool = pool
        self._ident: list[Any] = []  # the message object of each recorded row, as the caller passed it
        self._run: RunningDigest | None = None  # the running digest of the rows ``_ident`` holds, when known
        self._digest_tried = False  # the stored digest was checked against a request since the mirror loaded
        self.recalled_pending: set[int] = set()
        self.recall_useful = 0

    def reset(self, history: History) -> None:
        """Follow a mirror rebuilt from the store (after a rolled-back transaction)."""
        self.history = history
        self._ident = []
        self._run = None
        self._digest_tried = False

    def same_prefix(self, messages: Sequence[Any], vouched: int = 0) -> int:
        """Return how many leading messages are the same objects as recorded rows.

        Harnesses append to one list of dicts, so on each call all but the new
        messages are the very objects seen before: the same object stands in
        for re-hashing it. The common case, every recorded row passed again,
        is one list comparison in C (an object compares equal to itself
        without being looked into: a few nanoseconds a message, issue 23); a
        message there that is another object but equal to the recorded one
        (``==``) is the same message too. Otherwise the prefix is the run of
        the very same objects. A message edited in place (its ``content``
        or a tool call's arguments replaced in the same dict) is not
        detected: replace the message to edit it.
        """
        ident = self._ident
        if not ident:
            if vouched:
                return self._vouched(messages, vouched)
            return self._digest_prefix(messages)
        lim = min(len(ident), len(self.history.hash), len(messages))
        if not lim:
            return 0
        if len(ident) == lim and isinstance(messages, list):
            # two lists compare only at equal length, and a slice of ``messages`` touches every message object
            # (a reference count each: a cache miss a message at 50k); the new messages appended to ``ident``
            # for the comparison are the only objects touched, and the comparison reads pointers only
            ident.extend(slots(messages, lim))
            try:
                if ident == messages:
                    return lim
            finally:
                del ident[lim:]
            # the run of the very same objects, found in C (a Python loop was 0.3 ms a call at 1k messages for
            # a client that moves its cache mark: the message it moved it off is a new object every call)
            return same_objects(ident, messages)
        head = messages if len(messages) == lim and isinstance(messages, list) else slots(messages, 0, lim)
        if (ident if len(ident) == lim else ident[:lim]) == head:
            return lim
        return min(lim, same_objects(ident, messages))

    def _digest_prefix(self, messages: Sequence[Any]) -> int:
        """Return how many leading messages the stored running digest vouches for (0: none, or no match).

        Tried once per mirror load, when no row is known by identity (a
        reopen, a mirror rebuilt from the store): the first ``rows`` messages
        are encoded and hashed in one C pass (``digest_messages``) and
        compared with the digest stored with row ``rows - 1``. On a match they
        become the identity rows, exactly as if this ``Recorder`` had seen
        them; on anything else ``record`` matches message by message, as
        without a digest.
        """
        h = self.history
        if self._digest_tried or h.digest is None:
            return 0
        self._digest_tried = True
        rows, text = h.digest
        expected = StoredDigest.parse(text).canonical
        if expected is None or rows > len(messages) or rows > len(h.hash):
            return 0
        run = digest_messages(messages, rows)
        if run is None or run.hexdigest() != expected:
            return 0
        self._ident = slots(messages, 0, rows)
        self._run = run
        return rows

    def _vouched(self, messages: Sequence[Any], rows: int) -> int:
        """Return ``rows`` when the format's stored wire digest vouched for that many leading ``messages``.

        The format matched the digest stored with the branch (``pager.core.digest``) and left the rows
        unconverted (``pager.formats.lazy``); what precedes them in the list (a system prompt the wire
        digest does not cover) is hashed here. They become the identity rows, the list's own slots.
        """
        h = self.history
        if self._digest_tried or rows > len(h.hash) or rows > len(messages):
            return 0
        self._digest_tried = True
        lead = first_pending(messages, rows)
        for i in range(lead):
            if hash_message(messages[i], i)[0] != h.hash[i]:
                return 0
        self._ident = slots(messages, 0, rows)
        return rows

    def _digest(self, messages: Sequence[Any], common: int, raws: "_From") -> RunningDigest | None:
        """Return the running digest of ``messages`` once the rows from ``common`` on are recorded.

        Extends the one kept from the last call (O(new bytes)); when there is
        none for ``common`` rows (a reopen that matched no digest, a fork, a
        reload) it is computed over the prefix first, once (O(history), like a fork).
        """
        run = self._run.copy() if self._run is not None and self._run.rows == common else None
        if run is None and first_pending(messages, common) < common:
            return None  # rows left unconverted (a vouched head): the wire digest stands for them
        if run is None:
            run = digest_messages(messages, common)
            if run is None:
                return None
        for i in range(common, len(messages)):
            run.add(canonical_bytes(messages[i], raws[i]))
        return run

    def vouch(self) -> StoredDigest | None:
        """Return the branch's stored digest while no row is known by identity (a format may vouch with it)."""
        h = self.history
        if self._ident or self._digest_tried or h.digest is None:
            return None
        return StoredDigest.parse(h.digest[1])

    def record(self, store: Store, messages: Sequence[Mapping[str, Any]], known: int = 0,
               wire: WireRun | None = None) -> Recorded:
        """Record what is new in ``messages``; see the module docstring for how it is matched.

        ``wire``: the format's wire digest of the request's items (``Converted.wire``), stored beside
        the canonical one with the last page.
        """
        h = self.history
        # rows before ``known`` are the recorded objects themselves: only the rest is hashed and compared,
        # and the bytes of a message that matches its row are dropped at once (after a reopen every
        # message is hashed; keeping them all would hold a second copy of the history)
        common = known
        limit = min(len(h.hash), len(messages))
        first: tuple[str, bytes] | None = None
        while common < limit:
            first = hash_message(messages[common], common)
            if first[0] != h.hash[common]:
                break
            first = None
            common += 1
        rest = messages[common + (first is not None):]
        new_hashes, new_raws = hash_messages(rest, offset=common + (first is not None))
        if first is not None:
            new_hashes.insert(0, first[0])
            new_raws.insert(0, first[1])
        hashes, raws = _From(new_hashes, common), _From(new_raws, common)
        if common == len(messages) < len(h.hash):
            # behind the branch, not a rewind: forking here would record the newer rows again when the
            # newer request comes back (issue 20). The identity rows are kept for that request too.
            return Recorded(0, [], len(h.hash) - common)
        fork: tuple[int, int] | None = None
        unstaled: list[StatUpdate] = []
        if common < len(h.hash):
            # the caller's history diverged from the recorded one: a new branch
            fork = (h.branch, common)
            stale = h.stale[:common]
            h.truncate(common)
            # a read made stale only by a row the fork cut is fresh again on the new head: say so to the
            # store too, so a reopen loads the flags the mirror holds
            unstaled = [StatUpdate(h.page[r], h.last_ref[r], h.ref_count[r], False)
                        for r in range(common) if stale[r] and not h.stale[r]]
        # rows matched by hash stand for themselves by identity from now on: a message resent as a new object
        # once (Claude Code's cache mark moved off it) is not hashed again on every later call
        del self._ident[known:]
        self._ident.extend(slots(messages, known))
        if common == len(messages) and fork is None:
            return Recorded(0, [])
        classified = classify(messages, common, h.calls)
        for msg in messages[common:]:
            for call in tool_calls(msg):
                h.calls[call.id] = (call.name, call.arguments)
        run = self._digest(messages, common, raws)
        prepared = h.prepare(messages, common, classified, hashes, raws, scope=self.scope, owner=self.owner,
                             pool=self.pool, digest=StoredDigest.of(run, wire).text())
        branch, ids = store.record(self.session, h.branch, fork, common, [p.page for p in prepared])
        h.branch = branch
        self._run = run
        updates = h.append(prepared, ids)
        store.update_stats(unstaled + updates, self.session)
        # a recalled page referred to by the new messages was a useful recall
        self.recall_useful += sum(1 for u in updates if u.page_id in self.recalled_pending)
        self.recalled_pending.clear()
        docs = [
            IndexDoc(
                page_id=pid, session=self.session, step=p.page.step, kind=p.page.kind, text=p.text,
                path=p.page.path, handle=p.page.handle, labels=p.page.labels, scope=p.page.scope,
                owner=p.page.owner or "", pool=p.page.pool,
            )
            for p, pid in zip(prepared, ids)
        ]
        return Recorded(len(prepared), docs)


class _From:
    """A list read from index ``base`` on, by the indexes of the whole history (``History.prepare`` reads it so)."""

    __slots__ = ("items", "base")

    def __init__(self, items: Sequence[Any], base: int) -> None:
        self.items = items
        self.base = base

    def __getitem__(self, i: int) -> Any:
        if i < self.base:
            raise IndexError(i)
        return self.items[i - self.base]
