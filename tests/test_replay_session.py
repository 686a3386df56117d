"""Loading and discovering replay sessions."""

from __future__ import annotations

import pytest

from pager.errors import InputError, MessageError
from pager.lab.replay.session import discover, load_session, load_sessions, parse_session

from _replay_helpers import TINY, write_session


def test_load_reads_header_and_messages(tmp_path):
    f = tmp_path / "a.jsonl"
    write_session(f, TINY, sid="abc")
    s = load_session(f)
    assert s.id == "abc"
    assert s.source == "test"
    assert list(s.messages) == TINY
    assert s.n_assistant == 3


def test_blank_lines_are_ignored_and_missing_id_uses_file_name():
    s = parse_session([b'{"type": "session"}', b"", b'{"role": "user", "content": "hi"}'],
                      name="dir/sess.jsonl")
    assert s.id == "sess"
    assert len(s.messages) == 1


@pytest.mark.parametrize("first", [b'{"role": "user", "content": "x"}', b"not json", b"[1, 2]"])
def test_file_without_header_is_not_a_session(first):
    with pytest.raises(InputError, match="not a session file"):
        parse_session([first], name="x.jsonl")


def test_empty_file_is_not_a_session():
    with pytest.raises(InputError, match="empty"):
        parse_session([], name="x.jsonl")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b'{"role": "robot", "content": "x"}', "unknown role"),
        (b'{"role": "user", "content": 5}', "content must be"),
        (b'{"role": "tool", "content": "x"}', "tool_call_id"),
        (b'{"role": "user", "content": "x", "tool_calls": []}', "only assistant"),
        (b'{"role": "assistant", "content": null, "tool_calls": [{"id": "a"}]}', "function"),
        (b'{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", '
         b'"arguments": {}}}]}', "arguments must be a JSON string"),
        (b"[1]", "must be an object"),
        (b"{oops", "invalid JSON"),
    ],
)
def test_bad_message_raises_message_error_with_index(message, reason):
    lines = [b'{"type": "session", "id": "s"}', b'{"role": "user", "content": "ok"}', message]
    with pytest.raises(MessageError, match=reason) as info:
        parse_session(lines, name="x.jsonl")
    assert info.value.index == 1
    assert "line 3" in str(info.value)


def test_discover_walks_directories_and_skips_raw(tmp_path):
    write_session(tmp_path / "b.jsonl", TINY)
    (tmp_path / "sub").mkdir()
    write_session(tmp_path / "sub" / "a.jsonl", TINY)
    (tmp_path / "raw").mkdir()
    write_session(tmp_path / "raw" / "orig.jsonl", TINY)
    (tmp_path / "notes.md").write_text("x")
    found = discover([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["b.jsonl", "sub/a.jsonl"]


def test_discover_missing_path_raises(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        discover([tmp_path / "nope"])


def test_load_sessions_skips_non_sessions_and_reports_them(tmp_path):
    write_session(tmp_path / "good.jsonl", TINY, sid="good")
    (tmp_path / "log.jsonl").write_text('{"event": "x"}\n')
    (tmp_path / "bad.jsonl").write_text('{"type": "session"}\n{"role": "nobody"}\n')
    skipped = []
    got = load_sessions([tmp_path], on_skip=lambda p, e: skipped.append((p.name, type(e))))
    assert [s.id for s in got] == ["good"]
    assert sorted(skipped) == [("bad.jsonl", MessageError), ("log.jsonl", InputError)]
