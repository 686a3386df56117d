"""Compile the checkout's modules once, before pytest-xdist starts its workers.

On a fresh clone no module has bytecode yet, and every worker compiles every one
it imports, at the same moment as the others: pytest's assertion rewriting of the
test modules (~5 s of CPU a worker) and Python's own compilation of the helpers,
``bench/`` and, when ``pager`` is imported from the checkout, the package. Under
``PYTHONDONTWRITEBYTECODE`` (set in many containers) the subprocesses the tests
start compiled their imports from source at every start as well. Measured on a
clean clone (2 cores, three workers): 122.9 s and 232 s of CPU, against 109.4 s and
207 s for the same tree with its bytecode in place.

``precompile`` writes that bytecode first, on every core: the test modules
rewritten exactly as pytest rewrites them (``_pytest.assertion.rewrite``, written
where pytest reads it), every other module as ``import`` would write it (a
timestamp ``.pyc`` in ``__pycache__``). What is already fresh is left alone, so a
tree compiled before costs one stat and one header read per file. Nothing here can
fail a run: a file that cannot be compiled (or a pytest whose internals moved) is
left to the workers, as before.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import struct
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable

__all__ = ["precompile", "stale"]

_SKIP_DIRS = {"__pycache__", ".git", ".hypothesis", ".pytest_cache", "data"}


def _sources(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                yield Path(folder) / name


def _is_test(path: Path, patterns: Iterable[str]) -> bool:
    return path.name == "conftest.py" or any(fnmatch.fnmatch(path.name, p) for p in patterns)


def _plain_fresh(src: Path) -> bool:
    """Return whether ``src`` has a timestamp ``.pyc`` that ``import`` would take."""
    try:
        st = src.stat()
        with open(importlib.util.cache_from_source(str(src)), "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", head[4:16])
    return flags == 0 and mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)


def _rewritten_pyc(src: Path) -> Path:
    from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir

    return get_cache_dir(src) / (src.name[:-3] + PYC_TAIL)


def _rewritten_fresh(src: Path) -> bool:
    from _pytest.assertion.rewrite import _read_pyc

    return _read_pyc(src, _rewritten_pyc(src)) is not None


def stale(roots: Iterable[Path], test_patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """Return the (test modules, other modules) under ``roots`` whose bytecode is missing or out of date."""
    tests: list[str] = []
    plain: list[str] = []
    patterns = list(test_patterns)
    for root in roots:
        for src in _sources(root):
            if _is_test(src, patterns) and root.name == "tests":
                if not _rewritten_fresh(src):
                    tests.append(str(src))
            elif not _plain_fresh(src):
                plain.append(str(src))
    return tests, plain


class _Quiet:
    """The ``AssertionState`` ``_write_pyc`` takes: only its ``trace`` is used."""

    @staticmethod
    def trace(*_args: object) -> None:
        pass


def _compile(job: tuple[str, bool]) -> bool:
    """Compile one file (in a pool process); return whether its bytecode was written."""
    path, rewrite = job
    sys.dont_write_bytecode = False
    try:
        if rewrite:
            from _pytest.assertion.rewrite import _rewrite_test, _write_pyc, try_makedirs

            src = Path(path)
            pyc = _rewritten_pyc(src)
            if not try_makedirs(pyc.parent):
                return False
            # config None: the rewrite pytest does when enable_assertion_pass_hook is off (the caller checks)
            stat, code = _rewrite_test(src, None)  # type: ignore[arg-type]
            return bool(_write_pyc(_Quiet(), code, stat, pyc))  # type: ignore[arg-type]
        import py_compile

        py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        return True
    except Exception:  # noqa: BLE001 - the workers compile it as before
        return False


def precompile(roots: Iterable[Path], test_patterns: Iterable[str], jobs: int) -> tuple[int, int]:
    """Write the missing bytecode under ``roots`` in ``jobs`` processes; return (stale files, written)."""
    tests, plain = stale(roots, test_patterns)
    work = [(p, True) for p in tests] + [(p, False) for p in plain]
    if not work:
        return 0, 0
    import multiprocessing

    # spawn: the controller may hold threads (and pytest's capture) a fork would copy
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work))),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        written = sum(pool.map(_compile, work, chunksize=4))
    return len(work), written
