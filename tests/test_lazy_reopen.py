"""A reopen in O(what is read): the stored wire digest vouches for an Anthropic history, converted when read.

The first call after a reopen resends the whole history as new objects. An
Anthropic ``Pager`` matches its items against the wire digest stored with the
branch (``pager.core.digest``) and hands the scheduler a lazy head
(``pager.formats.lazy``): an item is converted when one of its rows is read.
Each test drives a reopened store twice, once so and once with the wire
digest ignored (every item converted, the path every reopen took before), with
the same calls, and asserts the same prompts; and counts the items converted.
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

import pager
import pager.formats.anthropic_messages as am
from pager.core.digest import RunningDigest, StoredDigest, WireRun, digest_wire
from pager.errors import MessageError
from pager.formats.anthropic_blocks import convert_message, neutral_count
from pager.formats.base import get_format
from pager.formats.export import export_request
from pager.formats.lazy import LazyRows, Pending, lazy_head
from pager.lab.synth import generate_session
from pager.recording import Recorder

OPTS = {"context_window": 6_000, "log_reports": False}  # most of the history out of the prompt
FMT = "anthropic-messages"
MARK = {"type": "ephemeral"}


def _session(seed: int, steps: int) -> tuple[Any, list[dict[str, Any]]]:
    _h, chat = generate_session(seed, steps)
    neutral = get_format("openai-chat").to_messages({"model": "m", "messages": chat}).messages
    body = export_request(neutral, FMT, request={"model": "m"})
    return body.get("system"), body["messages"]


def _marked(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``items`` as Claude Code sends them: the newest message's last block marked (a new object)."""
    last = copy.deepcopy(items[-1])
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = MARK
    return [*items[:-1], last]


