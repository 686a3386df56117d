"""``pager tune``: grids, the Pareto frontier, the choice, the command line end to end."""

from __future__ import annotations

import argparse
import io

import orjson
import pytest

import pager
from pager.lab import tune
from pager.cli import build_parser
from pager.lab.cli import tune as tune_cli
from pager.errors import ConfigError
from pager.options import Options, load_config
from pager.lab.synth import write_session

# --------------------------------------------------------------------------
# Grids


def test_parse_grid_spec_numbers_words_and_objects():
    assert tune.parse_grid_spec("high_watermark=12000,16000") == ("high_watermark", [12000, 16000])
    assert tune.parse_grid_spec("policy=decay, reference") == ("policy", ["decay", "reference"])
    assert tune.parse_grid_spec("policy_params.half_life=8,16.5") == (
        "policy_params.half_life", [8, 16.5])
    key, values = tune.parse_grid_spec('policy_params={"half_life": 8, "ref_weight": 1},{}')
    assert key == "policy_params" and values == [{"half_life": 8, "ref_weight": 1}, {}]
    assert tune.parse_grid_spec("recall_min_score=0.5") == ("recall_min_score", [0.5])


@pytest.mark.parametrize("spec", ["high_watermark", "=1,2", "nonsense=1", "high_watermark=",
                                  "policy_params.=3"])
def test_parse_grid_spec_rejects_malformed(spec):
    with pytest.raises(ConfigError):
        tune.parse_grid_spec(spec)


def test_load_grid_file(tmp_path):
    f = tmp_path / "g.json"
    f.write_text('{"low_watermark": [4000, 8000], "policy": "decay"}')
    assert tune.load_grid_file(f) == {"low_watermark": [4000, 8000], "policy": ["decay"]}
    for bad in ('[1]', '{}', '{"bogus": [1]}', '{"low_watermark": []}', "not json"):
        f.write_text(bad)
        with pytest.raises(ConfigError):
            tune.load_grid_file(f)
    with pytest.raises(ConfigError, match="cannot read"):
        tune.load_grid_file(tmp_path / "missing.json")


