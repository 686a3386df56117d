"""Issue 22: no function in pager/ runs over 100 lines (most are well under 60)."""

from __future__ import annotations

import ast

import pytest

from _package_source import PKG, SOURCE_GROUP, trees

pytestmark = pytest.mark.xdist_group(SOURCE_GROUP)  # shares tests/test_architecture.py's parse
LIMIT = 100


def test_no_function_in_the_package_runs_over_100_lines() -> None:
    long = []
    for path, tree in trees():
        long += [
            f"{path.relative_to(PKG.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT
        ]
    assert not long, "functions over 100 lines: " + ", ".join(long)
