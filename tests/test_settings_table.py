"""The settings tables in docs/api.md and docs/tuning.md are generated from ``Options``: they cannot drift."""

from __future__ import annotations

from pathlib import Path

import attrs

from pager.lab.optiondocs import OPTION_DOCS, TUNING_KNOBS, docs_tables, settings_table, table_in
from pager.options import Options

ROOT = Path(__file__).resolve().parents[1]


def test_every_option_is_documented_once():
    assert list(OPTION_DOCS) == list(Options.names())
    assert set(TUNING_KNOBS) <= set(Options.names())


def test_docs_hold_the_generated_tables():
    for path, table in docs_tables(ROOT).items():
        shown = table_in(path.read_text(encoding="utf-8"))
        assert shown is not None, f"{path.name}: no generated settings table"
        assert shown == table, f"{path.name}: settings table drifted; run python -m pager.lab.optiondocs --write"


def test_the_table_shows_the_shipped_defaults():
    table = settings_table()
    for field in attrs.fields(Options):
        assert f"| `{field.name}` |" in table
    assert "| `high_watermark` | `40000` |" in table
    assert "| `recall_pages` | `3` |" in table and "| `recall_page_tokens` | `300` |" in table
    assert "| `notice_percents` | `[25, 50, 75]` |" in table
    # a changed default shows up in the table, so the docs test above would fail
    changed = attrs.evolve(Options(), high_watermark=12_345)
    assert changed.high_watermark == 12_345 and "`12345`" not in table