def _request(system: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    req: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": orjson.loads(orjson.dumps(_marked(items)))}
    if system is not None:
        req["system"] = system
    return req


def _ends(items: list[dict[str, Any]]) -> list[int]:
    return [k for k in range(2, len(items)) if items[k]["role"] == "assistant"] + [len(items)]


def _recorded(tmp_path: Any, seed: int = 3, steps: int = 40, cut: float = 0.8) -> tuple[str, Any, list[Any], int]:
    """Record a marked session's growing calls up to ``cut`` of it in a store; return it, the system, the items, k."""
    system, items = _session(seed, steps)
    ends = _ends(items)
    upto = ends[int(len(ends) * cut)]
    with pager.open(tmp_path / "store", session="s", **OPTS) as p:
        for k in ends:
            if k > upto:
                break
            p.assemble(_request(system, items[:k]))
    return str(tmp_path / "store"), system, items, upto


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the Anthropic items converted (eagerly or when a lazy row is read)."""
    seen = [0]
    real = am.convert_message

    def counted(i: int, msg: Any) -> Any:
        seen[0] += 1
        return real(i, msg)

    monkeypatch.setattr(am, "convert_message", counted)
    return seen


def _both(tmp_path: Any, store: str, calls: list[dict[str, Any]], conversions: list[int],
          monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], list[int]]:
    """Run ``calls`` on two copies of ``store`` reopened: lazily, and with the wire digest ignored.

    Returns both runs' outputs (and reports) and the items each first call converted.
    """
    runs: list[list[Any]] = []
    first: list[int] = []
    for mode in ("lazy", "eager"):
        where = tmp_path / mode
        shutil.copytree(store, where)
        with monkeypatch.context() as m:
            if mode == "eager":
                m.setattr(Recorder, "vouch", lambda self: None)
            with pager.open(where, session="s", **OPTS) as p:
                out = []
                for i, req in enumerate(calls):
                    before = conversions[0]
                    out.append((p.assemble(req), p.last_report.new_pages, p.last_report.behind,
                                p.history.branch, list(p.history.hash)))
                    if i == 0:
                        first.append(conversions[0] - before)
        runs.append(out)
    return runs[0], runs[1], first


@pytest.mark.parametrize("cap", [None, 60])
def test_a_reopened_anthropic_history_converts_what_is_read_and_gives_the_same_calls(tmp_path, conversions,
                                                                                     monkeypatch, cap):
    """``cap``: an L1 cap the system prompt is over (the planner cuts it and joins the rest after it)."""
    if cap is not None:
        monkeypatch.setitem(OPTS, "l1_cap", cap)
    store, system, items, upto = _recorded(tmp_path)
    ends = [k for k in _ends(items) if k >= upto]
    lazy, eager, first = _both(tmp_path, store, [_request(system, items[:k]) for k in ends], conversions, monkeypatch)
    assert lazy == eager
    assert first[1] > upto * 3 // 4  # the old path converts every item (but for the format's memo's hits)
    assert first[0] < upto // 3, first  # the lazy one the few whose rows are read


@pytest.mark.parametrize("change", ["edited", "system", "behind", "unmarked", "remarked"])
def test_a_history_the_wire_digest_does_not_vouch_for_is_matched_as_before(tmp_path, conversions, monkeypatch,
                                                                           change):
    store, system, items, upto = _recorded(tmp_path)
    now = copy.deepcopy(items[:upto])
    later = items[upto: upto + 4]
    if change == "edited":  # an edit in the middle: no match, a fork where it differs
        text = next(m for m in now[len(now) // 2:] if m["role"] == "user" and isinstance(m["content"], list)
                    and m["content"][0]["type"] == "tool_result")
        text["content"][0]["content"] = "rewritten"
    elif change == "system":
        system = "another system prompt"
    elif change == "behind":  # a request overtaken by a newer one: a strict prefix of the recorded history
        now = now[: len(now) - 6]
        while now[-1]["role"] != "user":
            now.pop()
        later = []
    first = _request(system, now)
    if change == "unmarked":  # the mark gone from the newest message: the same history
        first["messages"][-1] = now[-1]
    elif change == "remarked":  # an older message marked as well (a client with several marks)
        block = first["messages"][len(now) // 3]
        if isinstance(block["content"], list):
            block["content"][0]["cache_control"] = MARK
    calls = [first, _request(system, now + later)]
    lazy, eager, counts = _both(tmp_path, store, calls, conversions, monkeypatch)
    assert lazy == eager
    if change in ("unmarked", "remarked"):
        assert counts[0] < upto // 3, counts  # cache marks are transport: still vouched for


def test_a_reopen_after_a_lazy_reopen_is_lazy_again(tmp_path, conversions):
    """The first session after a reopen records the wire digest of its items as a fresh one does."""
    store, system, items, upto = _recorded(tmp_path)
    ends = [k for k in _ends(items) if k > upto]
    for k in ends[:2]:
        before = conversions[0]
        with pager.open(store, session="s", **OPTS) as p:
            p.assemble(_request(system, items[:k]))
            assert p.last_report.new_pages > 0
        assert conversions[0] - before < k // 3


# -- the parts -------------------------------------------------------------------------------------------------

_TEXT = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)})
_RESULT = st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.sampled_from(["a", "b"]),
                                 "content": st.one_of(st.text(max_size=5), st.lists(_TEXT, max_size=2))})
_IMAGE = st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}})
_USE = st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.sampled_from(["a", "b"]),
                              "name": st.just("read"), "input": st.dictionaries(st.just("k"), st.integers())})
_THINK = st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.text(max_size=5),
                                "signature": st.just("s")})
_USER = st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(
    st.text(max_size=5), st.lists(st.one_of(_TEXT, _RESULT, _IMAGE), min_size=1, max_size=4))})
_ASSISTANT = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(
    st.text(max_size=5), st.lists(st.one_of(_TEXT, _USE, _THINK), max_size=4))})


@settings(max_examples=examples(150, 1500), deadline=None)
@given(st.one_of(_USER, _ASSISTANT))
def test_neutral_count_is_the_number_of_messages_a_conversion_makes(msg):
    try:
        made = convert_message(0, msg)
    except MessageError:
        return  # never vouched for: a message the conversion refuses was never recorded
    assert neutral_count(msg) == len(made)


@settings(max_examples=examples(60, 600), deadline=None)
@given(st.lists(st.one_of(_USER, _ASSISTANT), max_size=8), st.data())
def test_a_lazy_head_reads_as_the_eager_conversion(msgs, data):
    try:
        eager = [n for i, m in enumerate(msgs) for n in convert_message(i, m)]
    except MessageError:
        return
    lead = [{"role": "system", "content": "s"}]
    made = lazy_head(lead, msgs, neutral_count, convert_message)
    assert made is not None
    rows, ends = made
    want = lead + eager
    assert len(rows) == len(want) and ends[-1] == len(want) and ends[0] == 1
    # any order of reads gives the same rows; the slots keep their stand-ins
    for i in data.draw(st.permutations(range(len(want)))):
        assert rows[i] == want[i]
    assert list(rows) == want and rows[1:] == want[1:] and list(reversed(rows)) == want[::-1]
    assert rows == want and want == rows and rows.copy() == want
    assert isinstance(rows[1:], LazyRows)
    assert list(rows + [{"role": "user", "content": "x"}]) == want + [{"role": "user", "content": "x"}]
    assert list([{"role": "user", "content": "x"}] + rows) == [{"role": "user", "content": "x"}] + want
    if len(want) > 1:
        assert type(list.__getitem__(rows, 1)) is Pending
        assert want[-1] in rows
        assert rows.pop() == want[-1]


def test_a_lazy_head_is_refused_for_an_item_it_cannot_count():
    class Sdk:
        role = "user"
        content = "x"

    assert lazy_head([], [{"role": "user", "content": "x"}, Sdk()], neutral_count, convert_message) is None


def test_the_stored_digest_text_round_trips_and_reads_older_columns():
    run = RunningDigest()
    run.add(b"{}")
    wire = digest_wire([{"role": "user", "content": "x"}], 1)
    assert wire is not None
    both = StoredDigest.of(run, WireRun(FMT, wire, 2))
    assert StoredDigest.parse(both.text()) == both
    assert both.wire_items == 1 and both.wire_rows == 2 and both.canonical == run.hexdigest()
    only_wire = StoredDigest.of(None, WireRun(FMT, wire, 2))
    assert StoredDigest.parse(only_wire.text()) == only_wire and only_wire.canonical is None
    assert StoredDigest.parse(run.hexdigest()) == StoredDigest(run.hexdigest())  # a column before wire digests
    assert StoredDigest.of(None, None).text() is None and StoredDigest.parse(None) == StoredDigest(None)


def test_a_wire_digest_ignores_cache_marks_and_sees_everything_else():
    a = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    b = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": MARK}]}]
    c = [{"role": "user", "content": [{"type": "text", "text": "y"}]}]
    da, db, dc = (digest_wire(x, 1) for x in (a, b, c))
    assert da is not None and db is not None and dc is not None
    assert da.hexdigest() == db.hexdigest() != dc.hexdigest()
    grown = digest_wire(a + c, 2, digest_wire(a, 1))
    assert grown is not None and grown.hexdigest() == digest_wire(a + c, 2).hexdigest()  # type: ignore[union-attr]
