"""Need extraction and term matching, on hand-picked strings."""

from __future__ import annotations

from pager.lab.replay.needs import classify, extract_needs, message_text, terms

from _replay_helpers import call


def test_extract_needs_keeps_paths_identifiers_and_numbers():
    text = ("See /repo/src/app.py:12 where parse_header calls obj.attr and camelCase, "
            "PascalCase too; 0.5 and 42 but not 7; and/or, JavaScript and plain words are "
            "not needs; setup.py is a file, os.path is a name, 2024-01-15 gives numbers.")
    assert extract_needs(text) == {
        "repo/src/app.py": "path",
        "12": "number",
        "parse_header": "identifier",
        "obj.attr": "identifier",
        "camelCase": "identifier",
        "PascalCase": "identifier",
        "0.5": "number",
        "42": "number",
        "setup.py": "path",
        "os.path": "identifier",
        "2024": "number",
        "01": "number",
        "15": "number",
    }


def test_classify_edges():
    assert classify("abc") is None  # too short for an identifier
    assert classify("a_b") is None  # three characters
    assert classify("a_bc") == "identifier"
    assert classify("README") is None  # no code shape
    assert classify("3.11.7") == "number"
    assert classify("7") is None
    assert classify("and/or") is None
    assert classify("src/lib") is None  # two bare words: ambiguous with prose
    assert classify("src/lib/x") == "path"
    assert classify("GitHub") is None


def test_terms_offer_every_run_of_components():
    t = terms("error at /repo/src/app.py:12, see pkg.mod.func()")
    for want in ("repo/src/app.py", "src/app.py", "app.py", "src", "app", "12",
                 "pkg.mod.func", "mod.func", "pkg.mod", "func", "error"):
        assert want in t
    assert "rc/app.py" not in t  # only whole components
    assert "" not in t


def test_message_text_uses_argument_values_not_keys_or_reasoning():
    msg = {"role": "assistant", "content": "look", "reasoning_content": "secret_thought here",
           "tool_calls": [call("c", "cat a/b.py"),
                          {"id": "d", "function": {"name": "Read",
                                                   "arguments": '{"file_path": "x/y.py", "limit": 40}'}},
                          {"id": "e", "function": {"name": "raw", "arguments": "not json"}}]}
    text = message_text(msg)
    assert "cat a/b.py" in text and "x/y.py" in text and "40" in text and "not json" in text
    assert "file_path" not in text and "command" not in text and "secret_thought" not in text
    assert "Read" not in text
