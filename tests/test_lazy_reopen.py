"""A reopen in O(what is read): the stored wire digest vouches for a history, converted when read.

The first call after a reopen resends the whole history as new objects. An
Anthropic or Responses ``Pager`` matches its items against the wire digest
stored with the branch (``pager.core.digest``) and hands the scheduler a lazy
head (``pager.formats.lazy``): an item is converted when one of its rows is
read.
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
import pager.formats.responses_lazy as rl
from pager.core.digest import WIRE_LAG, RunningDigest, StoredDigest, WireRun, digest_wire
from pager.errors import MessageError
from pager.formats.anthropic_blocks import convert_message, neutral_count
from pager.formats.base import get_format
from pager.formats.export import export_request
from pager.formats.lazy import LazyRows, Pending, lazy_head
from pager.lab.synth import generate_session
from pager.recording import Recorder

OPTS = {"context_window": 6_000, "log_reports": False}  # most of the history out of the prompt
FMT = "anthropic-messages"
RESP = "openai-responses"
MARK = {"type": "ephemeral"}
FORMATS = [FMT, RESP]


def _session(seed: int, steps: int, fmt: str = FMT) -> tuple[Any, list[dict[str, Any]]]:
    _h, chat = generate_session(seed, steps)
    neutral = get_format("openai-chat").to_messages({"model": "m", "messages": chat}).messages
    body = export_request(neutral, fmt, request={"model": "m"})
    return body.get("system", body.get("instructions")), body["messages" if fmt == FMT else "input"]


def _marked(items: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """Return ``items`` as a client resends them: Claude Code marks the newest message's last block (a new
    object each call); an Agents SDK client sends the newest item with the ``id`` and ``status`` echoed back."""
    last = copy.deepcopy(items[-1])
    if fmt == RESP:
        last.update(id=f"it_{len(items)}", status="completed")
        return [*items[:-1], last]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = MARK
    return [*items[:-1], last]


def _request(system: Any, items: list[dict[str, Any]], fmt: str = FMT) -> dict[str, Any]:
    sent = orjson.loads(orjson.dumps(_marked(items, fmt)))
    if fmt == RESP:
        req: dict[str, Any] = {"model": "m", "input": sent}
        if system is not None:
            req["instructions"] = system
        return req
    req = {"model": "m", "max_tokens": 64, "messages": sent}
    if system is not None:
        req["system"] = system
    return req


def _ends(items: list[dict[str, Any]]) -> list[int]:
    """The growing calls' lengths: before each assistant turn (an item that is not a call's output or a call)."""
    def starts(i: int) -> bool:
        it, before = items[i], items[i - 1]
        return it.get("role") == "assistant" and before.get("role") != "assistant" and before.get("type") in (
            None, "message", "function_call_output")
    return [k for k in range(2, len(items)) if starts(k)] + [len(items)]


def _recorded(tmp_path: Any, fmt: str = FMT, seed: int = 3, steps: int = 40, cut: float = 0.8
              ) -> tuple[str, Any, list[Any], int]:
    """Record a session's growing calls up to ``cut`` of it in a store; return it, the system, the items, k."""
    system, items = _session(seed, steps, fmt)
    ends = _ends(items)
    upto = ends[int(len(ends) * cut)]
    with pager.open(tmp_path / "store", session="s", **OPTS) as p:
        for k in ends:
            if k > upto:
                break
            p.assemble(_request(system, items[:k], fmt))
    return str(tmp_path / "store"), system, items, upto


_RECORDED: dict[tuple[str, Any], tuple[str, Any, list[Any], int]] = {}


