"""Documentation examples run as tests (docs/api.md, docs/cli.md, README.md).

Every ```python block of docs/api.md runs in a fresh namespace with an empty
temporary directory as the working directory. README.md's python blocks run the
same way, except those that need a network client (``OpenAI(``) or are
fragments (a bare ``...`` line). docs/cli.md's python blocks build a store, then
its cheap ``python -m pager`` commands (replay, inspect, reindex, state, tune
--dry-run) run in order through ``pager.cli.main``, each expected to exit 0.
Synopses and option / report tables are checked against the code, so the docs
cannot drift silently.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import attrs
import pytest

import pager
from pager.core import heat
from pager.cli import build_parser, main
from pager.options import Options
from pager.report import Report

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DATA = ROOT / "pager" / "data"
CHEAP = {"replay", "inspect", "reindex", "state"}


def blocks(path: Path, lang: str) -> list[str]:
    """Return the fenced ```lang blocks of ``path`` in order."""
    if not path.exists():
        return []
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def readme_blocks() -> list[str]:
    return [
        b for b in blocks(ROOT / "README.md", "python")
        if "OpenAI(" not in b and not re.search(r"^\s*\.\.\.\s*$", b, re.M)
    ]


def commands(path: Path) -> list[list[str]]:
    """Return the ``python -m pager`` commands of the bash blocks, continuation lines joined."""
    out = []
    for block in blocks(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", "pager"]:
                out.append(words[3:])
    return out


def cheap(argv: list[str]) -> bool:
    return bool(argv) and (argv[0] in CHEAP or (argv[0] == "tune" and "--dry-run" in argv))


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``tmp_path``; a policy an example registers does not outlive the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(heat, "POLICIES", dict(heat.POLICIES))
    return tmp_path


def run_block(code: str, name: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": name})  # noqa: S102 - our own docs


@pytest.mark.parametrize("index", range(len(blocks(DOCS / "api.md", "python"))))
def test_api_example_runs(index: int, isolated: Path) -> None:
    run_block(blocks(DOCS / "api.md", "python")[index], f"docs/api.md[{index}]")


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_example_runs(index: int, isolated: Path) -> None:
    run_block(readme_blocks()[index], f"README.md[{index}]")


def test_cli_examples_run(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated / "pager").mkdir()
    (isolated / "pager" / "data").symlink_to(DATA, target_is_directory=True)
    for i, code in enumerate(blocks(DOCS / "cli.md", "python")):
        run_block(code, f"docs/cli.md[{i}]")
    ran = []
    for argv in commands(DOCS / "cli.md"):
        if not cheap(argv):
            continue
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 0, f"pager {shlex.join(argv)} exited {rc}\n{out}\n{err}"
        ran.append(argv[0])
    assert {"replay", "inspect", "reindex", "state"} <= set(ran)
    assert argv[:2] == ["state", "resume"]  # the last example prints the checkpoint files
    assert "===== 10_invariants.md =====" in out


def _subparsers(parser):  # argparse keeps them on a private action
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


def test_cli_synopses_match_argparse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    subs = _subparsers(build_parser())
    parsers = {name: p for name, p in subs.items()}
    for action, p in _subparsers(subs["state"]).items():
        parsers[f"state {action}"] = p
    for name, parser in parsers.items():
        usage = parser.format_usage().strip()
        assert usage in text, f"docs/cli.md lacks the synopsis of pager {name}:\n{usage}"
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, f"docs/cli.md does not describe {flag} of pager {name}"


def test_api_tables_cover_every_option_and_report_field() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in Options.names():
        assert f"| `{name}` |" in text, f"docs/api.md: option {name} is not in the table"
    for field in attrs.fields(Report):
        assert re.search(rf"^\|[^\n]*`{field.name}`", text, re.M), f"docs/api.md: Report.{field.name} missing"
    for name in pager.__all__:
        if name.endswith("Error"):
            assert name in text, f"docs/api.md: {name} is not in the error tree"
