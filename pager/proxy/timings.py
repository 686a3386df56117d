"""Where a proxied model call's time goes: ``pager proxy --timings FILE``, one JSON line per call.

Each line holds the call's format, session, whether it streamed, its status,
the request and upstream body sizes, pager's own ``assemble`` time, and its
phases as milliseconds since the request reached the proxy's handler:

``read``        the body read off the socket
``parse``       the body parsed (``pager.proxy.bodies``)
``session``     its session acquired, the previous call's usage recorded
``worker``      a worker thread started ``assemble`` (the hop off the event loop)
``worked``      the rendered request was handed back in the worker (``worker_cpu_ms``: the CPU time it took)
``assembled``   the event loop has the request (the hop back)
``serialised``  the upstream body encoded
``headers``     the upstream's response headers arrived
``streaming``   (streams) the response to the client started: its body is being relayed
``upstream_first`` (streams) the upstream's first body bytes read
``first``       (streams) the first event relayed to the client
``done``        the answer handed to the server (streams: the last event relayed)
``finished``    the rest of ``assemble`` (COMMIT, checkpoint files, report line) done in the worker, while
                the request was upstream (``finish_cpu_ms``: its CPU time); any order against the marks
                after ``assembled``

and the garbage collector's share of that time: ``gc_ms``, every pause in
any thread while the call was in flight, ``gc_full``, how many of them
were full (generation 2) collections, and ``gc_between_ms``, the collections
run between the previous call's end and this one's start (the idle moment's
of ``pager.proxy.gcpolicy``: a call that came in meanwhile waited for them
before its handler ran). Nothing is recorded without
``--timings``; with it, the cost is a clock read per phase and a line per call.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import IO, Any, Callable

import orjson

__all__ = ["GcClock", "Phases", "TimingLog", "timed", "timed_early"]


class GcClock:
    """The time this process has spent in garbage collection, and its full collections, while installed."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.full = 0
        self.ended_ms = 0.0  # ``ms`` when the last call ended: what collections ran between calls
        self._t = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # collections never overlap (one holds the GIL throughout): one start time is enough
        if phase == "start":
            self._t = time.perf_counter()
            return
        self.ms += (time.perf_counter() - self._t) * 1000.0
        if info.get("generation") == 2:
            self.full += 1

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def remove(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


class Phases:
    """One call's phase marks (see the module docstring)."""

    __slots__ = ("t0", "marks", "gc_ms", "gc_full", "gc_between_ms", "info")

    def __init__(self, clock: GcClock) -> None:
        self.t0 = time.perf_counter()
        self.marks: dict[str, float] = {}
        self.gc_ms = clock.ms
        self.gc_full = clock.full
        self.gc_between_ms = clock.ms - clock.ended_ms
        self.info: dict[str, Any] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = round((time.perf_counter() - self.t0) * 1000.0, 3)


def timed(phases: Phases, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` (in a worker thread), marking ``worker`` and ``worked`` around it."""
    phases.mark("worker")
    cpu = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        phases.mark("worked")
        phases.info["worker_cpu_ms"] = round((time.thread_time() - cpu) * 1000.0, 3)


def timed_early(phases: Phases, fn: Callable[..., Any], *args: Any, ready: Callable[[Any], None],
                **kwargs: Any) -> Any:
    """``timed`` for ``Pager._assemble`` with ``ready``: ``worked`` when the request is handed back, then ``finished``."""
    phases.mark("worker")
    cpu = time.thread_time()

    def handed(out: Any) -> None:
        phases.mark("worked")
        phases.info["worker_cpu_ms"] = round((time.thread_time() - cpu) * 1000.0, 3)
        ready(out)

    at = 0.0
    try:
        out = fn(*args, ready=handed, **kwargs)
        at = time.thread_time()
        return out
    finally:
        phases.mark("finished")
        if "worker_cpu_ms" in phases.info:
            phases.info["finish_cpu_ms"] = round(((at or time.thread_time()) - cpu) * 1000.0
                                                 - phases.info["worker_cpu_ms"], 3)


class TimingLog:
    """The ``--timings`` file: ``begin`` a call's ``Phases``, ``end`` writes its line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.clock = GcClock()
        self._file: IO[bytes] | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        self._file = open(self.path, "ab")
        self.clock.install()

    def close(self) -> None:
        self.clock.remove()
        if self._file is not None:
            self._file.close()
            self._file = None

    def begin(self) -> Phases:
        return Phases(self.clock)

    def end(self, phases: Phases, after: Any = None) -> None:
        """Mark ``done`` and write the call's line, once ``after`` (the call's unfinished ``assemble``) is done."""
        phases.mark("done")
        self.clock.ended_ms = self.clock.ms
        if after is not None:  # a callback even when it is done: after the ones that fill the line in
            after.add_done_callback(lambda _f: self._write(phases))
            return
        self._write(phases)

    def _write(self, phases: Phases) -> None:
        line = {**phases.info, "phases": phases.marks, "gc_ms": round(self.clock.ms - phases.gc_ms, 3),
                "gc_full": self.clock.full - phases.gc_full, "gc_between_ms": round(phases.gc_between_ms, 3)}
        with self._lock:
            if self._file is not None:
                self._file.write(orjson.dumps(line) + b"\n")
                self._file.flush()
