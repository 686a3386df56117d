"""``Options`` by owner: four frozen parts, flat names everywhere, wrong-mode options refused, old stores reopen."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import orjson
import pytest

import pager
from pager.options import (CheckpointOptions, FacadeOptions, Options, PagingOptions, RolloverOptions,
                           SharedOptions)

ROOT = Path(__file__).resolve().parents[1]

# ``Options().to_dict()`` as the flat class of main afcda09 saved it: content and key order
SAVED_DEFAULTS = (
    '{"context_window":200000,"output_reserve":null,"policy":"reference","policy_params":{},"high_watermark":40000,'
    '"low_watermark":8000,"recent_units":3,"old_share":0.9,"stub_threshold":2000,"inline_max":2000,"recall_pages":3,'
    '"recall_tokens":900,"recall_page_tokens":300,"recall_min_score":0.0,"recall_min_strength":8,"recall_pools":true,'
    '"max_notes":8,"expose_tools":false,"mode":"paging","workspace":null,"fallback_reserve":8000,'
    '"reminder_threshold":16000,"log_reports":true,"scope":"session","owner":null,"pool":null,"cache_marks":"pager",'
    '"state_dir":null,"wal_max_bytes":262144,"l1_cap":8000,"notice_percents":[25,50,75],"window_notice":true,'
    '"effective_window_percent":95,"auto_compact_ratio":0.9,"body_after_prefix":true,"max_steps":0,"task_focus":true,'
    '"minor_rounds":true,"task_rounds":false,"compact_tokens":0,"objective":true,"need_scale":2.0,"keep_room":8000,'
    '"recall_leaves":true}'
)


def test_to_dict_is_the_flat_form_a_store_always_saved():
    assert orjson.dumps(Options().to_dict()).decode() == SAVED_DEFAULTS
    o = Options(mode="rollover", max_steps=5, notice_percents=[10, 20], policy_params={"half_life": 4})
    assert Options.restore(o.to_dict()) == o
    assert list(o.to_dict()) == list(Options.names())


def test_each_part_is_frozen_validated_by_itself_and_read_by_flat_name():
    # the constructor takes any flat names (``build``, what ``pager.open`` uses, also checks their mode)
    o = Options(high_watermark=30_000, context_window=128_000, mode="rollover", max_steps=4)
    assert isinstance(o.facade, FacadeOptions) and isinstance(o.paging, PagingOptions)
    assert isinstance(o.rollover, RolloverOptions) and isinstance(o.checkpoints, CheckpointOptions)
    assert o.paging.high_watermark == o.high_watermark == 30_000
    assert o.rollover.max_steps == o.max_steps == 4
    # the options both schedulers read are in both parts, with the same values
    for name in (f.name for f in attrs.fields(SharedOptions)):
        assert getattr(o.facade, name) == getattr(o.paging, name) == getattr(o.rollover, name) == getattr(o, name)
    assert o.budget == o.paging.budget == o.rollover.budget == 128_000 - 8_192
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        o.paging.high_watermark = 1  # type: ignore[misc]
    # each owner validates its own fields, standalone too
    with pytest.raises(pager.ConfigError, match="low_watermark"):
        PagingOptions(high_watermark=4_000, low_watermark=6_000)
    with pytest.raises(pager.ConfigError, match="notice_percents"):
        RolloverOptions(notice_percents=[50, 25])
    with pytest.raises(pager.ConfigError, match="mode must be"):
        FacadeOptions(mode="windowed")
    with pytest.raises(pager.ConfigError, match="state_dir"):
        CheckpointOptions(state_dir=5)  # type: ignore[arg-type]


def test_flat_construction_evolve_and_parts_compose():
    o = Options(high_watermark=12_345, l1_cap=2_000)
    assert o.paging.l1_cap == o.rollover.l1_cap == 2_000
    e = attrs.evolve(o, low_watermark=1_000)
    assert (e.high_watermark, e.low_watermark, e.l1_cap) == (12_345, 1_000, 2_000)
    assert Options(paging=o.paging).high_watermark == 12_345
    with pytest.raises(pager.ConfigError, match="l1_cap differs between the facade part"):
        Options(facade=FacadeOptions(), paging=PagingOptions(l1_cap=5))
    with pytest.raises(pager.ConfigError, match=r"unknown option\(s\) \['bogus'\]"):
        Options.build(bogus=1)


def _reads(path: Path) -> set[str]:
    """Return the option names a scheduler module reads (``o.X``, ``options.X``, ``self.options.X``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id in ("o", "options")) or (
                isinstance(v, ast.Attribute) and v.attr == "options"):
            out.add(node.attr)
    return out


