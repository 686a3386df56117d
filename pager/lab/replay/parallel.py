"""Run replay tasks in a process pool: one session per task, results in input order.

Theory of operation. A replay is a list of independent tasks (one session
through every strategy; for ``pager tune``, one session through every
configuration). ``run_tasks`` runs them either in this process (``jobs=1``)
or in a pool of ``jobs`` worker processes, and returns the results in the
order of the tasks, so whatever is computed from them afterwards (sums,
medians, tables) is the same, digit for digit, whatever ``jobs`` is. Only
timings (assemble latency, elapsed seconds) differ between runs.

- Tasks are submitted longest first (their ``weights``), so that on two
  workers a long session does not start last and leave one core idle.
- Workers come from a ``forkserver`` (``spawn`` where there is none), never a
  plain ``fork`` of a process that may hold open stores and threads. The fork
  server is started once per process with the replay code and the token
  counter loaded (``warm``), so a worker starts with them instead of
  importing them (about 1.2 s of CPU per worker per run), at the price of a
  server holding them until this process exits. A worker
  ignores SIGINT: on Ctrl-C the parent stops the pool and raises
  ``KeyboardInterrupt`` itself, after handing every result that finished to
  ``on_result``.
- A worker keeps nothing between tasks (each task builds its own memos), so
  its memory is bounded by one session and its strategies' stores.
- Workers report progress and warnings through one queue (``emit``); the
  parent drains it between results and draws one progress bar for all.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

__all__ = ["Emitter", "LAST_RUN", "default_jobs", "emit", "peak_rss_mib", "run_tasks", "worker_context"]

# Set in each worker by ``_init_worker``; in this process ``run_tasks`` sets it around serial runs.
_QUEUE: Any = None
_LOCAL: Callable[[str, Any], None] | None = None

# What the last ``run_tasks`` saw: processes used and the largest peak memory of one (MiB).
LAST_RUN: dict[str, Any] = {"processes": 0, "peak_mib": None}


def peak_rss_mib() -> float | None:
    """Return this process's peak resident memory in MiB (None where it cannot be read)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Unix
        return None
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024


def _measured(fn: Callable[..., Any], *args: Any) -> Any:
    # the task, then this worker's peak memory so far (a worker holds one task at a time)
    result = fn(*args)
    emit("peak_mib", peak_rss_mib())
    return result


def default_jobs() -> int:
    """Return the number of processors this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def emit(kind: str, payload: Any) -> None:
    """Send an event (``"advance"``, ``"warn"``) to the process that runs the tasks."""
    if _LOCAL is not None:
        _LOCAL(kind, payload)
    elif _QUEUE is not None:
        _QUEUE.put((kind, payload))


class Emitter:
    """Batch ``advance`` events: send at most ten a second (and the rest on ``flush``)."""

    def __init__(self) -> None:
        self.pending = 0
        self.label = ""
        self._sent = time.monotonic()

    def advance(self, n: int = 1, label: str | None = None) -> None:
        """Count ``n`` units done; forward them now and then."""
        self.pending += n
        if label is not None:
            self.label = label
        now = time.monotonic()
        if now - self._sent >= 0.1:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Forward the units counted since the last send."""
        if self.pending:
            emit("advance", (self.pending, self.label))
            self.pending = 0
        self._sent = time.monotonic() if now is None else now


# The variables the warm fork server is started with (_warm_server); a worker gets this process's back.
_SERVER_ENV = ("PYTHONPATH", "PYTHONSAFEPATH")
_WARM = "pager.lab.replay.warm"
_warm_lock = threading.Lock()
_warm_path: tuple[str, ...] | None = None  # the workers' sys.path the warm server was started for


def _init_worker(q: Any, env: dict[str, str | None]) -> None:
    global _QUEUE
    _QUEUE = q
    for name, value in env.items():  # as in this process, not as the fork server was started
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # Ctrl-C reaches the whole process group; the parent decides what to keep
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_context() -> Any:
    """Return the multiprocessing context to start pager workers from.

    The fork server with ``warm`` loaded (pager, the SQLite store, the token counter) where
    it can serve this process's sys.path, else ``spawn``. Anything that starts processes to
    run pager (the replay pool, ``bench/chaos``) takes it, so that a child starts with pager
    loaded instead of paying ~1 s of CPU to import it and load the tokenizer. There is one
    fork server per process: whoever starts it first decides what it preloads.
    """
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods and _warm_server():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


