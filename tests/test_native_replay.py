"""Importers for original agent logs, and the native-format cache billing."""

from __future__ import annotations

import orjson
import pytest

from pager.lab.replay.importers import claude_code, detect_log, load_native, responses_log
from pager.lab.replay.cache_model import AnthropicPricing, OpenAIPricing, Prompt, bill
from pager.lab.replay.native import replay_session
from pager.core.tokens import default_counter


def _line(kind: str, message: dict, **extra) -> dict:
    return {"type": kind, "sessionId": "s-1", "uuid": extra.pop("uuid", "u"), "message": message, **extra}


def claude_log(tmp_path):
    lines = [
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        _line("user", {"role": "user", "content": "start the server"}),
        # one assistant message streamed as three lines, with two parallel calls
        _line("assistant", {"id": "msg_1", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "plan", "signature": "sig"}]}),
        _line("assistant", {"id": "msg_1", "role": "assistant", "content": [
            {"type": "tool_use", "id": "tu_a", "name": "Bash", "input": {"command": "ls"}}]}),
        {"type": "progress", "data": {}, "toolUseID": "tu_a"},
        _line("assistant", {"id": "msg_1", "role": "assistant", "content": [
            {"type": "tool_use", "id": "tu_b", "name": "Read", "input": {"file_path": "a.py"}}]}),
        # results arrive out of order, one line each, plus an orphan
        _line("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_b", "content": "B"}]}),
        _line("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_a", "content": "A"}]}),
        _line("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_gone", "content": "?"}]}),
        _line("assistant", {"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": "done"}]}),
        {"type": "system", "subtype": "local_command", "content": "x"},
    ]
    path = tmp_path / "cc.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    return path


def test_claude_code_import_joins_streamed_lines_and_orders_results(tmp_path):
    s = claude_code(claude_log(tmp_path))
    assert [m["role"] for m in s.history] == ["user", "assistant", "user", "assistant"]
    assert [b["type"] for b in s.history[1]["content"]] == ["thinking", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in s.history[2]["content"]] == ["tu_a", "tu_b"]
    assert s.header["dropped_results"] == 1
    assert s.turns() == [1, 3]
    assert detect_log(tmp_path / "cc.jsonl") == "claude-code"
    assert load_native(tmp_path / "cc.jsonl").format == "anthropic-messages"