@pytest.fixture
def recorded(tmp_path_factory: pytest.TempPathFactory, tmp_path: Any) -> Any:
    """``_recorded`` under the options as they are now (``OPTS``), recorded once per format and L1 cap
    (a copy for each test)."""
    def get(fmt: str) -> tuple[str, Any, list[Any], int]:
        key = (fmt, OPTS.get("l1_cap"))
        if key not in _RECORDED:
            _RECORDED[key] = _recorded(tmp_path_factory.mktemp(f"recorded-{fmt}"), fmt)
        store, system, items, upto = _RECORDED[key]
        shutil.copytree(store, tmp_path / "store")
        return str(tmp_path / "store"), system, items, upto

    return get


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the items converted (eagerly or when a lazy row is read): Anthropic messages, Responses groups."""
    seen = [0]

    def counting(module: Any, name: str) -> None:
        real = getattr(module, name)

        def counted(*args: Any) -> Any:
            seen[0] += 1
            return real(*args)

        monkeypatch.setattr(module, name, counted)

    import pager.formats.openai_responses as ro

    counting(am, "convert_message")
    for name in ("run_message", "output_message"):
        counting(ro, name)
        counting(rl, name)
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
            for name in FORMATS:  # a new process's memos: nothing converted yet
                m.setattr(get_format(name), "_memo", type(get_format(name)._memo)())
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


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("cap", [None, 60])
def test_a_reopened_history_converts_what_is_read_and_gives_the_same_calls(tmp_path, conversions, monkeypatch,
                                                                           cap, fmt, recorded):
    """``cap``: an L1 cap the system prompt is over (the planner cuts it and joins the rest after it)."""
    if cap is not None:
        monkeypatch.setitem(OPTS, "l1_cap", cap)
    store, system, items, upto = recorded(fmt)
    ends = [k for k in _ends(items) if k >= upto]
    calls = [_request(system, items[:k], fmt) for k in ends]
    lazy, eager, first = _both(tmp_path, store, calls, conversions, monkeypatch)
    assert lazy == eager
    assert first[0] * 3 < first[1], first  # the lazy path converts the few items whose rows are read, not all


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", ["edited", "system", "behind", "unmarked", "remarked"])
def test_a_history_the_wire_digest_does_not_vouch_for_is_matched_as_before(tmp_path, conversions, monkeypatch,
                                                                           change, fmt, recorded):
    store, system, items, upto = recorded(fmt)
    now = copy.deepcopy(items[:upto])
    later = items[upto: upto + 4]
    key = "messages" if fmt == FMT else "input"
    if change == "edited":  # an edit in the middle: no match, a fork where it differs
        if fmt == FMT:
            text = next(m for m in now[len(now) // 2:] if m["role"] == "user" and isinstance(m["content"], list)
                        and m["content"][0]["type"] == "tool_result")
            text["content"][0]["content"] = "rewritten"
        else:
            next(m for m in now[len(now) // 2:] if m.get("type") == "function_call_output")["output"] = "rewritten"
    elif change == "system":
        system = "another system prompt"
    elif change == "behind":  # a request overtaken by a newer one: a strict prefix of the recorded history
        now = now[: _ends(now)[-3]]
        later = []
    first = _request(system, now, fmt)
    if change == "unmarked":  # the mark gone from the newest item: the same history
        first[key][-1] = now[-1]
    elif change == "remarked":  # an older item marked as well (several marks; an item sent with its id)
        item = first[key][len(now) // 3]
        if fmt == RESP:
            item.update(id="it_old", status="completed")
        elif isinstance(item["content"], list):
            item["content"][0]["cache_control"] = MARK
    calls = [first, _request(system, now + later, fmt)]
    lazy, eager, counts = _both(tmp_path, store, calls, conversions, monkeypatch)
    assert lazy == eager
    if change in ("unmarked", "remarked"):
        assert counts[0] < upto // 3, counts  # transport fields: still vouched for


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_reopen_after_a_lazy_reopen_is_lazy_again(tmp_path, conversions, fmt, recorded):
    """The first session after a reopen records the wire digest of its items as a fresh one does."""
    store, system, items, upto = recorded(fmt)
    ends = [k for k in _ends(items) if k > upto]
    for k in ends[:2]:
        before = conversions[0]
        with pager.open(store, session="s", **OPTS) as p:
            p.assemble(_request(system, items[:k], fmt))
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


def _responses_items(seed: int) -> tuple[Any, list[dict[str, Any]]]:
    """A Responses session with reasoning items before some calls and a message after some outputs."""
    system, items = _session(seed, 30, RESP)
    out: list[dict[str, Any]] = []
    for n, it in enumerate(items):
        if it.get("type") == "function_call" and n % 3 == 0:
            out.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": f"r{n}"}]})
        out.append(it)
        after = items[n + 1] if n + 1 < len(items) else {}
        if it.get("type") == "function_call_output" and n % 4 == 0 and after.get("type") != "function_call_output":
            out.append({"role": "user", "content": f"and {n}"})
    return system, out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_vouched_responses_head_holds_the_rows_and_state_of_converting_it(seed):
    """At every item count: the lazy head's rows and memo state are the eager conversion's, wherever it ends."""
    system, items = _responses_items(seed)
    fmt = get_format(RESP)
    for n in range(1, len(items) + 1):
        heads = fmt.new_heads()  # type: ignore[attr-defined]
        eager = fmt.to_messages({"model": "m", "instructions": system, "input": items[:n]}, heads=heads)
        (_msgs, _flat, _ends, state), = heads._d.values()
        wire = digest_wire(items, n, transport=rl.ITEM_KEYS)
        assert wire is not None
        vouch = StoredDigest(None, RESP, n, len(eager.messages), wire.hexdigest())
        lead = eager.messages[0]
        made = rl.vouched_head(RESP, items, lead, vouch)
        assert made is not None
        rows, got, run = made
        assert list(rows) == list(eager.messages) and run.rows == n
        assert got[0] == state[0] and got[1] == state[1] and got[2] == state[2], n


@pytest.mark.parametrize("seed", [1, 2])
def test_the_responses_wire_digest_ends_where_a_group_starts_and_counts_its_rows(seed):
    """What a call stores vouches for a head a reopen can leave unconverted: its rows are its items' groups."""
    system, items = _responses_items(seed)
    fmt = get_format(RESP)
    heads = fmt.new_heads()  # type: ignore[attr-defined]
    for n in range(1, len(items) + 1):
        conv = fmt.to_messages({"model": "m", "instructions": system, "input": items[:n]}, heads=heads)
        wire = conv.wire
        assert wire is not None and wire.run.rows <= max(0, n - WIRE_LAG)
        w = wire.run.rows
        if w:
            whole = fmt.to_messages({"model": "m", "instructions": system, "input": items[:w]})
            assert wire.rows == len(whole.messages)  # the rows of the first w items, the lead included
            assert list(conv.messages[: wire.rows]) == list(whole.messages)  # w ends a group
            assert wire.run.hexdigest() == digest_wire(items, w, transport=rl.ITEM_KEYS).hexdigest()  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_output_for_a_call_answered_before_the_reopen_is_refused_as_before(tmp_path, monkeypatch, fmt, recorded):
    store, system, items, upto = recorded(fmt)
    now = items[:upto]
    if fmt == RESP:
        old = next(it for it in now if it.get("type") == "function_call_output")
        bad = [*now, {"role": "assistant", "content": "done"}, dict(old)]
    else:
        old = next(m for m in now if m["role"] == "user" and isinstance(m["content"], list))
        bad = [*now, {"role": "assistant", "content": "done"}, {"role": "user", "content": old["content"][:1]}]
    errors = []
    for mode in ("lazy", "eager"):
        where = tmp_path / mode
        shutil.copytree(store, where)
        with monkeypatch.context() as m:
            if mode == "eager":
                m.setattr(Recorder, "vouch", lambda self: None)
            with pager.open(where, session="s", **OPTS) as p:
                with pytest.raises(Exception) as err:
                    p.assemble(_request(system, bad, fmt))
                errors.append((type(err.value), str(err.value)))
                p.assemble(_request(system, now, fmt))  # the corrected request goes through
    assert errors[0] == errors[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_rolled_back_call_after_a_lazy_reopen_leaves_calls_that_compare_no_row_by_value(tmp_path, monkeypatch, fmt,
                                                                                       recorded):
    """The recorder knows a lazy row by its stand-in: after a rollback it matches again, then by identity."""
    store, system, items, upto = recorded(fmt)
    ends = [k for k in _ends(items) if k > upto]
    compared = [0]
    real_eq = Pending.__eq__

    def counted(self: Pending, other: object) -> bool:
        compared[0] += 1
        return real_eq(self, other)

    monkeypatch.setattr(Pending, "__eq__", counted)
    with pager.open(store, session="s", **OPTS) as p:
        p.assemble(_request(system, items[:upto], fmt))
        with pytest.raises(RuntimeError):
            p._assemble(_request(system, items[:ends[0]], fmt), ready=_fail)  # rolled back before its COMMIT
        for k in ends[:3]:
            compared[0] = 0
            p.assemble(_request(system, items[:k], fmt))
            assert p.last_report.new_pages > 0
        assert compared[0] < 8, compared  # the last call: no row compared by value (a few the client re-marked)


def _fail(_out: Any) -> None:
    raise RuntimeError("the caller failed before the COMMIT")


def test_a_history_holding_an_sdk_object_is_not_digested_again_every_call(tmp_path, monkeypatch):
    """orjson cannot encode the anthropic SDK's objects: no wire digest, tried once while the head is the same."""
    from anthropic.types import Message, TextBlock, Usage

    tried = [0]
    real = am.digest_wire

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        tried[0] += out is None  # a try that met the SDK object (one over fewer items encodes nothing)
        return out

    monkeypatch.setattr(am, "digest_wire", counted)
    system, items = _session(5, 12)
    reply = Message(id="msg_1", type="message", role="assistant", content=[TextBlock(type="text", text="noted")],
                    model="m", stop_reason="end_turn", stop_sequence=None,
                    usage=Usage(input_tokens=1, output_tokens=1))  # a response appended as it came
    items = [items[0], reply, {"role": "user", "content": "go on"}, *items[1:]]
    sent: list[Any] = []
    with pager.open(tmp_path / "store", session="s", **OPTS) as p:
        for k in _ends(items):
            sent.extend(items[len(sent):k])
            p.assemble({"model": "m", "max_tokens": 64, "system": system, "messages": sent})
        assert p.history.digest is None or StoredDigest.parse(p.history.digest[1]).wire is None
    assert 0 < tried[0] <= 1, tried


_MARKABLE = st.lists(st.one_of(_TEXT, _RESULT), min_size=1, max_size=3)


@settings(max_examples=examples(60, 600), deadline=None)
@given(st.lists(st.tuples(_MARKABLE, st.sampled_from(["none", "item", "block", "inner"])), min_size=1, max_size=12),
       st.integers(1, 5))
def test_a_wire_digest_is_its_items_bytes_without_the_marks_clients_move(specs, chunk):
    """Whatever the chunking, the digest is of each item's bytes, marks on items and blocks left out."""
    import hashlib

    import pager.core.digest as dg

    plain, marked = [], []
    for blocks, where in specs:
        item = {"role": "user", "content": copy.deepcopy(blocks)}
        plain.append(copy.deepcopy(item))
        if where == "item":
            item["cache_control"] = MARK
        elif where == "block":
            item["content"][-1]["cache_control"] = MARK
        elif where == "inner":
            inner = next((b for b in item["content"] if isinstance(b.get("content"), list) and b["content"]), None)
            if inner is not None:
                inner["content"][0]["cache_control"] = MARK
        marked.append(item)
    whole = hashlib.sha256(b",".join(dg.wire_bytes(x) for x in plain)).hexdigest()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dg, "CHUNK", chunk)
        assert digest_wire(plain, len(plain)).hexdigest() == whole  # type: ignore[union-attr]
        assert digest_wire(marked, len(marked)).hexdigest() == whole  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_call_digests_only_its_new_items(tmp_path, monkeypatch, fmt):
    """The wire digest is extended a call, also when the client changed its newest item (a mark, an id)."""
    digested: list[int] = []
    module = am if fmt == FMT else rl
    real = module.digest_wire

    def counted(items: Any, n: int, run: Any = None, **kw: Any) -> Any:
        digested.append(n - (run.rows if run is not None else 0))
        return real(items, n, run, **kw)

    monkeypatch.setattr(module, "digest_wire", counted)
    system, items = _session(3, 40, fmt)
    with pager.open(tmp_path / "store", session="s", **OPTS) as p:
        for k in _ends(items):
            p.assemble(_request(system, items[:k], fmt))
    assert len(digested) > 20 and max(digested[5:]) <= 8, digested
