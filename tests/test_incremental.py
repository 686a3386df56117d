"""The mirror's kept structures equal a from-scratch rebuild (issue 23: a call does work in proportion to what is new).

``History`` keeps its numpy columns, the task column, recall's query, the user
rows and each row's call ids between calls and extends them; the planner asks
for heat and need only when it runs a round (or for the rows it weighs at the
tail); the recorder matches the incoming history by identity from where it
left off. After random appends, forks, overtaken requests, fresh copies and
rounds, each kept structure must equal what the old whole-history code
computes, and what a mirror loaded from the store holds.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sizes import examples

import pager
from pager.core.heat import HORIZONS, NEEDS, PageTable, _age
from pager.core.history import History
from pager.core.pages import KIND_CODE, TOOL_KINDS
from pager.core.tasks import task_of
from pager.schedulers import paging

from helpers import assistant, call, system, tool, user

# -- the whole-history computations the kept structures replace (as they were before issue 23) --------


def _ref_columns(h: History) -> dict[str, np.ndarray]:
    return {
        "page": np.asarray(h.page, dtype=np.int64),
        "tokens": np.asarray(h.tokens, dtype=np.int64),
        "stub_tokens": np.asarray(h.stub_tokens, dtype=np.int64),
        "compact_tokens": np.asarray(h.compact_tokens, dtype=np.int64),
        "unit": np.asarray(h.unit, dtype=np.int64),
        "created": np.asarray(h.step, dtype=np.int64),
        "last_ref": np.asarray(h.last_ref, dtype=np.int64),
        "ref_count": np.asarray(h.ref_count, dtype=np.int64),
        "kind": np.asarray([KIND_CODE[k] for k in h.kind], dtype=np.int8),
        "stale": np.asarray(h.stale, dtype=bool),
        "tool": np.asarray([k in TOOL_KINDS for k in h.kind], dtype=bool),
    }


def _ref_task_column(h: History) -> np.ndarray:
    active = h.task
    return np.fromiter(((task_of(lab) in (None, active)) for lab in h.labels), dtype=bool, count=len(h.labels))


def _ref_query(h: History) -> set[str]:
    query: set[str] = set()
    for i in range(len(h) - 1, -1, -1):
        if h.role[i] in ("assistant", "user"):
            query |= h.terms[i]
            if h.role[i] == "assistant":
                break
    return query


def _ref_latest_user(h: History) -> int | None:
    for i in range(len(h.role) - 1, -1, -1):
        if h.kind[i] == "user":
            return i
    return None


def _ref_task_start(h: History) -> int | None:
    first = None
    for i in range(len(h) - 1, -1, -1):
        if h.kind[i] != "user" or i == h.first_user:
            continue
        if task_of(h.labels[i]) not in (None, h.task):
            return first
        first = h.step[i]
    return None


def _ref_open_calls(h: History, k: int) -> set[str]:
    answered: set[str] = set()
    r = k - 1
    while r >= 0 and h.kind[r] in TOOL_KINDS:
        if h.answers[r]:
            answered.add(h.answers[r])
        r -= 1
    if r < 0 or h.kind[r] != "assistant":
        return set()
    return {cid for cid, row in h.call_rows.items() if row == r} - answered


def _check_mirror(p: Any) -> None:
    """Assert every kept structure of ``p.history`` equals its rebuild, and the store's copy."""
    h = p.history
    cols, ref = h.columns(), _ref_columns(h)
    assert cols.keys() == ref.keys()
    for name in ref:
        assert cols[name].dtype == ref[name].dtype, name
        assert np.array_equal(cols[name], ref[name]), name
    assert np.array_equal(h.task_column(), _ref_task_column(h))
    assert h.query_terms() == _ref_query(h)
    assert paging.recall_query(h) == _ref_query(h)
    assert h.latest_user == _ref_latest_user(h)
    assert h.task_resumed() == _ref_task_start(h)
    assert h.user_rows == [i for i, k in enumerate(h.kind) if k == "user"]
    for k in range(len(h) + 1):
        assert h.open_calls_at(k) == _ref_open_calls(h, k), k
    # the mirror a reopen would load from the store
    fresh = History(p.session, p.counter)
    branch = p.store.ensure_session(p.session)
    fresh.load(p.store.load_pages(p.store.branch_page_ids(branch)), branch, lambda pid: p.store.message(pid)[1])
    for name in ("page", "hash", "kind", "tokens", "stub_tokens", "unit", "step", "stale", "last_ref", "ref_count",
                 "labels", "task_num", "call_ids", "user_rows"):
        assert getattr(fresh, name) == getattr(h, name), name
    fcols = fresh.columns()
    for name in ref:
        if name != "compact_tokens":  # counted on first use after a load
            assert np.array_equal(fcols[name], cols[name]), name
    assert np.array_equal(fresh.task_column(), h.task_column())


