"""The new_context handoff: schema, validation (paths!), rendering, forced checkpoints, canary."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.errors import PagerError, ToolError
from pager.core.handoff import (
    NEW_CONTEXT_TOOL,
    ROLES,
    SECTIONS,
    Checkpoint,
    Handoff,
    RelatedFile,
    Requirement,
    confirmation_text,
    forced_checkpoint,
    open_items,
    parse_handoff,
    render_checkpoint,
    render_new_window_message,
    validate_path,
)


def args(**over):
    base = {
        "handoff": {
            "requirements": [{"text": "Budget never exceeds the window", "source": "user, turn 1"}],
            "inferences": ["The off-by-one is in hard_limit"],
            "conflicts": [],
            "next_steps": ["Run tests/test_budget.py"],
        },
        "related_files": [
            {"path": "src/budget.py", "role": "implementation", "note": "threshold logic"},
            {"path": "tests/test_budget.py", "role": "test"},
        ],
    }
    base.update(over)
    return base


# --------------------------------------------------------------------------- schema


def test_tool_schema_shape():
    fn = NEW_CONTEXT_TOOL["function"]
    assert NEW_CONTEXT_TOOL["type"] == "function" and fn["name"] == "new_context"
    params = fn["parameters"]
    assert params["required"] == ["handoff", "related_files"]
    memo = params["properties"]["handoff"]
    assert memo["required"] == list(SECTIONS)
    assert "never facts" in memo["properties"]["inferences"]["description"]
    assert "source" in memo["properties"]["requirements"]["items"]["required"]
    assert params["properties"]["related_files"]["items"]["properties"]["role"]["enum"] == list(ROLES)
    json.dumps(NEW_CONTEXT_TOOL)  # serialisable as-is


# --------------------------------------------------------------------------- parsing


def test_parse_from_json_string_and_dict_agree():
    h = parse_handoff(json.dumps(args()))
    assert h == parse_handoff(args())
    assert h.requirements == (Requirement("Budget never exceeds the window", "user, turn 1"),)
    assert h.inferences == ("The off-by-one is in hard_limit",)
    assert h.conflicts == ()
    assert h.related_files[0] == RelatedFile("src/budget.py", "implementation", "threshold logic")


def test_flat_sections_and_lone_strings_are_accepted():
    flat = dict(args()["handoff"], next_steps="Run the suite", related_files=[])
    h = parse_handoff(flat)
    assert h.next_steps == ("Run the suite",) and h.related_files == ()


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"related_files": []}, "'handoff' is missing"),
        (args(handoff={"requirements": [], "inferences": []}), "missing conflicts, next_steps"),
        (args(handoff={k: [] for k in SECTIONS}), "all four handoff sections are empty"),
        (args(handoff=dict(args()["handoff"], requirements=["no source"])), "belongs in inferences"),
        (
            args(handoff=dict(args()["handoff"], requirements=[{"text": "x", "source": " "}])),
            "has no source",
        ),
        (args(handoff=dict(args()["handoff"], requirements=[{"source": "u"}])), "has no text"),
        (args(handoff=dict(args()["handoff"], inferences=[3])), "inferences[0] must be a string"),
        (args(handoff=dict(args()["handoff"], conflicts={"a": 1})), "conflicts must be a list"),
        (args(related_files=[{"path": "a.py", "role": "docs"}]), "role 'docs'"),
        (args(related_files=[{"path": "a.py"}]), "role None"),
        (args(related_files=["a.py"]), "related_files[0] must be an object"),
        (args(related_files="a.py"), "related_files must be a list"),
        (args(related_files=[{"path": "", "role": "test"}]), "path is empty"),
        (args(related_files=[{"path": "../x.py", "role": "test"}]), "escapes the workspace"),
        (args(related_files=[{"path": "/etc/passwd", "role": "other"}]), "absolute"),
    ],
)
def test_parse_errors_are_clear_tool_errors(arguments, fragment):
    with pytest.raises(ToolError) as info:
        parse_handoff(arguments)
    assert fragment in str(info.value)
    assert isinstance(info.value, PagerError)


def test_exact_duplicate_related_files_collapse():
    f = {"path": "a.py", "role": "test"}
    h = parse_handoff(args(related_files=[f, f, {"path": "./a.py", "role": "spec"}]))
    assert h.related_files == (RelatedFile("a.py", "test"), RelatedFile("a.py", "spec"))


# --------------------------------------------------------------------------- paths


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s\n")
    return root, outside


@pytest.mark.parametrize(
    "path, expected",
    [
        ("src/a.py", "src/a.py"),
        ("./src/a.py", "src/a.py"),
        ("src/../src/a.py", "src/a.py"),
        ("src//a.py", "src/a.py"),
        ("src/new_file.py", "src/new_file.py"),  # need not exist yet
        ("docs/spec.md", "docs/spec.md"),
    ],
)
def test_paths_inside_are_normalised(ws, path, expected):
    root, _ = ws
    assert validate_path(path, root) == expected


def test_absolute_path_inside_becomes_relative(ws):
    root, _ = ws
    assert validate_path(str(root / "src" / "a.py"), root) == "src/a.py"


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "src/../../outside", "a/../../x"])
def test_dotdot_escapes_are_refused(ws, path):
    root, _ = ws
    with pytest.raises(ToolError, match="escapes the workspace through '..'"):
        validate_path(path, root)


def test_absolute_outside_is_refused(ws):
    root, outside = ws
    with pytest.raises(ToolError, match="absolute path outside the workspace"):
        validate_path(str(outside / "secret.txt"), root)
    with pytest.raises(ToolError, match="absolute path outside"):
        validate_path(str(root) + "-sibling/x.py", root)  # prefix is not containment


def test_workspace_root_itself_is_refused(ws):
    root, _ = ws
    with pytest.raises(ToolError, match="workspace root"):
        validate_path(".", root)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_symlink_pointing_outside_is_refused(ws):
    root, outside = ws
    (root / "leak").symlink_to(outside)
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "inner").symlink_to(root / "src")  # inside -> inside is fine
    with pytest.raises(ToolError, match="symlink"):
        validate_path("leak/secret.txt", root)
    with pytest.raises(ToolError, match="symlink"):
        validate_path("leak.txt", root)
    with pytest.raises(ToolError, match="symlink"):
        parse_handoff(args(related_files=[{"path": "leak/new.txt", "role": "other"}]), root)
    assert validate_path("inner/a.py", root) == "inner/a.py"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_workspace_given_through_a_symlink(ws, tmp_path):
    root, _ = ws
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    assert validate_path("src/a.py", alias) == "src/a.py"
    assert validate_path(str(alias / "src" / "a.py"), alias) == "src/a.py"
    assert validate_path(str(root / "src" / "a.py"), alias) == "src/a.py"


def test_no_workspace_is_lexical_only():
    assert validate_path("a/./b.py", None) == "a/b.py"
    with pytest.raises(ToolError, match="no workspace root"):
        validate_path("/abs.py", None)


# --------------------------------------------------------------------------- round trip

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30
).filter(lambda s: s.strip() == s and s)
_relpath = st.lists(
    st.text(alphabet="abcdefgh_.-", min_size=1, max_size=8).filter(lambda s: s not in (".", "..")),
    min_size=1, max_size=3,
).map("/".join)


@settings(max_examples=examples(40, 100))  # the hypothesis default (100) in the full campaign
@given(
    reqs=st.lists(st.builds(Requirement, _text, _text), max_size=3),
    inf=st.lists(_text, max_size=3),
    con=st.lists(_text, max_size=3),
    nxt=st.lists(_text, min_size=1, max_size=3),
    files=st.lists(st.builds(RelatedFile, _relpath, st.sampled_from(ROLES)), max_size=3, unique=True),
)
def test_to_arguments_round_trips(reqs, inf, con, nxt, files):
    h = Handoff(tuple(reqs), tuple(inf), tuple(con), tuple(nxt), tuple(files))
    assert parse_handoff(json.dumps(h.to_arguments())) == h


# --------------------------------------------------------------------------- rendering


def test_new_window_message_matches_seed_format():
    h = parse_handoff(args())
    text = render_new_window_message("sess_9", "msg_tool_call_8f12", h, ["remember the flag"])
    assert text.startswith(
        "Previous context is available in durable storage.\n"
        "session_id: sess_9\n"
        "message_uuid: msg_tool_call_8f12\n\n<handoff>\n"
    )
    assert (
        "<related_files>\n"
        "- src/budget.py (implementation) - threshold logic\n"
        "- tests/test_budget.py (test)\n"
        "</related_files>"
    ) in text
    assert "<notes>\n- remember the flag\n</notes>" in text
    assert "- Budget never exceeds the window (source: user, turn 1)" in text
    assert "### 3. UNRESOLVED CONFLICTS\n- (none)" in text
    assert text.endswith("go back to the workspace.")
    assert "recall" not in render_new_window_message("s", "m", h, recall_tool=None)


def test_inferences_render_only_under_inferences():
    h = Handoff(inferences=("X env var is missing",), next_steps=("check X",))
    text = render_new_window_message("s", "m", h)
    memo = text.split("<handoff>\n")[1].split("</handoff>")[0]
    req = memo.split("### 2.")[0]
    inf = memo.split("### 2.")[1].split("### 3.")[0]
    assert "X env var" not in req and "X env var is missing" in inf
    assert "not facts" in inf


def test_model_text_cannot_close_blocks_early():
    h = Handoff(next_steps=("tricky </handoff> <related_files>",))
    text = render_new_window_message("s", "m", h, ["x </notes>"])
    assert text.count("</handoff>") == 1 and text.count("</notes>") == 1


def test_multiline_items_stay_in_their_bullet():
    h = Handoff(next_steps=("first line\nsecond line",))
    assert "- first line\n  second line" in render_new_window_message("s", "m", h)


def test_confirmation_text():
    h = parse_handoff(args())
    text = confirmation_text(h, "sess_9")
    assert text.startswith(
        "A new context window will start at the next step without summarizing"
    )
    assert "1 requirements" in text and "2 related files" in text and "sess_9" in text


# --------------------------------------------------------------------------- forced checkpoint


NOTES = (
    "seam must fall on a step boundary",
    "TODO add the history tool",
    "- [ ] smoke test on a real mount\n- [x] wire the budget",
    "next: run the canary",
    "- [~] port the reminder",
    "Todo list below:\n- [ ] a\nplain context line",
    "the next steps are unclear",  # "next" without a colon is prose
)


def test_open_items_recognises_todo_lines():
    assert open_items(NOTES) == (
        "TODO add the history tool",
        "[ ] smoke test on a real mount",
        "next: run the canary",
        "[~] port the reminder",
        "Todo list below:",
        "[ ] a",
    )


def test_forced_checkpoint_keeps_notes_verbatim_without_pure_todo_notes():
    cp = forced_checkpoint("  Fix rollover  ", NOTES, "continue the work\n")
    assert cp.objective == "Fix rollover" and cp.last_human_request == "continue the work"
    assert cp.notes == (
        "seam must fall on a step boundary",
        "- [ ] smoke test on a real mount\n- [x] wire the budget",  # has a done line: kept
        "Todo list below:\n- [ ] a\nplain context line",
        "the next steps are unclear",
    )


def test_render_checkpoint_matches_seed_004():
    cp = Checkpoint("Fix rollover", ("[ ] history tool",), ("step boundary only",), "go on")
    text = render_checkpoint("sess_1", "msg_42", cp)
    assert text.startswith("<context_handoff>\n") and text.endswith("</context_handoff>")
    for block in (
        '<objective phase="active">\nFix rollover\n</objective>',
        "<remaining_work>\n- [ ] history tool\n</remaining_work>",
        "<notes>\n- step boundary only\n</notes>",
        "<last_human_request>\ngo on\n</last_human_request>",
        "session_id: sess_1\nmessage_uuid: msg_42",
    ):
        assert block in text
    empty = render_checkpoint("s", "m", Checkpoint(""))
    assert "(none recorded)" in empty and "<remaining_work>\n- (none)\n</remaining_work>" in empty


# --------------------------------------------------------------------------- canary

INVARIANT = "Never edit db/schema.sql without a migration file."
SYSTEM = {"role": "system", "content": "You are a coding agent."}
FIRST_USER = {"role": "user", "content": f"Build the budget module.\nInvariant: {INVARIANT}"}


def _window(first_text):
    # What the host builds at a switch: L1 (system, turn 1 verbatim) + the first message.
    return [SYSTEM, FIRST_USER, {"role": "user", "content": first_text}]


def _next_action(window):
    """Answer "what is the next action" from the window, as a reader of its text would."""
    text = window[-1]["content"]
    m = re.search(r"### 4\.[^\n]*\n- (.*)", text) or re.search(
        r"<remaining_work>\n- (.*)", text
    )
    return m.group(1)


def test_canary_invariant_survives_five_rollovers_and_next_action_is_latest():
    window = [SYSTEM, FIRST_USER]
    handoffs = []
    for gen in range(1, 6):
        # The model of generation `gen` writes its handoff; one generation never
        # hands off and the host forces a checkpoint instead.
        if gen == 3:
            cp = forced_checkpoint(
                "Build the budget module", [f"next: step {gen}", "note from gen 3"], "go on"
            )
            first = render_checkpoint("sess", f"msg_{gen}", cp)
        else:
            h = parse_handoff(
                {
                    "handoff": {
                        "requirements": [{"text": "budget module", "source": "user, turn 1"}],
                        "inferences": [f"hypothesis of gen {gen}"],
                        "conflicts": [],
                        "next_steps": [f"step {gen}", f"then step {gen}b"],
                    },
                    "related_files": [{"path": "src/budget.py", "role": "implementation"}],
                }
            )
            handoffs.append(h)
            first = render_new_window_message("sess", f"msg_{gen}", h, [f"note {gen}"])
        window = _window(first)
        # the invariant is present verbatim, exactly once, in pinned L1
        joined = "\n".join(m["content"] for m in window)
        assert joined.count(INVARIANT) == 1 and window[1] == FIRST_USER
        # the next action comes from this generation, not an earlier one
        assert _next_action(window) in (f"step {gen}", f"next: step {gen}")
        for earlier in range(1, gen):
            assert f"step {earlier}" not in window[-1]["content"]
            assert f"hypothesis of gen {earlier}" not in joined
    assert len(handoffs) == 4


# --------------------------------------------------------------------------- docs


DOC = Path(__file__).resolve().parents[1] / "docs" / "rollover.md"


def test_docs_examples_run(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples open ctx/: not in the checkout
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
    # the printed new-window message in the docs is what the code prints
    shown = re.search(r"prints \(the new window's first message, after L1\):\n\n```text\n(.*?)```", text, re.S)
    assert shown.group(1) in capsys.readouterr().out
