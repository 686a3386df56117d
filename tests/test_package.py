"""Package-level promises: the public surface, the planner's purity, typing marker."""

import subprocess
import sys
from pathlib import Path

import pager


def test_all_is_sorted_and_complete():
    assert pager.__all__ == sorted(pager.__all__)
    for name in pager.__all__:
        assert hasattr(pager, name)


def test_planner_is_pure():
    code = (
        "import sys, pager.core.plan, pager.core.heat, pager.core.pairing, pager.core.budget, pager.core.handoff\n"
        "bad = [m for m in ('sqlite3', 'tantivy', 'tiktoken') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_py_typed_is_shipped():
    assert (Path(pager.__file__).parent / "py.typed").exists()


def test_errors_inherit_builtins():
    assert issubclass(pager.ConfigError, ValueError)
    assert issubclass(pager.MessageError, pager.InputError)
    assert issubclass(pager.StoreError, OSError)
    assert issubclass(pager.HandleError, KeyError)
    assert issubclass(pager.BudgetError, pager.PagerError)


def test_the_lab_finds_the_sessions_the_package_ships():
    from pager.lab import synth
    from pager.lab.cli import common, replay

    data = (Path(pager.__file__).parent / "data").resolve()
    assert common.DATA_DIR == data
    assert [p.name for p in replay.example_paths()] == sorted(name for name, _, _ in synth.BUNDLED)
    assert all(p.parent == data for p in replay.example_paths())