def test_expand_grid_is_the_product_first_key_slowest():
    combos = tune.expand_grid({"a": [1, 2], "b": ["x", "y", "z"]})
    assert combos == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"},
                      {"a": 2, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": "z"}]
    assert tune.expand_grid({}) == [{}]


def test_validate_skips_invalid_merges_duplicates_and_diffs_against_base():
    notes: list[str] = []
    combos = [
        {},
        {"high_watermark": 12_000, "low_watermark": 16_000},  # low > high
        {"policy": "decay", "policy_params.ref_weight": 2},  # decay has no ref_weight
        {"policy": "nosuch"},
        {"stub_threshold": 1000},
        {"stub_threshold": 1000},  # duplicate
        {"policy": "decay", "policy_params.half_life": 4},
    ]
    got = tune.validate(combos, {"context_window": 100_000}, note=notes.append)
    assert [dict(c.changes) for c in got] == [
        {}, {"stub_threshold": 1000}, {"policy": "decay", "policy_params.half_life": 4}]
    assert len(notes) == 3 and all(n.startswith("skipped ") for n in notes)
    assert "must not exceed" in notes[0]
    # every candidate carries full options that build, with the base laid under
    for c in got:
        assert Options.build(c.options).context_window == 100_000


def test_validate_switching_policy_drops_the_bases_parameters():
    base = {"policy": "reference", "policy_params": {"ref_weight": 2.0}}
    (c,) = tune.validate([{"policy": "lru"}], base)
    assert c.options["policy"] == "lru" and c.options["policy_params"] == {}
    (c,) = tune.validate([{"policy_params.half_life": 20}], base)
    assert c.options["policy_params"] == {"ref_weight": 2.0, "half_life": 20}
    assert dict(c.changes) == {"policy_params.half_life": 20}


def test_validate_rejects_an_invalid_base():
    with pytest.raises(ConfigError):
        tune.validate([{}], {"high_watermark": -1})


def test_default_points_are_valid_and_small():
    got = tune.validate(tune.DEFAULT_POINTS)
    assert len(got) == len(tune.DEFAULT_POINTS) and 8 <= len(got) <= 12
    assert not got[0].changes  # the shipped defaults are a point


def _cands(n: int) -> list[tune.Candidate]:
    return [tune.Candidate(options={"i": i}, changes={} if i == 3 else {"i": i}) for i in range(n)]


def test_cap_is_deterministic_keeps_order_and_the_base():
    cands = _cands(20)
    a, b = tune.cap(cands, 5, seed=1), tune.cap(cands, 5, seed=1)
    assert a == b and len(a) == 5
    idx = [c.options["i"] for c in a]
    assert idx == sorted(idx) and 3 in idx
    assert tune.cap(cands, 50) == cands
    with pytest.raises(ConfigError):
        tune.cap(cands, 0)


def test_changes_and_label():
    base = Options().to_dict()
    opts = {**base, "high_watermark": 16_000, "policy_params": {"half_life": 8}}
    diff = tune.changes(opts, base)
    assert diff == {"high_watermark": 16_000, "policy_params.half_life": 8}
    assert tune.label(diff) == "high_watermark=16000 policy_params.half_life=8"
    assert tune.label({}) == "defaults"
    assert tune.label({"policy": "decay", "x": None}) == "policy=decay x=null"


# --------------------------------------------------------------------------
# The frontier and the choice


def pt(name, cost, cov, violations=0, errors=0, long=None, raw=None, eff=None, names=None,
       worst=None):
    # ``cost`` is the re-read cost the frontier is drawn on; ``raw`` the cache-adjusted one,
    # ``eff`` the one with faults priced as excerpts
    return tune.Point(name=name, changes={"n": name}, options={},
                      cost_vs_full=cost if raw is None else raw,
                      effective_vs_full=cost if eff is None else eff, reread_vs_full=cost,
                      coverage=cov, long_coverage=long, violations=violations, errors=errors,
                      names_coverage=names, worst_coverage=worst)


def frontier(points, objective="coverage"):
    return sorted(p.name for p in tune.pareto(points, objective) if p.frontier)


def test_pareto_by_hand():
    points = [
        pt("a", 0.30, 0.90),
        pt("b", 0.40, 0.95),
        pt("c", 0.45, 0.94),  # dominated by b
        pt("d", 0.60, 0.99),
        pt("e", 0.30, 0.85),  # same cost as a, less coverage
        pt("f", 0.20, 0.99, violations=1),  # would dominate all, but breaks invariants
        pt("g", 0.10, 1.00, errors=1),  # failed on a session
        pt("h", None, 0.99),  # not measured
        pt("i", 0.60, 0.99),  # ties d: both stay
    ]
    assert frontier(points) == ["a", "b", "d", "i"]
    out = tune.pareto(points)
    assert [p.name for p in out] == [p.name for p in points]  # order kept


def test_pareto_on_long_coverage():
    points = [pt("a", 0.3, 0.99, long=0.5), pt("b", 0.4, 0.95, long=0.8), pt("c", 0.5, 0.9)]
    assert frontier(points, "long_coverage") == ["a", "b"]
    assert frontier(points) == ["a"]
    with pytest.raises(ConfigError):
        tune.pareto(points, "cost")


def test_choose_cheapest_reaching_target_else_highest_coverage():
    points = tune.pareto([pt("a", 0.30, 0.90), pt("b", 0.40, 0.95), pt("d", 0.60, 0.99),
                          pt("x", 0.10, 1.0, violations=2)])
    assert tune.choose(points, 0.95).name == "b"
    assert tune.choose(points, 0.96).name == "d"
    assert tune.choose(points, 0.50).name == "a"
    assert tune.choose(points, 0.999).name == "d"  # nothing reaches it: most coverage
    assert tune.choose(tune.pareto([pt("x", 0.1, 1.0, violations=1)]), 0.9) is None
    assert tune.choose([], 0.9) is None


def test_frontier_and_choice_use_reread_cost_not_raw_or_excerpt_cost():
    # b is cheaper before faults are priced, or priced as excerpts; a once priced as re-reads
    points = tune.pareto([pt("a", 0.50, 0.96, raw=0.45, eff=0.47),
                          pt("b", 0.55, 0.96, raw=0.40, eff=0.42)])
    assert frontier(points) == ["a"]
    assert tune.choose(points, 0.95).name == "a"
    raw = tune.pareto(points, cost="cost_vs_full")
    assert [p.name for p in raw if p.frontier] == ["b"]
    assert tune.choose(raw, 0.95, cost="cost_vs_full").name == "b"
    excerpt = tune.pareto(points, cost="effective_vs_full")
    assert [p.name for p in excerpt if p.frontier] == ["b"]
    with pytest.raises(ConfigError):
        tune.pareto(points, cost="tokens")


def test_choose_floors_least_reread_cost_meeting_every_floor():
    floors = {"names_coverage": 0.97, "worst_coverage": 0.90}
    points = [
        pt("cheap", 0.50, 0.95, names=0.96, worst=0.95),  # names under the floor
        pt("spotty", 0.55, 0.99, names=0.99, worst=0.85),  # one session under 0.90
        pt("good", 0.60, 0.98, names=0.97, worst=0.90),  # both floors met exactly
        pt("dear", 0.80, 1.00, names=1.00, worst=1.00),
        pt("broken", 0.10, 1.00, names=1.00, worst=1.00, violations=1),
        pt("unmeasured", 0.20, 1.00, names=None, worst=1.00),
    ]
    assert tune.choose_floors(points, floors).name == "good"
    assert tune.choose_floors(points, {"names_coverage": 0.97}).name == "spotty"
    assert tune.choose_floors(points, {**floors, "coverage": 0.99}).name == "dear"
    assert tune.choose_floors(points, {"worst_coverage": 1.01}) is None
    assert tune.floors_text(floors) == "names coverage >= 0.97, worst coverage >= 0.9"
    with pytest.raises(ConfigError):
        tune.choose_floors(points, {"cost": 0.5})


def test_by_cost_puts_unmeasured_last():
    assert [p.name for p in tune.by_cost([pt("b", 0.5, 1), pt("n", None, 1), pt("a", 0.2, 1)])] == [
        "a", "b", "n"]


def test_config_document_loads_in_pager_open(tmp_path):
    opts = tune.validate([{"high_watermark": 16_000, "policy": "decay"}])[0]
    point = tune.Point(name="p02", changes=opts.changes, options=opts.options,
                       cost_vs_full=0.4, coverage=0.97)
    doc = tune.config_document(point, sessions=3, pricing={"name": "anthropic"})
    f = tmp_path / "tuned.json"
    f.write_bytes(orjson.dumps(doc))
    assert load_config(f) == opts.options
    p = pager.open(tmp_path / "store", config=f)
    try:
        assert p.options.high_watermark == 16_000 and p.options.policy == "decay"
    finally:
        p.close()


# --------------------------------------------------------------------------
# The command line, end to end


@pytest.fixture
def sessions(tmp_path):
    d = tmp_path / "sessions"
    d.mkdir()
    write_session(d / "s.jsonl", seed=5, n_steps=12)
    return d


def parse(argv):
    parser = argparse.ArgumentParser()
    tune_cli.register(parser.add_subparsers())
    return parser.parse_args(["tune", *argv])


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    points = tune_cli.run_tune(parse(argv), out, err)
    return points, out.getvalue(), err.getvalue()


def test_cli_two_point_grid_writes_a_config_pager_accepts(sessions, tmp_path):
    cfg, js = tmp_path / "tuned.json", tmp_path / "points.json"
    points, out, err = run_cli([
        str(sessions), "--min-assistant", "1", "--no-progress",
        "--grid", "high_watermark=8000,16000", "--grid", "low_watermark=4000",
        "--grid", "high_watermark=6000,16000",  # a later --grid for a key replaces the earlier
        "--context-window", "100000", "--write", str(cfg), "--json", str(js),
        "--names-floor", "0.5", "--worst-floor", "0",
    ])
    # the base (defaults) plus the two grid points
    assert [tune.label(p.changes) for p in points] == [
        "defaults", "high_watermark=6000 low_watermark=4000",
        "high_watermark=16000 low_watermark=4000"]
    assert "1 sessions" in err and "3 configurations" in err
    assert "Pareto frontier (re-read cost against names coverage)" in out
    assert "chosen for names coverage >= 0.5, worst coverage >= 0: p0" in out
    for p in points:
        assert p.violations == 0 and p.errors == 0 and p.cost_vs_full is not None
    assert any(p.frontier for p in points)

    doc = orjson.loads(cfg.read_bytes())
    assert doc["sessions"] == 1 and doc["pricing"]["name"] == "anthropic"
    assert set(doc["figures"]) >= {"cost_vs_full", "effective_vs_full", "fault_rate", "coverage",
                                   "long_coverage", "growth", "violations", "reread_vs_full",
                                   "names_coverage", "worst_coverage", "sessions_below"}
    assert doc["fault_cost"] == {"recall_tokens": 340, "output_tokens": 40, "output_price": 5.0,
                                 "reread_cap": None}
    assert doc["floors"] == {"names_coverage": 0.5, "worst_coverage": 0.0}
    chosen = orjson.loads(js.read_bytes())["chosen"]
    assert doc["options"] == next(p.options for p in points if p.name == chosen)
    assert doc["options"]["context_window"] == 100_000
    p = pager.open(tmp_path / "store", config=cfg)
    try:
        assert p.options.to_dict() == Options.build(doc["options"]).to_dict()
    finally:
        p.close()

    allp = orjson.loads(js.read_bytes())
    assert len(allp["points"]) == 3 and sum(q["frontier"] for q in allp["points"]) >= 1


def test_cli_floors_no_point_meets_writes_nothing(sessions, tmp_path):
    cfg, js, base = tmp_path / "tuned.json", tmp_path / "points.json", tmp_path / "base.json"
    # a base that pages hard, so every point misses needs on the synthetic session
    base.write_text('{"high_watermark": 2000, "low_watermark": 1000, "recent_units": 1, '
                    '"stub_threshold": 200}')
    argv = [str(sessions), "--min-assistant", "1", "--no-progress", "--base", str(base),
            "--grid", "high_watermark=4000", "--write", str(cfg), "--json", str(js),
            "--names-floor", "1", "--worst-floor", "1", "--coverage-floor", "1"]
    points, out, err = run_cli(argv)
    assert points and all(p.coverage is not None and p.coverage < 1 for p in points)
    assert ("no point meets the floors (names coverage >= 1, worst coverage >= 1, "
            "coverage >= 1)") in out
    assert "Pareto frontier (re-read cost against names coverage)" in out
    assert "nothing written" in err and not cfg.exists()
    doc = orjson.loads(js.read_bytes())
    assert doc["chosen"] is None and doc["floors"]["coverage"] == 1.0
    assert all(q["reread_vs_full"] >= q["cost_vs_full"] for q in doc["points"])
    args = parse(argv)
    assert args.func(args) == 1  # a configuration was asked for and none qualifies


def test_cli_dry_run_lists_the_default_grid(capsys):
    args = build_parser().parse_args(["tune", "--dry-run"])
    assert args.func(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "p01  defaults" and len(out) == len(tune.DEFAULT_POINTS)


def test_cli_notes_skipped_and_sampled(sessions):
    _, out, err = run_cli(["--dry-run", "--grid", "high_watermark=10000,24000,32000",
                           "--grid", "low_watermark=8000,12000", "--max-points", "2"])
    assert err.count("skipped high_watermark=10000") == 1  # only with low_watermark=12000
    # the base and the five valid grid points, two of them replayed
    assert "2 configurations (a sample of the 6 valid ones, --max-points)" in err
    assert out.splitlines()[0] == "p01  defaults" and len(out.splitlines()) == 2


def test_cli_grid_file_and_errors(tmp_path):
    g = tmp_path / "g.json"
    g.write_text('{"recall_pages": [4, 5]}')
    _, out, _ = run_cli(["--dry-run", "--grid-file", str(g), "--grid", "recent_units=2"])
    assert out.splitlines()[1:] == ["p02  recent_units=2 recall_pages=4",
                                    "p03  recent_units=2 recall_pages=5"]
    with pytest.raises(ConfigError):
        run_cli(["--dry-run", "--grid", "bogus=1"])
    for argv in (["--target-coverage", "2"], ["--max-points", "0"]):
        with pytest.raises(SystemExit):  # a bad value is a usage error: argparse exits 2
            run_cli(["--dry-run", *argv])


def test_cli_nothing_to_replay(sessions):
    points, _, err = run_cli([str(sessions), "--min-assistant", "1000", "--no-progress",
                              "--grid", "stub_threshold=1000"])
    assert points is None and "nothing to replay" in err
