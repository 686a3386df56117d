"""End-to-end behaviour of the public API: open, assemble, observe, expand, pins."""

from __future__ import annotations

import orjson
import pytest

import pager
from pager.core import pairing
from pager.formats.openai_chat import validate
from pager.storage.sqlite import SCHEMA_VERSION, SQLiteStore
from pager.core.tokens import HeuristicCounter

from helpers import assistant, big_text, call, coding_session, system, tool, user
from sizes import size


class CountingCounter(HeuristicCounter):
    def __init__(self) -> None:
        super().__init__(4.0)
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def open_pager(tmp_path, **kw):
    kw.setdefault("context_window", 200_000)
    return pager.open(tmp_path / "ctx", session=kw.pop("session", "s1"), **kw)


def test_assemble_passes_other_keys_and_returns_valid_messages(tmp_path):
    history = coding_session(5)
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    with open_pager(tmp_path) as p:
        out = p.assemble({"model": "m", "messages": history, "tools": tools, "temperature": 0.2})
    assert out["model"] == "m" and out["temperature"] == 0.2 and out["tools"] == tools
    assert out["messages"] == history  # small history: nothing to demote
    validate(out["messages"])
    assert pairing.check(out["messages"]) == []


def test_replaying_the_same_history_records_nothing_twice(tmp_path):
    history = coding_session(6)
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
        first = p.last_report
        p.assemble({"messages": history})
        assert first.new_pages == len(history)
        assert p.last_report.new_pages == 0
        assert p.store.count_pages("s1") == len(history)


def test_divergent_history_forks_a_branch_and_keeps_the_old(tmp_path):
    history = coding_session(6)
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
        edited = [dict(m) for m in history]
        edited[4] = {**edited[4], "content": "an edited tool output"}
        p.assemble({"messages": edited})
        branches = p.store.branches("s1")
        assert len(branches) == 2
        old, new = branches
        assert new.parent == old.id and new.fork_seq == 4  # forked from the old branch at message 4
        old_ids = p.store.branch_page_ids(old.id)
        new_ids = p.store.branch_page_ids(new.id)
        assert old_ids[:4] == new_ids[:4] and old_ids[4] != new_ids[4]
        # the original message is still stored verbatim
        assert p.store.message(old_ids[4])[1] == history[4]
        assert p.store.count_pages("s1") == len(history) + (len(history) - 4)


def test_reopen_continues_without_rerecording(tmp_path):
    history = coding_session(4)
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history + [assistant("done")]})
        assert p.last_report.new_pages == 1
        assert p.options.context_window == 200_000


def test_token_counts_are_cached_per_page(tmp_path):
    counter = CountingCounter()
    history = coding_session(8)
    with open_pager(tmp_path, counter=counter) as p:
        p.assemble({"messages": history})
        after_first = counter.calls
        p.assemble({"messages": history})
        # the second call counts only the (absent) card: no page is counted again
        assert counter.calls == after_first


def test_file_pages_and_staleness(tmp_path):
    history = [
        system("sys"), user("task"),
        assistant(None, call("a", "bash", command="cat src/x.py")), tool("a", "v1 of x"),
        assistant(None, call("b", "Read", file_path="src/y.py")), tool("b", "y"),
        assistant(None, call("c", "bash", command="cat src/x.py")), tool("c", "v2 of x"),
        assistant(None, call("d", "bash", command="cat src/x.py | grep foo")), tool("d", "grep"),
    ]
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
        h = p.history
        assert h.kind[3] == "file" and h.path[3] == "src/x.py"
        assert h.kind[5] == "file" and h.path[5] == "src/y.py"
        assert h.kind[9] == "tool"  # a pipe is not a plain read
        assert h.stale[3] and not h.stale[7] and not h.stale[5]
        rows = dict(zip(p.store.branch_page_ids(h.branch), range(20)))
        stale = {r: s for r, s in p.store._db.execute(
            "SELECT p.seq, COALESCE(s.stale, p.stale) FROM pages p LEFT JOIN page_stats s ON s.id = p.id")}
        assert stale[3] == 1 and stale[7] == 0
        assert rows


def test_l1_too_big_raises_budget_error_with_amount(tmp_path):
    history = [system("x " * 3000), user("do it")]
    with open_pager(tmp_path, context_window=2_000, output_reserve=200) as p:
        with pytest.raises(pager.BudgetError) as err:
            p.assemble({"messages": history})
    assert err.value.over_by == err.value.l1_tokens - 1_800 > 0
    assert "over by" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_budget_never_exceeded_and_l1_always_present(tmp_path):
    # 60 steps in the suite (120 in the full campaign, tests/sizes.py): the history outgrows the window
    # within a few steps, so the suite's session already has dozens of rounds (asserted)
    history = coding_session(size(60, 120), output_lines=60)
    budget_window = 12_000
    rounds = 0
    with open_pager(tmp_path, context_window=budget_window, output_reserve=1_000,
                    high_watermark=6_000, low_watermark=3_000) as p:
        for n in range(3, len(history) + 1):
            if history[n - 1]["role"] != "tool":
                continue
            out = p.assemble({"messages": history[:n]})["messages"]
            assert p.last_report.tokens <= 11_000
            assert out[0] == history[0] and out[1] == history[1]
            assert pairing.check(out) == []
            rounds += p.last_report.round
    assert rounds >= 10


