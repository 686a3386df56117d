"""tests/precompile.py: the bytecode the controller writes is what pytest and ``import`` would write."""

from __future__ import annotations

import importlib.util
import marshal
from pathlib import Path

from _pytest.assertion.rewrite import _read_pyc

from precompile import _rewritten_pyc, precompile, stale

PATTERNS = ["test_*.py", "*_test.py"]


def _tree(root: Path) -> dict[str, Path]:
    tests = root / "tests"
    (tests / "sub").mkdir(parents=True)
    files = {
        "test": tests / "test_thing.py",
        "conftest": tests / "conftest.py",
        "helper": tests / "helper.py",
        "nested": tests / "sub" / "test_nested.py",
        "broken": tests / "test_broken.py",
        "bench": root / "bench" / "tool.py",
    }
    files["bench"].parent.mkdir()
    files["test"].write_text("def test_it():\n    x = 1\n    assert x == 2\n")
    files["conftest"].write_text("import os\n")
    files["helper"].write_text("def helper():\n    assert 1 == 2\n")
    files["nested"].write_text("def test_nested():\n    assert [1] == [2]\n")
    files["broken"].write_text("def test_broken(:\n")
    files["bench"].write_text("VALUE = 3\n")
    return files


def test_every_module_gets_the_bytecode_its_loader_reads(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    roots = [tmp_path / "tests", tmp_path / "bench"]
    tests, plain = stale(roots, PATTERNS)
    assert sorted(map(Path, tests)) == sorted([files["test"], files["conftest"], files["nested"], files["broken"]])
    assert sorted(map(Path, plain)) == sorted([files["helper"], files["bench"]])

    total, written = precompile(roots, PATTERNS, 2)
    assert (total, written) == (6, 5)  # the file that does not compile is left to the workers
    assert stale(roots, PATTERNS) == ([str(files["broken"])], [])
    assert precompile(roots, PATTERNS, 2) == (1, 0)  # nothing fresh is compiled again

    # the test modules: what pytest's loader reads back, with its assertion rewriting in it
    code = _read_pyc(files["test"], _rewritten_pyc(files["test"]))
    assert code is not None and "@py_assert" in " ".join(c for c in _names(code))
    # the others: what ``import`` reads back, unrewritten
    with open(importlib.util.cache_from_source(str(files["helper"])), "rb") as f:
        data = f.read()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert "@py_assert" not in " ".join(_names(marshal.loads(data[16:])))


def test_a_changed_module_is_stale_again(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    roots = [tmp_path / "tests", tmp_path / "bench"]
    precompile(roots, PATTERNS, 1)
    # another size, as an edit made within the same second as the compile would have
    files["helper"].write_text("def helper():\n    return 42  # longer than before\n")
    files["test"].write_text("def test_it():\n    assert 2 == 2  # and this one too\n")
    tests, plain = stale(roots, PATTERNS)
    assert sorted(tests) == sorted([str(files["broken"]), str(files["test"])]) and plain == [str(files["helper"])]


def _names(code: object) -> list[str]:
    """Every name a code object and the code objects inside it use."""
    out = list(code.co_names) + list(code.co_varnames)  # type: ignore[attr-defined]
    for const in code.co_consts:  # type: ignore[attr-defined]
        if hasattr(const, "co_names"):
            out += _names(const)
    return out
