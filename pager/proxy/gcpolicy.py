"""The proxy process's garbage collection: a full collection examines only what is new since the last one.

Theory of operation
-------------------
CPython's full (generation 2) collection walks every tracked object of the
process. In a proxy that holds long sessions that is the imports, each
session's history columns, memos and parsed request items: measured in
``bench/proxy_overhead.py`` (issue 23), 45-100 ms of CPU per full collection,
run on whichever request's thread allocated at that moment, and the largest
part of that run's p99. Yet almost everything a full collection walks is the
same long-lived state it walked last time, and found alive.

So, in a process that ``install``s this policy (``pager proxy`` does;
``create_app`` alone, embedded in someone else's process, does not):

- once the server has started (imports, tokenizer, store, index opened)
  the heap is collected and frozen (``gc.freeze``): the permanent generation,
  which no collection walks;
- after every full collection, what survived it is frozen too: everything in
  the heap just proved reachable, so nothing unreachable is frozen, and the
  next full collection walks only what was allocated since;
- objects still die as usual by reference counting, frozen or not; what a
  frozen object can no longer be is part of *cyclic* garbage found by the
  collector. So when the heap has grown by half since the last collection
  that walked everything, the next full collection walks everything again
  (``gc.unfreeze`` first): cycles that died among frozen objects (a closed
  session's, say) are freed then. The memory such cycles can hold is
  bounded by half the live heap, and that collection costs what every full
  collection cost before.

The heap is measured by ``heap_size``, the memory blocks Python's allocator
holds, which it adds up per 4 KiB pool. Counting the frozen objects instead
(``gc.get_freeze_count``) walks their list, one pointer chase an object
scattered over the heap: 11 ms at 143,000 frozen objects in the proxy of
``bench/proxy_overhead.py``, twice in every full collection (before it, to
decide whether it walks everything, and after, to count anew), which made
each full collection of a few thousand new objects a 20-30 ms pause.

A server can say when it is idle (``defer_sweeps``; ``pager proxy``'s app
does): then a collection that would walk everything does not, and the sweep
waits for ``sweep_if_due``, which the proxy calls once no model call is in
flight (an agent's think time), so that no request waits for it (measured in
``bench/proxy_overhead.py``: 143-242 ms of pause on a loaded machine, once
per run, in one request). A process that is never idle still sweeps, inside a
collection, once the heap has grown by ``regrow`` twice over.

An idle moment also runs the next full collection early, once half the
middle-generation collections that let Python start one have happened
(``IDLE_FULL_AFTER``, ``gc.get_count()[2]``): what a full collection walks
is what was promoted since the last one, and with the idle moments an
agent's think time gives, that walk no longer lands in a request. It
mattered most after a burst of new sessions: the first full collection
after six 1,000-message histories were recorded walked them all (16-35 ms,
measured in ``bench/proxy_overhead.py``, once a run, in a request, in each
of five runs; none in a request with the idle collection, three runs).

The young generations keep Python's thresholds (700, 10): collecting every
10 000 allocations instead took the same CPU in all (about 1 ms a request) in
pauses seven times longer (a young collection up to 15 ms, a middle one
41 ms, against 2 and 6), which is what a p99 feels.

The collector's thresholds are process state: ``uninstall`` puts back what
was there (and leaves frozen what is frozen).
"""

from __future__ import annotations

import gc
import sys
from typing import Any

__all__ = ["GcPolicy", "after_startup", "defer_sweeps", "heap_size", "install", "installed", "sweep_if_due",
           "uninstall"]

REGROW = 0.5  # the heap may grow by this fraction before a full collection walks everything again
# an idle moment runs the full collection once this many middle-generation collections happened since the
# last one (Python starts one after its third threshold, 10, of them: a full collection on some request's path)
IDLE_FULL_AFTER = 5


def heap_size() -> int:
    """Return the size of the heap the policy watches: the memory blocks the process holds (see the module docstring).

    Python's small-object allocator adds up a count per 4 KiB pool, so this
    costs ~0.2 ms at a million blocks, whatever the objects are.
    """
    return sys.getallocatedblocks()


