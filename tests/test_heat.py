"""Heat policies: conformance every policy must pass, per-policy behaviour, registry, properties."""

from __future__ import annotations

import random
import time
from typing import ClassVar

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sizes import examples

from helpers import python_lines
from pager.core import heat
from pager.errors import ConfigError, InputError, PagerError
from pager.core.heat import (
    DEFAULT_POLICY,
    POLICIES,
    SHIPPED_ELSEWHERE,
    DecayPolicy,
    HeatPolicy,
    LFUPolicy,
    LRUPolicy,
    PageTable,
    ReferencePolicy,
    get_policy,
    rank_scores,
    register_policy,
)
from pager.core.pages import KIND_CODE, PageRecord

I64 = np.iinfo(np.int64)
SHIPPED = sorted(set(POLICIES) | set(SHIPPED_ELSEWHERE))  # every shipped policy, loaded or not


# ---------------------------------------------------------------------------
# helpers


@attrs.frozen
class Smallest(HeatPolicy):
    """A custom policy, to prove the conformance suite covers user policies."""

    name: ClassVar[str] = "test-smallest"
    bias: float = 0.0

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        return self.bias - table.tokens.astype(np.float64)


def random_table(n: int, seed: int = 0, *, span: int = 1000, clock: int | None = None) -> PageTable:
    rng = np.random.default_rng(seed)
    created = rng.integers(0, span, n)
    return PageTable(
        page_id=rng.permutation(n) + 1,
        created=created,
        last_ref=created + rng.integers(0, 50, n),
        ref_count=rng.integers(0, 6, n),
        tokens=rng.integers(0, 30_000, n),
        kind=rng.integers(0, len(KIND_CODE), n),
        stale=rng.random(n) < 0.2,
        relevance=rng.random(n),
    )


def extreme_table() -> PageTable:
    big, small = I64.max, I64.min
    return PageTable(
        page_id=[1, 2, 3, 4, 5, 6],
        created=[0, big, small, -5, big, 0],
        last_ref=[0, big, small, big, small, 10**18],
        ref_count=[0, big, -1, small, 3, 10**15],
        tokens=[0, big, -10, small, 1, 0],
        kind=[0, 1, 2, 3, 4, 127],
        stale=[True, False, True, False, True, False],
        relevance=[0.0, 1.0, np.nan, np.inf, -np.inf, 0.5],
    )


# ---------------------------------------------------------------------------
# conformance: every registered policy and a custom one


@pytest.fixture(params=SHIPPED + ["custom"])
def policy(request: pytest.FixtureRequest) -> HeatPolicy:
    return Smallest() if request.param == "custom" else get_policy(request.param)


