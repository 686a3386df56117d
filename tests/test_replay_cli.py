"""``pager bench`` end to end: tables, JSON, HTML, variants, default paths."""

from __future__ import annotations

import argparse
import io
import re

import orjson
import pytest

from pager.lab.cli import bench, common
from pager.errors import ConfigError

from _replay_helpers import TINY, write_session


# Tests that read the tables and files replay in this process; the process pool (the default,
# --jobs = the machine's cores) is test_bundled_sessions_run's here, and tests/test_bench_jobs.py's.
IN_PROCESS = ("--jobs", "1")


def parse(argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    bench.register(sub)
    return parser.parse_args(["bench", *argv])


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    result = bench.run_bench(parse(argv), out, err)
    return result, out.getvalue(), err.getvalue()


@pytest.fixture
def sessions(tmp_path):
    write_session(tmp_path / "one.jsonl", TINY, sid="one <b>&amp;")
    write_session(tmp_path / "two.jsonl", TINY * 2, sid="two")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "orig.jsonl").write_text("garbage\n")
    (tmp_path / "other.jsonl").write_text('{"event": 1}\n')
    return tmp_path


def test_bench_prints_table_and_writes_json_and_html(sessions, tmp_path):
    j, h = tmp_path / "r.json", tmp_path / "r.html"
    result, out, err = run_cli([str(sessions), "--min-assistant", "1", "--no-pager",
                                "--no-progress", "--json", str(j), "--html", str(h),
                                "--per-session", *IN_PROCESS])
    assert result is not None and len(result.runs) == 2
    for name in ("full", "window-32k", "mask-10", "clear-100k"):
        assert re.search(rf"^{name}\s", out, re.M)
    assert "1 files skipped" in err
    data = orjson.loads(j.read_bytes())
    assert {s["strategy"] for s in data["summary"]} == {"full", "window-32k", "mask-10", "clear-100k"}
    assert data["skipped"][0]["path"].endswith("other.jsonl")
    page = h.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 4
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    assert "one &lt;b&gt;&amp;amp;" in page and "one <b>" not in page


def test_min_assistant_filters_sessions(sessions):
    result, _, err = run_cli([str(sessions), "--min-assistant", "4", "--no-pager", "--no-progress"])
    assert [r.id for r in result.runs] == ["two"]
    assert "1 with fewer than 4 assistant messages left out" in err
    none, _, err = run_cli([str(sessions), "--min-assistant", "100", "--no-pager", "--no-progress"])
    assert none is None and "nothing to replay" in err


def test_baseline_settings_from_flags(sessions):
    result, out, _ = run_cli([str(sessions), "--min-assistant", "1", "--no-pager", "--no-progress",
                              "--window", "8000", "--mask-keep", "3", "--clear-trigger", "5000",
                              "--clear-keep", "1", "--pricing", "openai", "--cache-discount", "0.9",
                              *IN_PROCESS])
    assert result.strategies == ("full", "window-8k", "mask-3", "clear-5k")
    assert result.pricing.read == pytest.approx(0.1)
    assert "pricing openai" in out


def test_pager_variants_from_flags_and_files(tmp_path):
    cfg = tmp_path / "fast.json"
    cfg.write_text('[{"name": "p-a", "old_share": 0.3}, {"policy": "lru"}]')
    args = parse(["--pager", "name=p-b,recall_pages=3,mode=rollover", "--pager", "recent_units=1",
                  "--pager-config", str(cfg), "--context-window", "100000"])
    strategies = bench.build_strategies(args, None)
    pagers = {s.name: s.options for s in strategies[4:]}
    assert pagers == {
        "pager": {"context_window": 100_000},
        "p-a": {"context_window": 100_000, "old_share": 0.3},
        "pager:fast-2": {"context_window": 100_000, "policy": "lru"},
        "p-b": {"context_window": 100_000, "recall_pages": 3, "mode": "rollover"},
        "pager[recent_units=1]": {"context_window": 100_000, "recent_units": 1},
    }


@pytest.mark.parametrize("spec", ["novalue", "=1", ""])
def test_bad_variant_spec(spec):
    with pytest.raises(ConfigError):
        bench.parse_variant(spec)


def test_bad_variant_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    with pytest.raises(ConfigError, match="JSON object"):
        bench.load_variants(str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        bench.load_variants(str(tmp_path / "missing.json"))


def test_default_paths_fall_back_to_bundled_sessions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "DATA_DIR", tmp_path / "a" / "b" / "data")
    assert common.default_paths() == [tmp_path / "a" / "b" / "data"]
    (tmp_path.parent / "shared" / "traces").mkdir(parents=True, exist_ok=True)
    try:
        assert common.default_paths() == [(tmp_path.parent / "shared" / "traces").resolve()]
    finally:
        (tmp_path.parent / "shared" / "traces").rmdir()
        (tmp_path.parent / "shared").rmdir()


def test_bundled_sessions_run(monkeypatch):
    monkeypatch.setattr(common, "default_paths", lambda: [common.DATA_DIR])
    result, out, _ = run_cli(["--no-pager", "--no-progress"])
    assert len(result.runs) == 3
    assert all(s.violations == 0 for s in result.summary)


@pytest.mark.traces
def test_traces_baselines_are_sound(traces_dir):
    files = [traces_dir / "swe-agent" / "ctf__crypto__katy.jsonl",
             traces_dir / "mini-swe-agent" / "deepseek_chat_dev__marshmallow-code__marshmallow-1343.jsonl"]
    result, out, _ = run_cli([*map(str, files), "--no-pager", "--no-progress", *IN_PROCESS])
    summary = {s.strategy: s for s in result.summary}
    assert len(result.runs) == 2
    assert summary["full"].coverage == 1.0 and summary["full"].cost_vs_full == 1.0
    assert all(s.violations == 0 for s in result.summary)
    assert summary["window-32k"].max_prompt <= 32_000
    assert summary["clear-100k"].coverage <= 1.0
