"""The synthetic session generator and the bundled sessions it wrote."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pager.lab.replay.cost import pricing
from pager.lab.replay.metrics import check_invariants
from pager.lab.replay.runner import run
from pager.lab.replay.session import load_session
from pager.lab.replay.strategies import FullResend
from pager.lab.synth import BUNDLED, generate_session, write_session

DATA = Path(__file__).resolve().parents[1] / "pager" / "data"


def test_same_seed_same_bytes_other_seed_differs():
    a = generate_session(5, 40)
    assert a == generate_session(5, 40)
    assert a != generate_session(6, 40)


@pytest.mark.parametrize("steps", [1, 2, 30])
def test_shape_of_a_session(steps):
    header, msgs = generate_session(3, steps)
    assert header["type"] == "session" and header["id"] == f"synth-3-{steps}"
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    assert sum(m["role"] == "assistant" for m in msgs) == steps
    assert msgs[-1]["role"] == "assistant" and not msgs[-1].get("tool_calls")
    assert check_invariants(msgs, msgs) == []  # every call answered, in order


def test_realistic_outputs_and_references_back():
    _, msgs = generate_session(23, 200)
    outputs = [m["content"] for m in msgs if m["role"] == "tool"]
    reads = [m for m in msgs if m["role"] == "assistant" and m.get("tool_calls")
             and '"cat src/' in m["tool_calls"][0]["function"]["arguments"]]
    assert any(len(o) > 30_000 for o in outputs)
    assert any("Traceback" in o or "FAILURES" in o for o in outputs)
    assert len(reads) > 10
    assert any(m["role"] == "user" and "switch" in m["content"] for m in msgs)
    # later messages cite what old outputs showed
    assert sum(m["role"] == "assistant" and ("Earlier " in (m["content"] or "")
               or "Recall that" in (m["content"] or "")) for m in msgs) > 10


def test_long_range_needs_exist():
    header, msgs = generate_session(11, 80)
    from pager.lab.replay.session import Session

    s = Session(id=header["id"], header=header, messages=tuple(msgs))
    r = run([s], [FullResend()], pricing=pricing("none"), progress=False)
    assert r.per_session[0].long_needs > 10
    assert r.per_session[0].coverage == 1.0


def test_file_is_reread_after_an_edit():
    _, msgs = generate_session(23, 200)
    calls = {c["id"]: orjson.loads(c["function"]["arguments"])["command"]
             for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or ()}
    reads: dict[str, set[str]] = {}
    for m in msgs:
        if m["role"] == "tool" and calls[m["tool_call_id"]].startswith("cat src/"):
            reads.setdefault(calls[m["tool_call_id"]], set()).add(m["content"])
    assert any(len(versions) > 1 for versions in reads.values())


@pytest.mark.parametrize(("name", "seed", "steps"), BUNDLED)
def test_bundled_files_are_the_generator_output(tmp_path, name, seed, steps):
    shipped = DATA / name
    assert shipped.read_bytes() == write_session(tmp_path / name, seed, steps).read_bytes()
    s = load_session(shipped)
    assert s.n_assistant == steps


def test_bundled_files_stay_small():
    assert sum(p.stat().st_size for p in DATA.glob("*.jsonl")) < 4_000_000
