from pager.core import pairing
from pager.core.fileread import file_read_path

from helpers import assistant, call, tool, user


def test_units_group_calls_with_results():
    msgs = [user("u"), assistant(None, call("a"), call("b")), tool("a", "1"), tool("b", "2"), assistant("done")]
    units, orphans = pairing.group_units(msgs)
    assert [u.positions for u in units] == [(0,), (1, 2, 3), (4,)]
    assert orphans == []


def test_normalize_adds_deterministic_synthetic_results_and_drops_orphans():
    msgs = [user("u"), assistant(None, call("a"), call("b")), tool("a", "1"), tool("zz", "orphan"), user("next")]
    out = pairing.normalize(msgs)
    assert out[3] == pairing.synthetic_result("b") == pairing.synthetic_result("b")
    assert all(m.get("tool_call_id") != "zz" for m in out)
    assert pairing.check(out) == []


def test_check_reports_each_violation():
    assert pairing.check([assistant(None, call("a")), user("x")])
    assert pairing.check([user("x"), tool("a", "r")])
    assert pairing.check([assistant(None, call("a"))])
    assert pairing.check([assistant(None, call("a")), tool("a", "r")]) == []


def test_file_read_recognition():
    assert file_read_path("bash", '{"command": "cat src/a.py"}') == "src/a.py"
    assert file_read_path("bash", '{"command": "cd /repo && cat src/a.py"}') == "src/a.py"
    assert file_read_path("bash", '{"command": "head -n 40 x.py"}') == "x.py"
    assert file_read_path("bash", '{"command": "sed -n 10,20p x.py"}') == "x.py#L10-20"  # a page of that range
    assert file_read_path("Read", '{"file_path": "/w/y.ex"}') == "/w/y.ex"
    assert file_read_path("str_replace_editor", '{"command": "view", "path": "/w/m.c"}') == "/w/m.c"
    assert file_read_path("open", '{"command": "open chall.py"}') == "chall.py"
    assert file_read_path("execute_ipython_cell", '{"code": "open_file(\'/w/App.css\')"}') == "/w/App.css"
    # not plain reads: pipes, redirections, writes, edits, heredocs
    assert file_read_path("bash", '{"command": "cat a | grep x"}') is None
    assert file_read_path("bash", '{"command": "cat > a.py"}') is None
    assert file_read_path("bash", '{"command": "sed -i s/a/b/ x.py"}') is None
    assert file_read_path("str_replace_editor", '{"command": "create", "path": "x"}') is None
    assert file_read_path("bash", '{"command": "cat a b"}') is None
    assert file_read_path("bash", '{"command": "cat src/*.py"}') is None
    assert file_read_path("bash", "not json at all") is None