class TestConformance:
    def test_deterministic(self, policy: HeatPolicy) -> None:
        table = random_table(500, seed=1)
        a = policy.score(table, 1200)
        b = policy.score(table, 1200)
        assert a.dtype == np.float64
        assert np.array_equal(a, b)
        assert np.array_equal(policy.rank(table, 1200), policy.rank(table, 1200))
        # And a fresh instance with the same parameters agrees.
        again = get_policy(type(policy), **policy.params())
        assert np.array_equal(again.score(table, 1200), a)

    @pytest.mark.parametrize("clock", [0, 1, 999, 10**9, I64.max, -(10**6)])
    def test_scores_finite(self, policy: HeatPolicy, clock: int) -> None:
        for table in (random_table(200, seed=2), extreme_table(), PageTable.empty()):
            scores = policy.score(table, clock)
            assert scores.shape == (len(table),)
            assert np.isfinite(scores).all()
            order = policy.rank(table, clock)
            assert sorted(order.tolist()) == list(range(len(table)))

    def test_empty_table(self, policy: HeatPolicy) -> None:
        assert policy.score(PageTable.empty(), 5).shape == (0,)
        assert policy.rank(PageTable.empty(), 5).shape == (0,)

    def test_zero_tokens(self, policy: HeatPolicy) -> None:
        table = PageTable.from_rows([{"tokens": 0, "created": i} for i in range(5)])
        assert np.isfinite(policy.score(table, 10)).all()

    def test_ties_newer_page_first(self, policy: HeatPolicy) -> None:
        rows = [{"page_id": pid, "created": 3, "tokens": 50} for pid in (7, 2, 9, 4)]
        table = PageTable.from_rows(rows)
        assert table.page_id[policy.rank(table, 10)].tolist() == [9, 7, 4, 2]

    def test_rank_orders_by_score(self, policy: HeatPolicy) -> None:
        table = random_table(300, seed=3)
        scores = policy.score(table, 800)
        order = policy.rank(table, 800)
        s, pid = scores[order], table.page_id[order]
        assert (np.diff(s) <= 0).all()
        assert (pid[1:] < pid[:-1])[s[1:] == s[:-1]].all()

    def test_no_wall_clock_or_randomness(self, policy: HeatPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
        def explode(*_a: object, **_k: object) -> None:
            raise AssertionError("a heat policy read the wall clock or a random source")

        table = random_table(50, seed=4)
        for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "process_time"):
            monkeypatch.setattr(time, name, explode)
        monkeypatch.setattr(random, "random", explode)
        monkeypatch.setattr(np.random, "random", explode)
        monkeypatch.setattr(np.random, "default_rng", explode)
        policy.score(table, 100)
        policy.rank(table, 100)

    def test_does_not_mutate_table(self, policy: HeatPolicy) -> None:
        table = random_table(100, seed=5)
        before = {f.name: getattr(table, f.name).copy() for f in attrs.fields(PageTable)}
        policy.rank(table, 500)
        for name, col in before.items():
            assert np.array_equal(getattr(table, name), col, equal_nan=True)

    def test_params_roundtrip(self, policy: HeatPolicy) -> None:
        params = policy.params()
        assert isinstance(params, dict)
        rebuilt = get_policy(type(policy), **params)
        assert rebuilt.params() == params
        assert rebuilt == policy

    def test_rank_invariant_under_time_shift(self, policy: HeatPolicy) -> None:
        table = random_table(200, seed=6)
        shift = 10**6
        moved = attrs.evolve(table, created=table.created + shift, last_ref=table.last_ref + shift)
        assert np.array_equal(policy.rank(table, 1100), policy.rank(moved, 1100 + shift))


# ---------------------------------------------------------------------------
# per-policy behaviour


def test_decay_older_is_colder() -> None:
    table = PageTable.from_rows([{"created": c, "kind": "user"} for c in (0, 5, 9)])
    scores = get_policy("decay").score(table, 10)
    assert scores[0] < scores[1] < scores[2]


def test_decay_half_life_units() -> None:
    table = PageTable.from_rows([{"created": 0, "kind": "user"}, {"created": 0, "kind": "tool"}])
    scores = DecayPolicy(half_life=8.0).score(table, 16)
    # Two half-lives for a turn; tool output ages twice as fast by default.
    assert scores.tolist() == [-2.0, -4.0]
    same = DecayPolicy(half_life=8.0, tool_half_life=8.0).score(table, 16)
    assert same.tolist() == [-2.0, -2.0]


def test_decay_ignores_references() -> None:
    table = PageTable.from_rows([{"created": 0, "last_ref": 9, "ref_count": 5}, {"created": 1}])
    assert get_policy("decay").rank(table, 10).tolist() == [1, 0]


def test_lru_follows_last_ref() -> None:
    table = PageTable.from_rows(
        [{"created": 0, "last_ref": 8}, {"created": 5, "last_ref": 5}, {"created": 1, "last_ref": 9}]
    )
    assert LRUPolicy().rank(table, 10).tolist() == [2, 0, 1]


def test_lfu_more_refs_hotter_and_decayed() -> None:
    table = PageTable.from_rows(
        [
            {"created": 0, "last_ref": 50, "ref_count": 1},
            {"created": 0, "last_ref": 50, "ref_count": 7},
            {"created": 0, "last_ref": 10, "ref_count": 7},
        ]
    )
    scores = LFUPolicy(half_life=32.0).score(table, 60)
    assert scores[1] > scores[0]
    assert scores[1] > scores[2]
    # Many references long ago lose to a few recent ones once enough time passed.
    stale_fame = PageTable.from_rows(
        [{"created": 0, "last_ref": 0, "ref_count": 15}, {"created": 0, "last_ref": 200, "ref_count": 1}]
    )
    assert LFUPolicy(half_life=32.0).rank(stale_fame, 210).tolist() == [1, 0]


def test_fifo_is_creation_order() -> None:
    table = PageTable.from_rows([{"created": c, "ref_count": 9 - c} for c in (3, 1, 2)])
    assert get_policy("fifo").rank(table, 10).tolist() == [0, 2, 1]