def test_big_tool_output_is_stubbed_and_expandable(tmp_path):
    text = big_text(900)  # well over 2,000 tokens
    history = [system("s"), user("task"), assistant(None, call("a", "bash", command="pytest")), tool("a", text)]
    for i in range(5):
        history += [assistant(f"next {i}", call(f"b{i}", "bash", command="ls")), tool(f"b{i}", "ok")]
    with open_pager(tmp_path, high_watermark=3_000, low_watermark=1_500, objective=False) as p:
        out = p.assemble({"messages": history})["messages"]
        stubbed = [m for m in out if m.get("tool_call_id") == "a"]
        assert len(stubbed) == 1
        stub = stubbed[0]["content"]
        assert stub.startswith("[pager: tool output stored off-prompt as pg:")
        assert text[:60] in stub and len(stub) < 600
        handle = stub.split(" as ")[1].split(" ")[0]
        assert p.expand(handle) == text
        assert p.expand(handle, 3, 4) == "".join(text.splitlines(keepends=True)[2:4])
        with pytest.raises(pager.HandleError):
            p.expand("pg:999-abcdef")
        assert p.last_report.pages_stubbed >= 1 and p.last_report.handles_issued >= 1


def test_prefix_is_byte_stable_between_rounds_and_rounds_are_batched(tmp_path):
    history = coding_session(150, output_lines=30)
    prev = None
    rounds = 0
    calls = 0
    with open_pager(tmp_path, high_watermark=12_000, low_watermark=4_000, recall_pages=0) as p:
        for n in range(4, len(history) + 1, 2):
            out = p.assemble({"messages": history[:n]})["messages"]
            calls += 1
            rep = p.last_report
            if rep.round:
                rounds += 1
            elif prev is not None:
                assert rep.prefix_kept and rep.changed_from is None
                old = [orjson.dumps(m) for m in prev]
                new = [orjson.dumps(m) for m in out]
                assert new[: len(old)] == old  # previous prompt + appended messages, byte for byte
            prev = out
    assert 1 <= rounds <= calls // 5


def test_report_is_logged_as_jsonl(tmp_path):
    with open_pager(tmp_path) as p:
        p.assemble({"messages": coding_session(3)})
        p.assemble({"messages": coding_session(4)})
        p.observe({"usage": {"prompt_tokens": 100, "completion_tokens": 7,
                             "prompt_tokens_details": {"cached_tokens": 64}}})
    lines = [orjson.loads(x) for x in (tmp_path / "ctx" / "reports.jsonl").read_bytes().splitlines()]
    kinds = [x["type"] for x in lines]
    assert kinds == ["assemble", "assemble", "usage"]
    first = lines[0]
    for key in ("layers", "pages_kept", "pages_stubbed", "pages_dropped", "prefix_kept", "changed_from", "elapsed_ms"):
        assert key in first
    assert set(first["layers"]) >= {"l1", "l2", "l3", "stubs"}
    assert lines[2]["cached_tokens"] == 64 and lines[2]["completion_tokens"] == 7


def test_observe_reads_anthropic_usage(tmp_path):
    with open_pager(tmp_path) as p:
        got = p.observe({"usage": {"input_tokens": 10, "cache_read_input_tokens": 80,
                                   "cache_creation_input_tokens": 5, "output_tokens": 3}})
    assert got == {"prompt_tokens": 95, "completion_tokens": 3, "cached_tokens": 80, "cache_write_tokens": 5}


def test_pins_go_into_l1_card(tmp_path):
    with open_pager(tmp_path) as p:
        p.pin("Never edit db/schema.sql without a migration")
        out = p.assemble({"messages": coding_session(2)})["messages"]
        assert out[2]["role"] == "user" and "Never edit db/schema.sql" in out[2]["content"]
        assert p.last_report.layers["l1"] > 0


