"""Cache-adjusted cost: the cached prefix and the pricing models."""

from __future__ import annotations

import pytest

from pager.errors import ConfigError
from pager.lab.replay.cost import cached_prefix_tokens, pricing


def test_cached_prefix_stops_at_first_difference():
    assert cached_prefix_tokens(None, [b"a", b"b"], [5, 7]) == 0
    assert cached_prefix_tokens([b"a", b"b"], [b"a", b"b", b"c"], [5, 7, 9]) == 12
    assert cached_prefix_tokens([b"a", b"x", b"c"], [b"a", b"b", b"c"], [5, 7, 9]) == 5
    assert cached_prefix_tokens([b"z"], [b"a"], [5]) == 0
    # a shorter prompt: its leading messages can all be cached
    assert cached_prefix_tokens([b"a", b"b", b"c"], [b"a", b"b"], [5, 7]) == 12


def test_pricing_models():
    a = pricing("anthropic")
    assert a.cost(100, 60) == pytest.approx(0.1 * 60 + 1.25 * 40)
    o = pricing("openai")
    assert o.cost(100, 60) == pytest.approx(0.5 * 60 + 40)
    assert pricing("openai", discount=0.9).cost(100, 60) == pytest.approx(0.1 * 60 + 40)
    assert pricing("none").cost(100, 60) == 100


def test_pricing_rejects_bad_settings():
    with pytest.raises(ConfigError):
        pricing("azure")
    with pytest.raises(ConfigError):
        pricing("openai", discount=1.5)
    with pytest.raises(ConfigError):
        pricing("anthropic", discount=0.5)