def test_reference_old_referenced_page_outranks_newer_unreferenced() -> None:
    table = PageTable.from_rows(
        [
            {"page_id": 1, "created": 0, "last_ref": 30, "ref_count": 1, "kind": "tool", "tokens": 800},
            {"page_id": 2, "created": 10, "kind": "tool", "tokens": 800},
        ]
    )
    # Referred back to at step 30: half its age is renewed, plus a bonus.
    assert ReferencePolicy().rank(table, 32).tolist() == [0, 1]
    assert ReferencePolicy(ref_recency=1.0).rank(table, 60).tolist() == [0, 1]
    # Without the reference evidence, the newer page wins.
    assert ReferencePolicy(ref_recency=0.0, ref_weight=0.0).rank(table, 32).tolist() == [1, 0]


def test_reference_stale_colder_than_fresh_copy() -> None:
    table = PageTable.from_rows(
        [
            {"page_id": 1, "created": 10, "last_ref": 35, "ref_count": 2, "kind": "file", "tokens": 3000, "stale": True},
            {"page_id": 2, "created": 30, "last_ref": 35, "ref_count": 2, "kind": "file", "tokens": 3000},
        ]
    )
    scores = ReferencePolicy().score(table, 40)
    assert scores[0] < scores[1]
    fresh = ReferencePolicy().score(attrs.evolve(table, stale=np.array([False, False])), 40)
    assert fresh[0] - scores[0] == pytest.approx(ReferencePolicy().stale_penalty)


def test_reference_relevance_raises_a_page() -> None:
    rows = [{"created": 0, "kind": "assistant", "relevance": 0.0}, {"created": 0, "kind": "assistant", "relevance": 1.0}]
    table = PageTable.from_rows(rows)
    scores = ReferencePolicy().score(table, 20)
    assert scores[1] - scores[0] == pytest.approx(ReferencePolicy().relevance_weight)
    # A relevant page beats a somewhat newer irrelevant one.
    newer = PageTable.from_rows([{"created": 0, "relevance": 1.0}, {"created": 8, "relevance": 0.0}])
    assert ReferencePolicy().rank(newer, 30).tolist() == [0, 1]


def test_reference_task_switch_moves_the_working_set() -> None:
    # Pages 0-3 belong to task A, 4-7 to task B; all of the same age and size.
    rows = [{"page_id": i + 1, "created": 10 + i % 2, "kind": "tool", "tokens": 500} for i in range(8)]
    table = PageTable.from_rows(rows)
    task_a = np.array([0.8] * 4 + [0.0] * 4)
    on_a = attrs.evolve(table, relevance=task_a)
    on_b = attrs.evolve(table, relevance=task_a[::-1].copy())
    policy = ReferencePolicy()
    top_a = set(policy.rank(on_a, 30)[:4].tolist())
    top_b = set(policy.rank(on_b, 30)[:4].tolist())
    assert top_a == {0, 1, 2, 3}
    assert top_b == {4, 5, 6, 7}


def test_reference_size_penalty() -> None:
    table = PageTable.from_rows([{"tokens": 200}, {"tokens": 20_000}])
    assert ReferencePolicy().rank(table, 5).tolist() == [0, 1]
    assert ReferencePolicy(size_penalty=0).rank(table, 5).tolist() == [1, 0]  # tie -> newer page id


def test_reference_clips_bad_relevance() -> None:
    table = PageTable.from_rows([{"relevance": 5.0}, {"relevance": 1.0}])
    s = ReferencePolicy().score(table, 3)
    assert s[0] == s[1]


# ---------------------------------------------------------------------------
# registry


def test_shipped_names_and_default() -> None:
    assert {"decay", "lru", "lfu", "reference", "fifo"} <= set(POLICIES)
    assert DEFAULT_POLICY == "reference"
    assert isinstance(get_policy(), ReferencePolicy)
    assert get_policy(None) == ReferencePolicy()
    assert get_policy(" LRU ") == LRUPolicy()


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_policy("mru")
    for name in SHIPPED:
        assert name in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PagerError)


