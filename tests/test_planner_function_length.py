"""Issue 22: no function in pager/ runs over 100 lines; the planner's modules are held to it here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "pager" / "core"
PLANNER_MODULES = ("plan.py", "heat.py", "budget.py", "l1guard.py", "promotion.py", "fitted.py")
LIMIT = 100


@pytest.mark.parametrize("name", PLANNER_MODULES)
def test_no_planner_function_runs_over_100_lines(name: str) -> None:
    tree = ast.parse((CORE / name).read_text(encoding="utf-8"))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT
    ]
    assert not long, f"{name}: {', '.join(long)}"
