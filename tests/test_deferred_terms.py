"""A tool output's terms are extracted after the call's request is ready (``pager.core.page_terms``).

The tool pages that close a batch are recorded with their terms pending and
extracted before the call ends: at once when the call needs them (a recall
search that could return them, a round), else after ``ready``. What must
hold: every prompt, every stored page's terms and the term index are what
extracting at once gives, over a whole session with rounds and recalls; the
pending pages are really pending when the request is forwarded; a tool page
a later message of its batch may refer to is never deferred.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import pager
import pager.core.history as history_mod
from pager.core.page_terms import LazyTerms, page_terms
from pager.lab.synth import generate_session

OPTS: dict[str, Any] = {"context_window": 16_000}


def _calls(steps: int) -> list[list[dict[str, Any]]]:
    """The histories an agent sends: the session cut before each assistant message."""
    _header, msgs = generate_session(7, steps, big_every=6)
    return [msgs[:i] for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 1] + [msgs]


def _run(tmp_path: Path, name: str, defer: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(history_mod, "DEFER_TOOL_TERMS", defer)
    outs: list[bytes] = []
    pending_at_ready: list[int] = []
    with pager.open(tmp_path / name, "s", **OPTS) as p:
        for history in _calls(40):
            out = p._assemble({"messages": history}, ready=lambda _o: pending_at_ready.append(
                len(p.history.pending_terms)))
            assert not p.history.pending_terms  # settled before the call returned
            outs.append(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
        h = p.history
        stored = [tuple(r.terms or ()) for r in p.store.load_pages(h.page)]
        reports = p.reports.read()
        return {
            "outs": outs, "terms": [h.terms[r] for r in range(len(h))], "stored": stored,
            "postings": {t: list(ids) for t, ids in h.term_index.mapping().items()},
            "refs": (list(h.last_ref), list(h.ref_count)), "pending_at_ready": pending_at_ready,
            "rounds": sum(1 for r in reports if r.get("round")), "recalled": sum(r.get("pages_recalled", 0) for r in reports),
        }


def test_a_session_is_paged_as_with_terms_extracted_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = _run(tmp_path, "now", False, monkeypatch)
    later = _run(tmp_path, "later", True, monkeypatch)
    assert now["rounds"] >= 2  # the session has rounds (which read every page's terms)
    assert later["outs"] == now["outs"]  # every prompt, byte for byte
    assert later["terms"] == now["terms"] and later["stored"] == now["stored"]
    assert later["postings"] == now["postings"] and later["refs"] == now["refs"]
    assert not any(now["pending_at_ready"])
    assert sum(1 for n in later["pending_at_ready"] if n) >= len(later["outs"]) // 2  # most calls deferred


def test_the_pending_pages_are_extracted_after_the_request_is_ready(tmp_path: Path) -> None:
    tool_text = "Traceback: ValueError in src/deferred_module.py line 412\n" * 40
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"}, {"role": "user", "content": "run the tests"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest -x"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": tool_text},
    ]
    seen: dict[str, Any] = {}

    def ready(_out: dict[str, Any]) -> None:
        h = p.history
        seen["pending"] = {h.page[r]: lazy.pending for r, lazy in h.pending_terms.items()}
        seen["indexed"] = "src/deferred_module.py" in h.term_index.mapping()

    # recall off: with nothing else in the history to refer to, a recall check would settle the page first;
    # and not the session's first call, which plans from scratch (a round, which reads every page's terms)
    with pager.open(tmp_path / "st", "s", **OPTS, recall_pages=0) as p:
        p.assemble({"messages": msgs[:2]})
        p._assemble({"messages": msgs}, ready=ready)
        h = p.history
        tool_row = len(h) - 1
        assert seen["pending"] == {h.page[tool_row]: True} and not seen["indexed"]
        assert h.terms[tool_row] == page_terms(tool_text, None, 2000) and "src/deferred_module.py" in h.terms[tool_row]
        assert h.term_index.mapping()["src/deferred_module.py"] == [h.page[tool_row]]
        (stored,) = p.store.load_pages([h.page[tool_row]])
        assert set(stored.terms or ()) == h.terms[tool_row]


def test_a_tool_page_a_later_message_of_its_batch_refers_to_is_extracted_at_once(tmp_path: Path) -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"}, {"role": "user", "content": "look at the config"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "conf/settings_loader.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "def load_settings_file(): ...\nMAX_RETRY_BUDGET = 7\n"},
        {"role": "user", "content": "why is MAX_RETRY_BUDGET in load_settings_file at all?"},
    ]
    pending: list[int] = []
    with pager.open(tmp_path / "st", "s", **OPTS) as p:
        p._assemble({"messages": msgs}, ready=lambda _o: pending.append(len(p.history.pending_terms)))
        assert pending == [0]
        h = p.history
        assert h.ref_count[3] == 1  # the user's question refers to the output: counted as at once


def test_lazy_terms_read_as_their_tuple() -> None:
    lazy = LazyTerms("see src/app.py and ParseError", None, 2000)
    assert lazy.pending and repr(lazy) == "LazyTerms(<pending>)"
    want = tuple(page_terms("see src/app.py and ParseError", None, 2000))
    assert tuple(lazy) == want and lazy == want and len(lazy) == len(want) and not lazy.pending
    assert lazy[0] == want[0] and lazy[:2] == want[:2] and hash(lazy) == hash(want)
    assert lazy.resolve() == frozenset(want) and "LazyTerms((" in repr(lazy)
    assert lazy == LazyTerms("see src/app.py and ParseError", None, 2000)
    assert lazy != ["src/app.py"]
