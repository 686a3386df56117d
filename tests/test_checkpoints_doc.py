"""docs/checkpoints.md: the walk-through runs and prints what the page shows."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md"


def test_walk_through_runs_and_prints_what_the_doc_shows(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "checkpoints_doc"})  # noqa: S102 - our docs
    shown = re.search(r"then the whole WAL after the reopen:\n\n```text\n(.*?)```", text, re.S)
    assert shown is not None
    assert capsys.readouterr().out.strip() == shown.group(1).strip()
