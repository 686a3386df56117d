"""Issue 22: no function in pager/ runs over 100 lines (most are well under 60)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "pager"
LIMIT = 100


def test_no_function_in_the_package_runs_over_100_lines() -> None:
    long = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        long += [
            f"{path.relative_to(PKG.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT
        ]
    assert not long, "functions over 100 lines: " + ", ".join(long)
