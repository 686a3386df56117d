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
    for field in Options.fields():
        assert f"| `{field.name}` |" in table
    assert "| `high_watermark` | `40000` |" in table
    assert "| `recall_pages` | `3` |" in table and "| `recall_page_tokens` | `300` |" in table
    assert "| `notice_percents` | `[25, 50, 75]` |" in table
    # a changed default shows up in the table, so the docs test above would fail
    changed = attrs.evolve(Options(), high_watermark=12_345)
    assert changed.high_watermark == 12_345 and "`12345`" not in table


def test_api_md_lists_the_first_options_then_the_parts_then_the_tuner_only_ones():
    from pager.lab.optiondocs import options_tables

    text = options_tables()
    sections = text.split("### ")[1:]
    titles = [s.splitlines()[0] for s in sections]
    assert titles == ["The options to set first", "Facade options", "Paging options", "Rollover options",
                      "Checkpoint options", "Tuner-only options"]
    rows = {t: [line.split("`")[1] for line in s.splitlines() if line.startswith("| `")] for t, s in zip(titles, sections)}
    assert 8 <= len(rows["The options to set first"]) <= 12  # the ten or so a user needs first
    assert rows["Tuner-only options"] == list(Options.tuner_only())
    assert {"objective", "need_scale", "keep_room", "task_focus"} <= set(Options.tuner_only())
    shown = [n for names in rows.values() for n in names]
    assert sorted(shown) == sorted(Options.names())  # every option once
    for title, part in (("Paging options", "paging"), ("Rollover options", "rollover")):
        assert all(Options.part_of(n) == part for n in rows[title])