# -- random sessions ----------------------------------------------------------------------------------

PATHS = ("src/app/config.py", "src/app/io.py", "README.md", "tests/test_io.py")

_step = st.tuples(st.just("step"), st.integers(1, 2), st.sampled_from(PATHS), st.integers(0, 3))
_user = st.tuples(st.just("user"), st.sampled_from(PATHS), st.integers(0, 3), st.just(0))
_fork = st.tuples(st.just("fork"), st.integers(1, 6), st.sampled_from(PATHS), st.just(0))
_behind = st.tuples(st.just("behind"), st.integers(1, 4), st.just(""), st.just(0))
_copy = st.tuples(st.just("copy"), st.just(0), st.just(""), st.just(0))
OPS = st.lists(st.one_of(_step, _step, _step, _user, _fork, _behind, _copy), min_size=3, max_size=14)


def _output(path: str, size: int, n: int) -> str:
    # sizes from a few tokens to over inline_max (a big output at the tail is weighed by the objective)
    lines = (3, 40, 400, 1200)[size]
    return "".join(f"{path}:{i} value_{n}_{i} = compute_{i % 7}(x) # filler\n" for i in range(lines))


def _apply(p: Any, history: list[dict[str, Any]], op: tuple[Any, ...], n: int) -> list[dict[str, Any]]:
    kind, a, path, size = op
    if kind == "step":
        calls, results = [], []
        for j in range(a):
            cid = f"c{n}_{j}"
            command = f"cat {path}" if size % 2 == 0 else f"sed -i s/a/b/ {path}"
            calls.append(call(cid, "bash", command=command))
            results.append(tool(cid, _output(path, size, n)))
        history = history + [assistant(f"Now {path}: look at compute_{n % 7}", *calls), *results]
    elif kind == "user":
        history = history + [user(f"switch to {path} and fix compute_{size} there")]
    elif kind == "fork":
        cut = max(2, len(history) - a)
        while cut < len(history) and history[cut]["role"] == "tool":
            cut += 1  # never between a call and its results
        history = history[:cut] + [user(f"instead, rewrite {path} from scratch ({n})")]
    elif kind == "behind":
        cut = max(2, len(history) - a)
        while cut < len(history) and history[cut]["role"] == "tool":
            cut += 1
        p.assemble({"messages": history[:cut]})  # overtaken: recorded nowhere
        return history
    elif kind == "copy":
        history = json.loads(json.dumps(history))  # the same messages as new objects (a proxy's request)
    p.assemble({"messages": history})
    return history


# 10 examples in the suite (25 in the full campaign, tests/sizes.py): each example is a session of random calls of
# every kind (steps, forks, behind, copies), the mirror rebuilt after each
@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_kept_structures_equal_a_rebuild_after_random_calls(ops):
    history = [system("You are a coding agent."), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="inc", context_window=12_000, log_reports=False) as p:
        p.assemble({"messages": history})
        _check_mirror(p)
        for n, op in enumerate(ops):
            history = _apply(p, history, op, n)
            _check_mirror(p)


