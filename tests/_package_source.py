"""The package's modules parsed once per test process, for the tests that read its source.

tests/test_architecture.py (the import graph) and tests/test_function_length.py walk the
syntax trees of every module of ``pager/``; parsing the ~140 files costs about a second of
CPU, and the import graph was built again by each of five tests. Both files are one xdist
group (``SOURCE_GROUP``), so that one worker parses once for all of them.

The trees are shared: a test must not modify them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pager"
SOURCE_GROUP = "package-source"


@functools.cache
def trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Return ``(path, syntax tree)`` of every module of ``pager/``, in path order."""
    return tuple((path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
                 for path in sorted(PKG.rglob("*.py")))
