"""The package's shape: imports flow one way, with no cycle, and the core stays pure."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pager"

# Lower layers may not import higher ones (a module may import its own layer).
LAYERS = [
    {"errors", "core"},
    {"options", "optiondocs", "formats", "storage", "statefiles", "stateio", "report"},
    {"schedulers"},
    {"recording", "session", "sharing", "statedir", "pager", "tools", "testing"},
]


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    modules = {_module(p) for p in PKG.rglob("*.py")}
    for path in PKG.rglob("*.py"):
        name = _module(path)
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in modules and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m == "pager" or n == "pager":
                continue  # the package's lazy __init__ re-exports; it imports nothing at load
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    graph = _imports()
    assert "pager.pager" in graph and "pager.core.plan" in graph
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return None


def test_imports_flow_down_the_layers():
    bad = []
    for mod, deps in _imports().items():
        lm = _layer(mod)
        for d in deps:
            ld = _layer(d)
            if lm is not None and ld is not None and ld > lm:
                bad.append(f"{mod} -> {d}")
    assert not bad, "imports that flow upward: " + ", ".join(sorted(bad))