def test_a_prefix_view_and_a_truncated_mirror_rebuild_their_structures():
    history = [system("s"), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="view", context_window=12_000, log_reports=False) as p:
        for n in range(6):
            history = _apply(p, history, ("step", 1 + n % 2, PATHS[n % 4], n % 4), n)
        history = _apply(p, history, ("user", 0, PATHS[1], 2), 7)
        h = p.history
        for cut in range(0, len(h) + 1, 3):
            view = h.prefix(cut)
            assert np.array_equal(view.columns()["page"], _ref_columns(view)["page"])
            assert np.array_equal(view.task_column(), _ref_task_column(view))
            assert view.query_terms() == _ref_query(view)
            assert view.latest_user == _ref_latest_user(view)
        h.columns()  # kept arrays exist, then the mirror is cut and grows again
        h.truncate(5)
        cols = h.columns()
        for name, col in _ref_columns(h).items():
            assert np.array_equal(cols[name], col), name
        assert h.user_rows == [i for i, k in enumerate(h.kind) if k == "user"]


def test_the_columns_are_read_only_views():
    with pager.open(":memory:", session="ro", context_window=12_000, log_reports=False) as p:
        p.assemble({"messages": [system("s"), user("go")]})
        cols = p.history.columns()
        with pytest.raises(ValueError):
            cols["tokens"][0] = 1  # a caller that changes a column copies it first (the L1 cut does)
        with pytest.raises(ValueError):
            p.history.task_column()[0] = False


# -- the planner's deferred scoring decides as the eager one did --------------------------------------