@pytest.mark.parametrize(
    "messages, index, fragment",
    [
        ([{"content": "x"}], 0, "missing 'role'"),
        ([user("a"), tool("zz", "orphan")], 1, "answers no open call"),
        ([user("a"), {"role": "user", "content": 5}], 1, "content must be"),
        ([user("a"), {"role": "user", "content": "bad \ud800 text"}], 1, "surrogate"),
        ([user("a"), {"role": "wizard", "content": "x"}], 1, "unknown role"),
        ([user("a"), assistant(None, {"id": "x", "function": {"name": "f", "arguments": {}}})], 1, "JSON string"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_message(tmp_path, messages, index, fragment):
    with open_pager(tmp_path) as p:
        p.assemble({"messages": coding_session(2)})
        before = p.store.count_pages()
        with pytest.raises(pager.MessageError) as err:
            p.assemble({"messages": messages})
        assert err.value.index == index and fragment in str(err.value)
        assert isinstance(err.value, ValueError)
        assert p.store.count_pages() == before  # nothing recorded, nothing lost
        p.assemble({"messages": coding_session(3)})  # still usable


def test_request_without_messages_is_an_input_error(tmp_path):
    with open_pager(tmp_path) as p:
        with pytest.raises(pager.InputError):
            p.assemble({"model": "x"})


def test_fifty_megabyte_tool_output_is_accepted_and_stubbed(tmp_path):
    huge = ("0123456789abcdef" * 64 + "\n") * (50 * 1024 * 1024 // 1025)
    history = [system("s"), user("run it"), assistant(None, call("a", "bash", command="make")), tool("a", huge)]
    with open_pager(tmp_path) as p:
        out = p.assemble({"messages": history})["messages"]
        assert out[-1]["tool_call_id"] == "a" and len(out[-1]["content"]) < 1_000
        assert p.last_report.tokens <= p.options.budget
        handle = out[-1]["content"].split(" as ")[1].split(" ")[0]
        assert len(p.expand(handle)) == len(huge)


def test_options_are_validated(tmp_path):
    with pytest.raises(pager.ConfigError):
        open_pager(tmp_path, low_watermark=10, high_watermark=5)
    with pytest.raises(pager.ConfigError):
        open_pager(tmp_path, context_window=-1)
    with pytest.raises(pager.ConfigError):
        open_pager(tmp_path, no_such_option=1)
    with pytest.raises(pager.ConfigError):
        open_pager(tmp_path, policy="nope")


def test_closed_pager_refuses_work(tmp_path):
    p = open_pager(tmp_path)
    p.close()
    p.close()  # idempotent
    with pytest.raises(pager.PagerError):
        p.assemble({"messages": [user("x")]})


def test_store_records_schema_version(tmp_path):
    with open_pager(tmp_path):
        pass
    store = SQLiteStore(tmp_path / "ctx")
    assert store.setting("schema_version") == str(SCHEMA_VERSION)
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.set_setting("schema_version", "99")
    store.close()
    with pytest.raises(pager.SchemaError):
        SQLiteStore(tmp_path / "ctx")


def test_big_output_is_full_only_in_the_newest_step(tmp_path):
    text = big_text(900)  # over inline_max (2,000 tokens)
    history = [system("s"), user("task"), assistant(None, call("a", "bash", command="pytest")), tool("a", text)]
    with open_pager(tmp_path) as p:
        first = p.assemble({"messages": history})["messages"]
        assert first[-1]["content"] == text  # the model reads what it asked for
        history += [assistant("next", call("b", "bash", command="ls")), tool("b", "ok")]
        second = p.assemble({"messages": history})["messages"]
        assert second[3]["tool_call_id"] == "a" and second[3]["content"].startswith("[pager: tool output stored")
        assert second[:3] == first[:3]
        assert p.last_report.changed_from == 3  # only the old tail changed: cheap for the cache
    with open_pager(tmp_path / "other", inline_max=0) as p:
        p.assemble({"messages": history})
        out = p.assemble({"messages": history})["messages"]
        assert out[3]["content"] == text  # inline_max=0: kept until a round


def test_pages_carry_task_labels_that_follow_user_turns(tmp_path):
    history = coding_session(2) + [user("now a second task: update README.md")]
    history += [assistant(None, call("z", "bash", command="cat README.md")), tool("z", "readme")]
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
        labels = p.history.labels
        assert labels[2] == ("task:1",)
        assert labels[6] == ("task:6",) and labels[-1] == ("task:6",)
        assert p.history.task == 6
        stored = {r[0]: r[1] for r in p.store._db.execute("SELECT seq, labels FROM pages")}
        assert stored[7] == '["task:6"]'


def test_changed_from_is_exact_after_a_rewind(tmp_path):
    history = coding_session(6)
    with open_pager(tmp_path) as p:
        p.assemble({"messages": history})
        edited = [dict(m) for m in history]
        edited[6] = {**edited[6], "content": "changed output"}
        p.assemble({"messages": edited})
        assert p.last_report.changed_from == 6 and not p.last_report.prefix_kept


def test_the_active_task_follows_the_latest_user_message(tmp_path):
    with open_pager(tmp_path) as p:
        p.pin("keep parse_config backwards compatible")
        history = coding_session(2)
        p.assemble({"messages": history})
        focus = _focus_terms(p, history)
        assert "parse_config" in focus and "README.md" not in focus
        history += [user("switch: update README.md")]
        p.assemble({"messages": history})
        assert {"parse_config", "README.md"} <= _focus_terms(p, history)


def _focus_terms(p, history):
    from pager.schedulers.paging import PagingCall

    call = PagingCall(history=p.history, messages=history, pins=p.pins(), notes=p.notes(),
                      pin_terms=p._mirror.pin_terms, tools_tokens=0, prev=None, prev_out=None)
    return p._scheduler._focus_terms(call)
