"""The L1 guard: L1 stays under its cap; system prompt and turn 1 verbatim; old pins and notes move out."""

from __future__ import annotations

import pytest

import pager
from pager.core.l1guard import L1Item, guard_card, item_text, items
from pager.errors import BudgetError


def count(text: str) -> int:
    return len(text) // 4


def test_under_the_cap_nothing_moves():
    r = guard_card(100, items("pin", ["a goal"]), items("note", ["a note"]), 8_000, count)
    assert r.moved == () and not r.over
    assert "- a goal" in r.card and "- a note" in r.card


def test_oldest_notes_leave_first_then_oldest_pins_each_with_a_pointer():
    pins = items("pin", [f"pin {i} " + "p" * 400 for i in range(1, 6)])
    notes = items("note", [f"note {i} " + "n" * 400 for i in range(1, 6)])
    r = guard_card(1_000, pins, notes, 1_600, count)
    assert r.moved[:5] == ("note:1", "note:2", "note:3", "note:4", "note:5")
    assert r.moved[5:] == ("pin:1", "pin:2", "pin:3")[: len(r.moved) - 5]
    assert 1_000 + count(r.card) <= 1_600 and not r.over
    for ref in r.moved:
        assert f'→ expand("{ref}")' in r.card
    assert "pin 5 " + "p" * 400 in r.card  # the newest pin stays whole
    assert r.card.count("\n- ") >= len(r.moved)


def test_cap_zero_disables_and_over_is_reported_when_nothing_more_can_move():
    pins = items("pin", ["x" * 4_000])
    assert guard_card(0, pins, [], 0, count).moved == ()
    r = guard_card(9_000, pins, [], 8_000, count)  # system prompt + turn 1 alone are over
    assert r.moved == ("pin:1",) and r.over


def test_state_block_gets_the_room_left_and_is_cut_with_a_pointer():
    state = "\n".join(f"line {i} " + "s" * 100 for i in range(200))
    r = guard_card(1_000, items("pin", ["goal"]), [], 2_000, count, state=state, state_where="pager state resume st/")
    assert 1_000 + count(r.card) <= 2_000
    assert "line 0 " in r.card and "pager state resume st/ prints it whole" in r.card
    assert state in guard_card(0, [], [], 0, count, state=state).card


def test_item_text_resolves_references():
    assert item_text("pin:2", ["a", "b"], []) == "b"
    assert item_text("note:1", [], ["n"]) == "n"
    for bad in ("pin:3", "pin:0", "note:x", "pg:1-abc", "", None):
        assert item_text(bad, ["a", "b"], ["n"]) is None  # type: ignore[arg-type]
    assert L1Item("pin:1", "a") != L1Item("pin:2", "a")


SYSTEM = {"role": "system", "content": "You are a coding agent. " * 200}
TURN1 = {"role": "user", "content": "Refactor the storage layer. " * 600}


def _open(tmp_path, **kw):
    return pager.open(tmp_path / "ctx", session="s", context_window=200_000, log_reports=False, **kw)


@pytest.mark.parametrize("mode", ["paging", "rollover"])
def test_thirty_pins_and_a_long_first_message_stay_under_the_cap(tmp_path, mode):
    p = _open(tmp_path, mode=mode)
    for i in range(30):
        p.pin(f"goal {i}: " + "keep the public API stable and every test green " * 12)
    out = p.assemble({"messages": [SYSTEM, TURN1]})
    r = p.last_report
    assert out["messages"][:2] == [SYSTEM, TURN1]  # verbatim
    assert r.layers["l1"] <= 8_000
    moved = [n.split(":", 1)[1] for n in r.notices if n.startswith("l1-moved:")]
    assert moved[:2] == ["pin:1", "pin:2"]
    card = out["messages"][2]["content"]
    assert 'expand("pin:1")' in card and "goal 29:" in card
    assert p.expand("pin:1").startswith("goal 0: keep the public API")
    p.close()
    # without the guard the same L1 is far over 8,000 tokens (the rule is what keeps it small)
    q = pager.open(tmp_path / "ctx2", session="s", context_window=200_000, log_reports=False, mode=mode, l1_cap=0)
    for i in range(30):
        q.pin(f"goal {i}: " + "keep the public API stable and every test green " * 12)
    q.assemble({"messages": [SYSTEM, TURN1]})
    assert q.last_report.layers["l1"] > 8_000
    q.close()


def test_over_the_window_itself_is_still_a_budget_error(tmp_path):
    p = pager.open(tmp_path / "ctx", session="s", context_window=4_000, log_reports=False)
    with pytest.raises(BudgetError):
        p.assemble({"messages": [SYSTEM, TURN1]})
    p.close()


def test_moved_items_and_old_notes_are_found_by_recall(tmp_path):
    p = _open(tmp_path)
    for i in range(30):
        p.pin(f"goal {i}: " + "keep the public API stable and every test green " * 12)
    p.pin("goal 30: the zebra-migration must keep column widths")
    p.assemble({"messages": [SYSTEM, TURN1]})
    assert "l1-moved:pin:1" in p.last_report.notices
    found = p.call_tool({"id": "r1", "function": {"name": "recall", "arguments": '{"query": "goal 0: public API"}'}})
    assert "pin:1 (step 0, pin)" in found["content"]
    # a pin still in the card is not offered again; a note older than the card shows is
    assert not [h for h in p.search("zebra-migration column widths") if h.kind == "pin"]
    for i in range(10):
        p.note(f"note {i} about the flux-capacitor" if i == 0 else f"note {i}")
    hits = [h.handle for h in p.search("flux-capacitor")]
    assert "note:1" in hits
    assert p.expand("note:1") == "note 0 about the flux-capacitor"
    p.close()