# 8 examples in the suite (15 in the full campaign, tests/sizes.py): the same random sessions; that rounds, tail
# rows and plain calls all occur is asserted by test_deferred_scoring_runs_for_rounds_and_tail_rows
@settings(max_examples=examples(8, 15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_deferred_heat_and_need_plan_as_computing_them_every_call(monkeypatch_plan, ops):
    # a window where an output can be over inline_max yet under budget / 4: the objective weighs it at the tail
    history = [system("You are a coding agent."), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="lazy", context_window=40_000, log_reports=False) as p:
        p.assemble({"messages": history})
        for n, op in enumerate(ops):
            history = _apply(p, history, op, n)


def test_deferred_scoring_runs_for_rounds_and_tail_rows(monkeypatch_plan):
    before = dict(monkeypatch_plan)
    history = [system("You are a coding agent."), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="lazy2", context_window=40_000, log_reports=False) as p:
        for n in range(14):
            history = _apply(p, history, ("step", 1, PATHS[n % 4], (2, 0, 1)[n % 3]), n)
    assert monkeypatch_plan["calls"] - before["calls"] == 14
    assert monkeypatch_plan["rounds"] > before["rounds"]  # heat and need for every row
    assert monkeypatch_plan["tail"] > before["tail"]  # need for the big outputs at the tail only
    assert monkeypatch_plan["none"] > before["none"]  # and calls that needed neither


@pytest.fixture(scope="module")
def monkeypatch_plan():
    """Run every paging plan twice: as the scheduler asks (deferred), and with heat and need computed first."""
    real = paging.plan
    seen = {"calls": 0, "rounds": 0, "tail": 0, "none": 0}

    def both(inp, cfg, prev=None):
        asked = []

        def counted(i, rows=None):
            asked.append(rows is None)
            return inp.score(i) if rows is None else inp.score(i, rows)

        lazy = real(attrs.evolve(inp, score=counted), cfg, prev)
        eager_inp = inp.scored()
        assert eager_inp.score is None and eager_inp.heat is not None
        eager = real(eager_inp, cfg, prev)
        assert lazy == eager
        seen["calls"] += 1
        seen["rounds" if True in asked else "tail" if asked else "none"] += 1
        return lazy

    mp = pytest.MonkeyPatch()
    mp.setattr(paging, "plan", both)
    yield seen
    mp.undo()


# -- the need table's gather ---------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 300), st.integers(0, 5000), st.integers(0, 2**31 - 1))
def test_need_expected_gathers_what_the_row_copy_read(n, clock, seed):
    rng = np.random.default_rng(seed)
    created = rng.integers(0, clock + 1, n)
    table = PageTable(
        page_id=np.arange(n), created=created, last_ref=created + rng.integers(0, 50, n),
        ref_count=np.zeros(n), tokens=rng.integers(0, 20_000, n),
        kind=rng.choice(list(KIND_CODE.values()), n), stale=np.zeros(n, dtype=bool), relevance=np.zeros(n),
    )
    got = NEEDS.expected(table, clock, 0.7)
    # the old formula: a whole cumulative row per page, then two reads from it
    from pager.core.heat import _MAX_AGE, _TOOL_CODES
    group = np.isin(table.kind, _TOOL_CODES).astype(np.int64)
    size = np.searchsorted(np.asarray(NEEDS.sizes), table.tokens, side="left").clip(0, len(NEEDS.sizes) - 1)
    age = np.clip(_age(clock, np.maximum(table.created, table.last_ref)), 0, _MAX_AGE).astype(np.int64)
    cum = NEEDS._cum[group, size]
    lo = np.take_along_axis(cum, (age + 1)[:, None], axis=1)
    hi = np.take_along_axis(cum, age[:, None] + np.asarray(HORIZONS)[None, :] + 1, axis=1)
    assert np.array_equal(got, np.clip((hi - lo) * 0.7, 0.0, None))


# -- the recorder's match ------------------------------------------------------------------------------


def test_same_prefix_is_one_comparison_and_falls_back_to_identity():
    history = [system("s"), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="match", context_window=12_000, log_reports=False) as p:
        for n in range(4):
            history = _apply(p, history, ("step", 1, PATHS[n], 1), n)
        rec = p._recorder
        assert rec.same_prefix(list(history)) == len(history)
        assert rec.same_prefix(list(history) + [user("more")]) == len(history)
        assert rec.same_prefix(json.loads(json.dumps(history))) == len(history)  # equal objects: same messages
        edited = list(history)
        edited[3] = {**edited[3], "content": "edited"}  # a replaced dict is an edit
        assert rec.same_prefix(edited) == 3
        assert rec.same_prefix(history[:4]) == 4
        assert rec.same_prefix([]) == 0
        # the recorded history matched from where identity stopped: an edit forks there, nothing before
        before, branch = list(p.history.hash), p.history.branch
        p.assemble({"messages": edited})
        assert p.history.branch != branch and p.history.hash[:3] == before[:3] and p.history.hash[3] != before[3]
        assert len(p.history) == len(edited)


def test_recall_text_comes_from_the_callers_messages_not_the_store(monkeypatch):
    history = [system("s"), user("fix compute_1 in src/app/config.py")]
    with pager.open(":memory:", session="recall", context_window=6_000, log_reports=False) as p:
        for n in range(10):
            history = _apply(p, history, ("step", 1, PATHS[n % 4], 2), n)
        reads, found = [], []
        real = type(p.store).message
        search = p._pools.search_recall

        def counted(store, pid):
            reads.append(pid)
            return real(store, pid)

        def spied(*args, **kwargs):
            found.extend(search(*args, **kwargs))
            return found

        monkeypatch.setattr(type(p.store), "message", counted)
        monkeypatch.setattr(p._pools, "search_recall", spied)
        # search even though no hit could be recalled this call (``PagingScheduler._may_recall``): the hits are the point
        monkeypatch.setattr(p._scheduler, "skip_idle_recall", False)
        history = history + [assistant("compute_3 in src/app/io.py again: value_3_1", call("z", "bash", command="ls")),
                             tool("z", "ok")]
        p.assemble({"messages": history})
        assert found, "the query finds old pages"
        assert reads == []
        for hit in found:
            assert hit.text == pager.core.messages.message_text(real(p.store, hit.page_id)[1])