@pytest.mark.parametrize(
    "params",
    [
        {"half_life": 0},
        {"half_life": -3},
        {"half_life": float("nan")},
        {"half_life": float("inf")},
        {"half_life": "8"},
        {"half_life": True},
        {"ref_weight": -1},
        {"stale_penalty": 1e9},
        {"ref_recency": 1.5},
        {"nonsense": 1},
    ],
)
def test_bad_params(params: dict) -> None:
    with pytest.raises(ConfigError):
        get_policy("reference", **params)


def test_bad_params_direct_construction() -> None:
    with pytest.raises(ConfigError):
        DecayPolicy(half_life=0)
    with pytest.raises(ConfigError, match="valid: half_life"):
        get_policy("lfu", ref_weight=1)


def test_params_reproduce_policy() -> None:
    tuned = get_policy("reference", half_life=10, ref_weight=2.5, size_penalty=0)
    assert tuned.params()["half_life"] == 10.0
    assert get_policy(tuned.name, **tuned.params()) == tuned
    assert set(ReferencePolicy().params()) == {
        "half_life",
        "tool_half_life",
        "ref_weight",
        "stale_penalty",
        "relevance_weight",
        "size_penalty",
        "ref_recency",
        "task_penalty",
        "overlap_weight",
    }


def test_instance_passthrough_and_evolve() -> None:
    p = DecayPolicy(half_life=4)
    assert get_policy(p) is p
    q = get_policy(p, half_life=6)
    assert q == DecayPolicy(half_life=6) and p.half_life == 4
    assert get_policy(LFUPolicy) == LFUPolicy()


def test_not_a_policy() -> None:
    with pytest.raises(ConfigError):
        get_policy(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        get_policy(dict)  # type: ignore[arg-type]


def test_register_custom_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heat, "POLICIES", dict(heat.POLICIES))
    assert register_policy(Smallest) is Smallest
    assert register_policy(Smallest) is Smallest  # idempotent
    p = get_policy("test-smallest", bias=2)
    assert p == Smallest(bias=2)
    table = PageTable.from_rows([{"tokens": 10}, {"tokens": 5}])
    assert p.rank(table, 0).tolist() == [1, 0]

    @attrs.frozen
    class Other(HeatPolicy):
        name: ClassVar[str] = "test-smallest"

        def score(self, table: PageTable, clock: int) -> np.ndarray:
            return np.zeros(len(table))

    with pytest.raises(ConfigError, match="taken"):
        register_policy(Other)
    assert "test-smallest" not in POLICIES  # the module's real registry was left alone


def test_register_rejects_malformed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heat, "POLICIES", dict(heat.POLICIES))

    class NoName(HeatPolicy):
        def score(self, table: PageTable, clock: int) -> np.ndarray:
            return np.zeros(len(table))

    class NoScore(HeatPolicy):
        name: ClassVar[str] = "no-score"

    with pytest.raises(ConfigError):
        register_policy(NoName)
    with pytest.raises(ConfigError):
        register_policy(NoScore)
    with pytest.raises(ConfigError):
        register_policy(int)  # type: ignore[type-var]


def test_plain_class_policy_params() -> None:
    class Plain(HeatPolicy):
        name: ClassVar[str] = "plain"

        def __init__(self, k: float = 1.0) -> None:
            self.k = k

        def score(self, table: PageTable, clock: int) -> np.ndarray:
            return self.k * table.created.astype(np.float64)

    assert Plain(k=3).params() == {"k": 3}
    with pytest.raises(ConfigError, match="cannot change"):
        get_policy(Plain(), k=2)


def test_rank_rejects_broken_policy() -> None:
    class Broken(HeatPolicy):
        name: ClassVar[str] = "broken"

        def score(self, table: PageTable, clock: int) -> np.ndarray:
            return np.full(len(table), np.nan)

    class Short(HeatPolicy):
        name: ClassVar[str] = "short"

        def score(self, table: PageTable, clock: int) -> np.ndarray:
            return np.zeros(1)

    table = random_table(3)
    with pytest.raises(ConfigError, match="non-finite"):
        Broken().rank(table, 1)
    with pytest.raises(ConfigError, match="shape"):
        Short().rank(table, 1)


# ---------------------------------------------------------------------------
# PageTable