def test_responses_log_import_reads_codex_rollouts(tmp_path):
    lines = [
        {"type": "session_meta", "payload": {"id": "r1"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "hi"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "call_id": "c1", "name": "sh",
                                              "arguments": "{}"}},
        {"type": "event_msg", "payload": {}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "ok"}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": "done"}]}},
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    s = responses_log(path)
    assert s.format == "openai-responses" and len(s.history) == 4
    assert s.turns() == [1, 3]
    assert s.request(3)["input"][-1]["type"] == "function_call_output"
    assert detect_log(path) == "responses"


def _prompt(tokens, marks=(), chain=None):
    chain = chain or tuple(bytes([i]) for i in range(len(tokens)))
    return Prompt(chain=tuple(chain), tokens=tuple(tokens), marks=tuple(marks))


def test_anthropic_billing_reads_only_what_a_mark_wrote():
    pricing = AnthropicPricing(min_tokens=100)
    first = _prompt([100] * 5, marks=[4])
    second = _prompt([100] * 8, marks=[7])  # appends 3 blocks: the lookback finds block 4
    unmarked = _prompt([100] * 9)
    bills = bill([first, second, unmarked], pricing)
    assert (bills[0].read, bills[0].write) == (0, 500)
    assert (bills[1].read, bills[1].write) == (500, 300)
    assert bills[1].cost == pytest.approx(500 * 0.1 + 300 * 1.25)
    assert (bills[2].read, bills[2].write, bills[2].cost) == (0, 0, 900)


def test_anthropic_billing_lookback_and_minimum():
    pricing = AnthropicPricing(min_tokens=100, lookback=20)
    first = _prompt([10] * 30, marks=[5])  # 60 tokens: under the minimum, nothing written
    far = _prompt([10] * 30, marks=[29])
    assert bill([first, far], pricing)[1].read == 0
    a = _prompt([10] * 12, marks=[11])
    b = _prompt([10] * 40, marks=[39])  # 28 blocks past the entry: beyond the lookback
    c = _prompt([10] * 40, marks=[11, 39])  # the previous prompt's end marked: read
    assert bill([a, b], pricing)[1].read == 0
    assert bill([a, c], pricing)[1].read == 120


def test_openai_billing_minimum_and_steps():
    pricing = OpenAIPricing(discount=0.5)
    a = _prompt([500, 500, 300])
    b = _prompt([500, 500, 300, 50])
    bills = bill([a, b], pricing)
    assert bills[0].read == 0
    assert bills[1].read == 1280  # 1,300 shared: 1,024 + 2 x 128
    assert bills[1].write == 0 and bills[1].cost == pytest.approx(1280 * 0.5 + 70)


@pytest.mark.traces
def test_claude_code_session_replays_in_both_formats(traces_dir):
    path = traces_dir / "raw" / "claude-code" / "test" / "fixtures" / "transcripts" / "tool_heavy.jsonl"
    if not path.exists():
        pytest.skip("tool_heavy.jsonl is not in ../shared/traces")
    figures = replay_session(claude_code(path), AnthropicPricing(), OpenAIPricing(), default_counter())
    assert set(figures) >= {"anthropic/pager", "anthropic/full+tail-mark", "chat/pager", "chat/full"}
    assert all(f["calls"] == 5 for f in figures.values())
    assert figures["anthropic/pager"]["marks_max"] <= 4
    assert figures["anthropic/full+tail-mark"]["prompt"] >= figures["anthropic/pager"]["prompt"]


def test_replay_reads_original_logs_as_chat_sessions(tmp_path):
    from pager.formats.openai_chat import validate
    from pager.lab.replay.session import load_session

    s = load_session(claude_log(tmp_path))
    assert s.source == "claude-code" and s.n_assistant == 2
    assert s.messages[1]["reasoning_content"] == "plan"
    validate(list(s.messages))
    (tmp_path / "junk.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="not a session file"):
        load_session(tmp_path / "junk.jsonl")


def test_bench_native_prints_both_formats(tmp_path, capsys):
    from pager.cli import main

    status = main(["bench", "--native", str(claude_log(tmp_path)), "--min-assistant", "1"])
    out = capsys.readouterr().out
    assert status == 0
    for name in ("anthropic/pager", "anthropic/full+tail-mark", "chat/pager", "chat/full"):
        assert f"| {name} |" in out


def test_a_marked_string_turn_is_the_same_prefix():
    from pager.lab.replay.cache_model import Digests, anthropic_prompt

    d = Digests(default_counter())
    plain = {"messages": [{"role": "user", "content": "fix the bug in src/app.py"}]}
    marked = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "fix the bug in src/app.py", "cache_control": {"type": "ephemeral"}}]}]}
    a, b = anthropic_prompt(plain, d), anthropic_prompt(marked, d)
    assert a.chain == b.chain and a.tokens == b.tokens and b.marks == (0,)


@pytest.mark.traces
def test_usage_of_real_claude_code_responses_is_read_exactly(traces_dir):
    from pager.formats.base import get_format

    parse_usage = get_format("anthropic-messages").parse_usage

    path = traces_dir / "raw" / "claude-code" / "test" / "fixtures" / "transcripts" / "tool_heavy.jsonl"
    if not path.exists():
        pytest.skip("tool_heavy.jsonl is not in ../shared/traces")
    seen = 0
    for line in path.read_bytes().splitlines():
        obj = orjson.loads(line)
        usage = (obj.get("message") or {}).get("usage") if obj.get("type") == "assistant" else None
        if usage:
            u = parse_usage(obj["message"])
            assert u.prompt_tokens == (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                       + usage["cache_creation_input_tokens"])
            assert (u.cached_tokens, u.cache_write_tokens) == (
                usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"])
            seen += 1
    assert seen > 0
