"""A message's identity is its canonical form: a moved cache mark or a Responses item id is not an edit."""

from __future__ import annotations

import copy
from typing import Any

import orjson

import pager
from pager.core.canonical import canonical, canonical_bytes
from pager.core.history import hash_messages

MARK = {"type": "ephemeral"}
BIG = "\n".join(f"row {i}: value KIWI-{i} of the table" for i in range(400))
SMALL = BIG[:3000]  # under inline_max: shown in full while it is in the prompt, so any prefix change is a mark


def claude_request(n: int) -> dict[str, Any]:
    """Claude Code's request ``n``: ``n`` tool turns, the cache mark on the newest block only."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Audit the table KIWI."}]}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {i}"},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"dump {i}"}}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"{SMALL}\nend of dump {i}"}]})
    msgs = copy.deepcopy(msgs)
    msgs[-1]["content"][-1]["cache_control"] = MARK
    return {"model": "claude-x", "max_tokens": 100, "messages": msgs,
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": MARK}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}


def test_a_moved_cache_mark_never_forks_and_the_prefix_is_kept(tmp_path):
    with pager.open(tmp_path / "ctx", "cc", context_window=200_000) as p:
        for n in range(1, 9):
            out = p.assemble(claude_request(n))
            rep = p.last_report
            assert rep.reason != "history diverged", n
            if n > 1:
                assert rep.new_pages == 2 and rep.prefix_kept, (n, rep.new_pages, rep.changed_from)
            marks = orjson.dumps(out).count(b'"cache_control"')
            assert 0 < marks <= 4  # pager's own breakpoints, within the API's limit
        assert len(p.store.branches("cc")) == 1
        # the bytes as sent are kept: the result the first request marked has its mark in the store
        first = p.store.message(p.history.page[3])[1]
        assert first["role"] == "tool" and "cache_control" in orjson.dumps(first).decode()


def test_a_moved_mark_changes_the_hash_not_the_identity():
    marked = {"role": "user", "content": [{"type": "text", "text": "hi"}],
              "native": [{"type": "text", "text": "hi", "cache_control": MARK}]}
    plain = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    (h1,), (raw1,) = hash_messages([marked])
    (h2,), _ = hash_messages([plain])
    assert h1 == h2 and b"cache_control" in raw1  # one identity; the bytes as sent
    result = {"role": "tool", "tool_call_id": "t", "content": "x",
              "native": {"type": "tool_result", "tool_use_id": "t", "content": "x", "cache_control": MARK}}
    assert "cache_control" not in canonical(result)["native"] and canonical(result)["native"]["tool_use_id"] == "t"
    assert canonical(plain) is plain and canonical_bytes(plain) == orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)


def test_responses_item_ids_and_status_come_and_go(tmp_path):
    call = {"type": "function_call", "name": "shell", "arguments": '{"command": ["cat", "a.rs"]}', "call_id": "c1"}
    out = {"type": "function_call_output", "call_id": "c1", "output": BIG}
    first = [{"role": "user", "content": "read a.rs"}, {**call, "id": "fc_1", "status": "completed"}, out]
    later = [{"role": "user", "content": "read a.rs"}, call, out,
             {"type": "message", "role": "assistant", "id": "msg_9", "status": "completed",
              "content": [{"type": "output_text", "text": "done", "annotations": []}]},
             {"role": "user", "content": "next"}]
    with pager.open(tmp_path / "ctx", "codex", context_window=200_000) as p:
        p.assemble({"model": "gpt-5", "input": first})
        p.assemble({"model": "gpt-5", "input": later})
        assert p.last_report.reason != "history diverged" and p.last_report.new_pages == 2
        assert len(p.store.branches("codex")) == 1
    # a call's pairing key is kept; only the item's own id and status go
    assert canonical({"role": "assistant", "native": [{**call, "id": "fc_1"}]})["native"] == [call]
    anthropic_call = {"role": "assistant", "native": [{"type": "tool_use", "id": "toolu_1", "name": "Bash"}]}
    assert canonical(anthropic_call) is anthropic_call