def test_table_columns_and_defaults() -> None:
    table = PageTable.from_rows([{"created": 4}, {"page_id": 9, "kind": "file", "stale": True}])
    assert len(table) == 2
    assert table.page_id.tolist() == [0, 9]
    assert table.last_ref.tolist() == [4, 0]
    assert table.kind.tolist() == [KIND_CODE["user"], KIND_CODE["file"]]
    assert table.page_id.dtype == np.int64 and table.kind.dtype == np.int8
    assert table.stale.dtype == np.bool_ and table.relevance.dtype == np.float64
    with pytest.raises(ValueError):
        table.tokens[0] = 5  # read-only view


def test_table_does_not_freeze_callers_array() -> None:
    ids = np.arange(3, dtype=np.int64)
    table = PageTable(ids, ids, ids, ids, ids, np.zeros(3, np.int8), np.zeros(3, bool), np.zeros(3))
    ids[0] = 7  # still the caller's to change (not copied: documented)
    assert table.page_id[0] == 7


def test_table_validation() -> None:
    with pytest.raises(InputError, match="length"):
        PageTable([1, 2], [0], [0], [0], [0], [0], [False], [0.0])
    with pytest.raises(InputError, match="unknown page table columns"):
        PageTable.from_rows([{"age": 3}])
    with pytest.raises(InputError, match="unknown page kind"):
        PageTable.from_rows([{"kind": "image"}])
    with pytest.raises(InputError, match="1-D"):
        PageTable(*([[[1]]] * 8))


def test_table_from_pages_and_take() -> None:
    def page(i: int, **kw: object) -> PageRecord:
        base = dict(id=i, session="s", seq=i, step=i * 2, kind="tool", role="tool", tokens=10 * i, chars=1, hash="h",
                    stub_tokens=1, call_id=None, call_ids=(), tool_name=None, path=None, stale=False, labels=(),
                    last_ref=0, ref_count=0, scope="session", handle="pg:0-a")
        return PageRecord(**{**base, **kw})  # type: ignore[arg-type]

    pages = [page(1), page(2, last_ref=9, ref_count=3, stale=True), page(3, kind="user", role="user")]
    table = PageTable.from_pages(pages, relevance=[0.1, 0.2, 0.3])
    assert table.created.tolist() == [2, 4, 6]
    assert table.last_ref.tolist() == [2, 9, 6]
    assert table.ref_count.tolist() == [0, 3, 0]
    assert table.stale.tolist() == [False, True, False]
    assert table.kind.tolist() == [KIND_CODE["tool"], KIND_CODE["tool"], KIND_CODE["user"]]
    sub = table.take(np.array([2, 0]))
    assert sub.page_id.tolist() == [3, 1] and sub.relevance.tolist() == [0.3, 0.1]
    assert len(table.take(table.stale)) == 1
    assert len(PageTable.from_pages([])) == 0


def test_rank_scores_helper() -> None:
    scores = np.array([1.0, 3.0, 1.0, 3.0])
    ids = np.array([10, 11, 12, 9])
    assert rank_scores(scores, ids).tolist() == [1, 3, 2, 0]


# ---------------------------------------------------------------------------
# properties over random tables

i64 = st.integers(min_value=I64.min, max_value=I64.max)
small = st.integers(min_value=-(2**40), max_value=2**40)


@st.composite
def tables(draw: st.DrawFn, values: st.SearchStrategy[int] = i64) -> PageTable:
    n = draw(st.integers(0, 40))
    ints = lambda: draw(hnp.arrays(np.int64, n, elements=values))  # noqa: E731
    return PageTable(
        page_id=draw(hnp.arrays(np.int64, n, elements=i64, unique=True)),
        created=ints(),
        last_ref=ints(),
        ref_count=ints(),
        tokens=ints(),
        kind=draw(hnp.arrays(np.int8, n)),
        stale=draw(hnp.arrays(np.bool_, n)),
        relevance=draw(hnp.arrays(np.float64, n)),  # includes nan / inf: the policy must cope
    )


ALL = [get_policy(name) for name in SHIPPED] + [Smallest()]

# Each example is a whole table of up to 40 rows over the full int64 range (nan and inf in
# relevance), so a property over whole tables sees up to 40 rows per example. The suite's
# counts (tests/sizes.py; the full campaign's are the ones before them) still put several
# hundred rows through every policy; the time goes mostly to hypothesis drawing the arrays.