_context = worker_context


def _warm_server() -> bool:
    """Start this process's fork server with ``warm`` imported; return whether to fork from it.

    A worker takes this process's sys.path before it imports anything (``spawn``'s
    preparation data), and so must the server's preloaded imports, or a worker could
    run another checkout's pager. multiprocessing hands the server that path but
    (3.10 to 3.13 at least) does not apply it before the preload, so the server is started
    with it in ``PYTHONPATH`` and with ``PYTHONSAFEPATH``
    (no working directory first). Where that cannot hold (Python 3.10, ``-E`` / ``-I``),
    the server is a plain one, each worker importing for itself as before. If sys.path
    changes after the server started, the workers of later runs are spawned afresh.
    """
    global _warm_path
    from multiprocessing import forkserver, spawn

    path = tuple(spawn.get_preparation_data("pager-replay")["sys_path"])
    with _warm_lock:
        if _warm_path is not None:
            return _warm_path == path
        _warm_path = path
        if sys.version_info < (3, 11) or sys.flags.ignore_environment:
            return True
        saved_env = {name: os.environ.get(name) for name in _SERVER_ENV}
        saved_preload = list(getattr(forkserver._forkserver, "_preload_modules", None) or [])
        try:
            os.environ["PYTHONPATH"] = os.pathsep.join(path)
            os.environ["PYTHONSAFEPATH"] = "1"
            forkserver.set_forkserver_preload([_WARM])
            forkserver.ensure_running()  # a server already running (started elsewhere) stays as it is
        finally:
            forkserver.set_forkserver_preload(saved_preload)  # a server restarted later is a plain one
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        return True


def run_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[tuple[Any, ...]],
    *,
    jobs: int = 1,
    weights: Sequence[float] | None = None,
    on_event: Callable[[str, Any], None] | None = None,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """Return ``[fn(*task) for task in tasks]``, computed in ``jobs`` processes.

    ``fn`` must be a module-level function and the tasks picklable when
    ``jobs > 1``. ``on_event(kind, payload)`` receives what ``emit`` sent;
    ``on_result(i, result)`` is called as each task finishes (in completion
    order). An exception in a task propagates after the pool is stopped.
    """
    global _LOCAL
    user_handler = on_event or (lambda kind, payload: None)
    LAST_RUN.update(processes=1, peak_mib=None)

    def handler(kind: str, payload: Any) -> None:
        if kind == "peak_mib":
            if payload is not None:
                LAST_RUN["peak_mib"] = max(LAST_RUN["peak_mib"] or 0.0, payload)
        else:
            user_handler(kind, payload)

    results: list[Any] = [None] * len(tasks)
    order = sorted(range(len(tasks)), key=lambda i: -(weights[i] if weights else 0.0))
    if jobs <= 1 or len(tasks) <= 1:
        previous, _LOCAL = _LOCAL, handler
        try:
            for i in range(len(tasks)):
                results[i] = fn(*tasks[i])
                if on_result is not None:
                    on_result(i, results[i])
        finally:
            _LOCAL = previous
        LAST_RUN["peak_mib"] = peak_rss_mib()
        return results

    ctx = _context()
    q = ctx.Queue()

    def drain() -> None:
        while True:
            try:
                kind, payload = q.get_nowait()
            except queue_mod.Empty:
                return
            handler(kind, payload)

    workers = min(jobs, len(tasks))
    LAST_RUN["processes"] = workers
    env = {name: os.environ.get(name) for name in _SERVER_ENV}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                               initializer=_init_worker, initargs=(q, env))
    index: dict[Future[Any], int] = {}
    clean = False
    try:
        for i in order:
            index[pool.submit(_measured, fn, *tasks[i])] = i
        pending = set(index)
        while pending:
            done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            drain()
            for f in sorted(done, key=lambda f: index[f]):
                results[index[f]] = f.result()
                if on_result is not None:
                    on_result(index[f], results[index[f]])
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)  # a worker flushes its queue before it exits
            drain()
        else:
            _stop(pool)
        q.close()
    return results


def _stop(pool: ProcessPoolExecutor) -> None:
    # an interrupted or failed run: drop what was queued and end the running workers now,
    # rather than letting each finish its session
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