class GcPolicy:
    """See the module docstring. ``sweeps``: full collections that walked everything (unfrozen first)."""

    def __init__(self, threshold0: int | None = None, regrow: float = REGROW,
                 idle_full_after: int = IDLE_FULL_AFTER) -> None:
        self.threshold0 = threshold0
        self.regrow = regrow
        self.idle_full_after = idle_full_after
        self.idle_fulls = 0  # full collections run early, at an idle moment (sweep_if_due)
        self.examined = 0  # ``heap_size()`` right after the last collection that walked everything
        self.sweeps = 0
        self.fulls = 0
        self.deferring = False  # a due sweep waits for sweep_if_due (defer_sweeps)
        self.due = False  # the heap has grown by regrow: the next sweep_if_due walks everything
        self._sweeping = False
        self._saved: tuple[int, int, int] | None = None

    def install(self) -> None:
        self._saved = gc.get_threshold()
        t0, t1, t2 = self._saved
        gc.set_threshold(self.threshold0 or t0, t1, t2)  # None: Python's (see the module docstring)
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
        # what is frozen stays so: it may be someone else's too (a test run freezes its imports), and
        # frozen objects still die by reference count

    def after_startup(self) -> None:
        """Collect and freeze what the server holds once it has started."""
        gc.collect()  # walks everything; the callback freezes what survived
        self.examined = heap_size()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            size = heap_size()
            if size > self.examined * (1.0 + self.regrow) and not self._sweeping:
                self.due = True
                if not self.deferring or size > self.examined * (1.0 + 2.0 * self.regrow):
                    gc.unfreeze()  # this collection walks everything, frozen or not
                    self._sweeping = True
            return
        self.fulls += 1
        gc.freeze()  # every object left was just found reachable
        if self._sweeping:
            self._sweeping = self.due = False
            self.sweeps += 1
            self.examined = heap_size()
        elif heap_size() > self.examined * (1.0 + self.regrow):
            # due from now: the next idle moment sweeps, before the next full collection finds it grown
            # further (in one jump past twice, say) and sweeps inside whatever request it lands in
            self.due = True

    def defer_sweeps(self) -> None:
        """Let a due sweep wait for ``sweep_if_due`` (see the module docstring)."""
        self.deferring = True

    def sweep_if_due(self) -> bool:
        """Use a moment when nothing waits on this process; return whether it walked everything (a sweep).

        A due sweep walks everything; otherwise, once ``idle_full_after``
        middle-generation collections happened since the last full one, the
        next full collection runs now (it walks what is new since: see the
        module docstring) instead of on some request's path.
        """
        if not self.due:
            if self.deferring and gc.get_count()[2] >= self.idle_full_after:
                self.idle_fulls += 1
                gc.collect()  # not unfrozen: the callback freezes what survived
            return False
        gc.unfreeze()
        self._sweeping = True
        gc.collect()  # the callback freezes what survived and counts anew
        return True


_policy: GcPolicy | None = None


def install(policy: GcPolicy | None = None) -> GcPolicy:
    """Install ``policy`` (a default one when None) for this process; return it."""
    global _policy
    if _policy is not None:
        _policy.uninstall()
    _policy = policy or GcPolicy()
    _policy.install()
    return _policy


def installed() -> GcPolicy | None:
    """Return the installed policy, if any."""
    return _policy


def uninstall() -> None:
    """Put the collector's thresholds and callbacks back as they were."""
    global _policy
    if _policy is not None:
        _policy.uninstall()
        _policy = None


def after_startup() -> None:
    """Freeze the started server's heap when a policy is installed (the proxy's lifespan calls this)."""
    if _policy is not None:
        _policy.after_startup()


def defer_sweeps() -> None:
    """Let the installed policy's sweeps wait for ``sweep_if_due`` (the proxy's lifespan calls this)."""
    if _policy is not None:
        _policy.defer_sweeps()


def sweep_if_due() -> bool:
    """Run the installed policy's due sweep now; return whether one ran (the proxy calls this when idle)."""
    return _policy.sweep_if_due() if _policy is not None else False