@settings(max_examples=examples(30, 70), deadline=None)
@given(table=tables(), clock=i64, which=st.integers(0, len(ALL) - 1))
def test_prop_finite_and_permutation(table: PageTable, clock: int, which: int) -> None:
    policy = ALL[which]
    scores = policy.score(table, clock)
    assert scores.shape == (len(table),) and np.isfinite(scores).all()
    order = policy.rank(table, clock)
    assert np.array_equal(np.sort(order), np.arange(len(table)))
    s = scores[order]
    assert (np.diff(s) <= 0).all()
    pid = table.page_id[order]
    assert (pid[1:] < pid[:-1])[s[1:] == s[:-1]].all()


@settings(max_examples=examples(25, 50), deadline=None)
@given(table=tables(small), clock=small, which=st.integers(0, len(SHIPPED) - 1), data=st.data())
def test_prop_rowwise(table: PageTable, clock: int, which: int, data: st.DataObject) -> None:
    """A row's score depends on that row only: filtering candidates never reorders the rest."""
    policy = get_policy(SHIPPED[which])
    perm = np.array(data.draw(st.permutations(range(len(table)))), dtype=np.int64)
    assert np.array_equal(policy.score(table, clock)[perm], policy.score(table.take(perm), clock))


@settings(max_examples=examples(25, 50), deadline=None)
@given(table=tables(small), clock=small, row=st.integers(0, 39), data=st.data())
def test_prop_monotone_evidence(table: PageTable, clock: int, row: int, data: st.DataObject) -> None:
    """More references, more relevance, fresher, smaller, not stale: never colder."""
    if not len(table):
        return
    row %= len(table)

    def bump(col: str, value: object) -> PageTable:
        arr = getattr(table, col).copy()
        arr[row] = value
        return attrs.evolve(table, **{col: arr})

    def delta(policy: HeatPolicy, changed: PageTable) -> float:
        return float(policy.score(changed, clock)[row] - policy.score(table, clock)[row])

    more = int(table.ref_count[row]) + data.draw(st.integers(1, 1000))
    for name in ("lfu", "reference"):
        assert delta(get_policy(name), bump("ref_count", more)) >= 0
    later = int(table.last_ref[row]) + data.draw(st.integers(1, 1000))
    for name in ("lru", "lfu", "reference"):
        assert delta(get_policy(name), bump("last_ref", later)) >= 0
    ref = get_policy("reference")
    assert delta(ref, bump("stale", True)) <= 0
    assert delta(ref, bump("relevance", 1.0)) >= 0
    assert delta(ref, bump("tokens", int(table.tokens[row]) + 10_000)) <= 0


@settings(max_examples=examples(20, 40), deadline=None)
@given(
    half_life=st.floats(1e-6, 1e12),
    ref_weight=st.floats(0, 1e6),
    stale_penalty=st.floats(0, 1e6),
    relevance_weight=st.floats(0, 1e6),
    size_penalty=st.floats(0, 1e6),
    ref_recency=st.floats(0, 1),
    table=tables(),
    clock=i64,
)
def test_prop_any_valid_params_stay_finite(
    half_life: float,
    ref_weight: float,
    stale_penalty: float,
    relevance_weight: float,
    size_penalty: float,
    ref_recency: float,
    table: PageTable,
    clock: int,
) -> None:
    policy = get_policy(
        "reference",
        half_life=half_life,
        tool_half_life=half_life,
        ref_weight=ref_weight,
        stale_penalty=stale_penalty,
        relevance_weight=relevance_weight,
        size_penalty=size_penalty,
        ref_recency=ref_recency,
    )
    assert np.isfinite(policy.score(table, clock)).all()
    assert np.isfinite(get_policy("decay", half_life=half_life).score(table, clock)).all()
    assert np.isfinite(get_policy("lfu", half_life=half_life).score(table, clock)).all()


@pytest.mark.parametrize("name", ["reference", "decay", "lfu", "lru", "fifo"])
def test_scoring_is_vectorised(name: str) -> None:
    """Scoring runs no Python per row: 100k rows run as many Python lines as 1k (counted, not timed)."""
    policy = get_policy(name)
    small, large = random_table(1_000, seed=9, span=5000), random_table(100_000, seed=9, span=5000)
    policy.score(small, 5100)  # first-call imports and caches out of the count
    lines_small = python_lines(policy.score, small, 5100)
    lines_large = python_lines(policy.score, large, 5100)
    assert lines_large <= lines_small + 20, f"{lines_small} -> {lines_large} lines: is there a Python loop?"
