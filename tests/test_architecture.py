"""The package's shape: every module in a layer, imports flowing one way with no cycle, the lab apart.

The layers, bottom to top (a module may import its own layer and those below):

0. foundation: ``errors`` and the pure ``core``;
1. values and seams: options, pricing, the wire formats, the stores and indexes, state files, the report;
2. the schedulers;
3. the facade and what it is made of (recording, session, sharing, state dir, tools, ``testing``);
4. integrations: ``aio``, the framework adapters, the MCP server, the proxy, the viewer; and the
   package root, whose lazy re-exports reach ``aio``;
5. the lab: replay, tune, fit and their commands (``pager.lab``), tooling over the library;
6. the commands: ``pager.cli`` and ``python -m pager``.

Nothing outside ``pager.lab`` imports it; ``pager.cli`` names the lab's commands by module string
(``SUBCOMMANDS``) and imports them when it builds its parser.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from _package_source import PKG, SOURCE_GROUP, trees

pytestmark = pytest.mark.xdist_group(SOURCE_GROUP)  # one parse of the package for this file and
# tests/test_function_length.py (tests/_package_source.py)

# (name, top-level names of pager/ in it); "" is the package root (pager/__init__.py)
LAYERS = [
    ("foundation", {"errors", "core"}),
    ("values and seams", {"options", "pricing", "formats", "storage", "statecard", "statefiles", "stateio", "statewal",
                          "report"}),
    ("schedulers", {"schedulers"}),
    ("facade", {"intake", "recording", "session", "sharing", "statedir", "pager", "tools", "testing"}),
    ("integrations", {"aio", "adapters", "mcp_server", "proxy", "ui", ""}),
    ("lab", {"lab"}),
    ("commands", {"cli", "__main__"}),
]
LAB = "pager.lab"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Return the import graph (module -> the package modules it imports); a copy, free to change."""
    return {name: set(deps) for name, deps in _graph().items()}


@functools.cache  # built once per process: five tests read it
def _graph() -> dict[str, frozenset[str]]:
    graph: dict[str, frozenset[str]] = {}
    modules = {_module(p) for p, _ in trees()}
    for path, tree in trees():
        name = _module(path)
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                # `from pager import tools` imports the submodule, not the package's re-exports; but
                # from inside that package it is the package again (`from pager.proxy import x` in
                # pager/proxy/app.py: the package's __init__ imports app)
                inside = name.startswith(base + ".") and base != "pager"
                targets = subs if all(s in modules for s in subs) and not inside else [base, *subs]
            for t in targets:
                if t in modules and t != name:
                    deps.add(t)
        graph[name] = frozenset(deps)
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
    for i, (_, names) in enumerate(LAYERS):
        if top in names:
            return i
    return None


def test_every_module_is_in_a_layer():
    graph = _imports()
    assert "pager.lab.replay.runner" in graph and "pager.__main__" in graph
    lost = sorted(m for m in graph if _layer(m) is None)
    assert not lost, "modules in no layer (add them to LAYERS): " + ", ".join(lost)


def test_the_layer_check_sees_a_new_top_level_module():
    assert _layer("pager.newthing") is None and _layer("pager.newpkg.mod") is None
    assert _layer("pager") == _layer("pager.ui.app") and _layer("pager.lab.cli.bench") == _layer("pager.lab")


def test_imports_flow_down_the_layers():
    bad = []
    for mod, deps in _imports().items():
        lm = _layer(mod)
        for d in deps:
            ld = _layer(d)
            if lm is not None and ld is not None and ld > lm:
                bad.append(f"{mod} -> {d}")
    assert not bad, "imports that flow upward: " + ", ".join(sorted(bad))


def _in_lab(module: str) -> bool:
    return module == LAB or module.startswith(LAB + ".")


def test_nothing_outside_the_lab_imports_it():
    bad = sorted(f"{mod} -> {d}" for mod, deps in _imports().items() if not _in_lab(mod)
                 for d in deps if _in_lab(d))
    assert not bad, "the library imports the lab: " + ", ".join(bad)


def test_the_command_table_names_every_command_module():
    import argparse

    from pager.cli import SUBCOMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(SUBCOMMANDS)  # each module registers the command it is named for
    modules = set(_imports())
    for name, module in SUBCOMMANDS.items():
        assert module in modules, f"pager {name}: no module {module}"
        assert _in_lab(module) == (name in ("replay", "bench", "tune")), (name, module)
    # every command module of either package is in the table
    found = {m for m in modules if m.startswith("pager.cli.") or m.startswith("pager.lab.cli.")}
    assert found - {"pager.lab.cli.common"} == set(SUBCOMMANDS.values())


def test_the_library_loads_without_the_lab():
    code = (
        "import sys, pager, pager.pager, pager.cli, pager.ui.data, pager.ui.charts, pager.tools\n"
        "bad = sorted(m for m in sys.modules if m == 'pager.lab' or m.startswith('pager.lab.'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
