"""The fitted heat policy and its offline fit (pager.lab.fit)."""

from __future__ import annotations

import numpy as np
import pytest

from pager.lab import fit as fit_mod
from pager.core.fitted import FEATURES, features
from pager.core.heat import PageTable, get_policy
from pager.errors import ConfigError
from pager.lab.replay.session import load_sessions

DATA = __import__("pathlib").Path(fit_mod.__file__).parents[1] / "data"  # pager/data


def test_features_columns_follow_the_table() -> None:
    t = PageTable.from_rows([
        {"created": 0, "tokens": 1023, "kind": "tool", "task": False, "overlap": 0.5},
        {"created": 8, "last_ref": 9, "ref_count": 3, "kind": "assistant", "stale": True},
    ])
    x = features(t, 16)
    col = dict(zip(FEATURES, x.T))
    assert x.shape == (2, len(FEATURES))
    assert col["age"].tolist() == [1.0, 0.5]
    assert col["log_size"][0] == pytest.approx(10.0)
    assert col["other_task"].tolist() == [1.0, 0.0] and col["overlap"].tolist() == [0.5, 0.0]
    assert col["tool"].tolist() == [1.0, 0.0] and col["assistant"].tolist() == [0.0, 1.0]
    assert col["log_refs"][1] == 2.0 and col["stale"].tolist() == [0.0, 1.0]


def test_fitted_policy_weights_by_name_and_round_trip() -> None:
    p = get_policy("fitted", weights={"age": -1.0, "assistant": 2.0})
    t = PageTable.from_rows([{"created": 0, "kind": "tool"}, {"created": 0, "kind": "assistant"}])
    assert p.score(t, 16).tolist() == [-1.0, 1.0]
    assert get_policy("fitted", **p.params()) == p
    with pytest.raises(ConfigError):
        get_policy("fitted", weights={"nonsense": 1.0})
    with pytest.raises(ConfigError):
        get_policy("fitted", weights=[1.0, 2.0])


def test_poisson_fit_recovers_the_signs_of_a_synthetic_rule() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4000, len(FEATURES)))
    rate = np.exp(1.5 * x[:, FEATURES.index("assistant")] - 1.0 * x[:, FEATURES.index("age")])
    count = rng.poisson(rate)
    w = fit_mod.fit(x, count > 0, count=count, size_cost=0.0)
    assert w[FEATURES.index("assistant")] > 1.0
    assert w[FEATURES.index("age")] < -0.7
    others = [i for i, f in enumerate(FEATURES) if f not in ("assistant", "age")]
    assert np.abs(w[others]).max() < 0.2


def test_collect_labels_pages_that_hold_later_needs() -> None:
    sessions = [s for s in load_sessions([DATA]) if s.n_assistant >= 10][:1]
    samples = fit_mod.collect(sessions, horizon=4, stride=5)
    assert samples.x.shape == (samples.y.size, len(FEATURES))
    assert 0 < samples.y.mean() < 1
    # a positive page holds a residual need, a negative one none
    assert all(bool(h) == bool(y) for h, y in zip(samples.held, samples.y))
    assert (samples.count <= np.fromiter(map(len, samples.held), float)).all()
    cv = fit_mod.quota_coverage(samples, samples.fifo, 2000)
    assert 0 <= cv <= 1