@pytest.mark.parametrize("modules, part", [
    (["paging.py"], PagingOptions),
    (["rollover.py", "windowing.py"], RolloverOptions),
])
def test_a_scheduler_reads_only_names_its_part_has(modules, part):
    names = set().union(*(_reads(ROOT / "pager" / "schedulers" / m) for m in modules))
    assert len(names) >= 8  # the scan sees the scheduler's reads
    instance = part()
    missing = sorted(n for n in names if not hasattr(instance, n))
    assert not missing, f"{part.__name__} lacks {missing}"


@pytest.mark.parametrize("kwargs, name, mode", [
    ({"max_steps": 3}, "max_steps", "paging"),
    ({"workspace": "/srv/repo"}, "workspace", "paging"),
    ({"mode": "rollover", "recall_pages": 0}, "recall_pages", "rollover"),
    ({"mode": "rollover", "policy": "fifo"}, "policy", "rollover"),
])
def test_a_wrong_mode_option_is_a_config_error_naming_option_and_mode(tmp_path, kwargs, name, mode):
    with pytest.raises(pager.ConfigError, match=rf"{name} is a \w+ option; mode='{mode}' does not read it"):
        Options.build(**kwargs)
    with pytest.raises(pager.ConfigError, match=name):
        pager.open(tmp_path / "ctx", session="s", **kwargs)
    assert not (tmp_path / "ctx").exists()  # refused before the store is made
    cfg = tmp_path / "cfg.json"
    cfg.write_text(orjson.dumps({k: v for k, v in kwargs.items() if k != "mode"}).decode())
    with pytest.raises(pager.ConfigError, match=name):
        pager.open(tmp_path / "ctx", session="s", config=cfg, mode=kwargs.get("mode"))


def test_defaults_and_full_option_sets_do_not_trip_the_mode_check(tmp_path):
    # what ``pager tune --write`` writes: every option, at its default where it was not tuned
    cfg = tmp_path / "tuned.json"
    cfg.write_bytes(orjson.dumps({"options": {**Options().to_dict(), "high_watermark": 30_000}}))
    with pager.open(tmp_path / "a", session="s", config=cfg) as p:
        assert p.options.high_watermark == 30_000
    full = {**Options().to_dict(), "mode": "rollover", "fallback_reserve": 4_000}
    assert Options.build(full).fallback_reserve == 4_000
    assert Options.build(**{**Options().to_dict(), "max_steps": 0}) == Options()  # a default given changes nothing


def test_an_old_store_with_a_wrong_mode_option_reopens_as_it_was(tmp_path):
    with pager.open(tmp_path / "ctx", session="s", context_window=32_000):
        pass
    # a store written before the parts: paging mode with max_steps=5 was accepted silently
    saved = orjson.loads(SAVED_DEFAULTS) | {"context_window": 32_000, "max_steps": 5}
    store = pager.session.open_store(tmp_path / "ctx")
    store.set_setting("options:s", orjson.dumps(saved).decode())
    store.close()
    with pager.open(tmp_path / "ctx", session="s") as p:
        assert p.options.to_dict() == saved and p.options.max_steps == 5 and p.options.mode == "paging"
        out = p.assemble({"messages": [{"role": "user", "content": "hello"}]})
        assert out["messages"][-1]["content"] == "hello"
    store = pager.session.open_store(tmp_path / "ctx")
    try:
        assert orjson.loads(store.setting("options:s")) == saved  # saved again unchanged
    finally:
        store.close()


def test_tuner_only_options_are_marked_in_field_metadata():
    tuner = Options.tuner_only()
    assert set(tuner) == {"old_share", "recall_page_tokens", "recall_min_score", "recall_min_strength",
                          "task_focus", "minor_rounds", "task_rounds", "compact_tokens", "objective",
                          "need_scale", "keep_room", "recall_leaves"}
    # the ablation switches of bench/ablations.py are among them, the ones every user sets are not
    assert {"task_focus", "objective", "minor_rounds"} <= set(tuner)
    first = {f.name for f in Options.fields() if f.metadata.get("first")}
    assert {"context_window", "mode", "high_watermark", "state_dir"} <= first and not first & set(tuner)
