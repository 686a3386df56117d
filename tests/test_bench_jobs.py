"""``--jobs``: the same figures from one process or several; tune's log, interrupt and resume.

Only timings (assemble latency, elapsed seconds) may differ between runs;
everything else must match to the last digit.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from pager.lab import tune
from pager.cli import main
from pager.lab.replay import parallel
from pager.lab.replay.cost import FaultCost, pricing
from pager.lab.replay.metrics import CallRecord, summarize_session
from pager.lab.synth import write_session

from _replay_helpers import TINY, tiny_session, word_facts


def untimed(value: Any) -> Any:
    """Return ``value`` without its timings (keys ``latency*`` and ``seconds``)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if not (k.startswith("latency") or k == "seconds")}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sessions")
    for seed, steps in ((3, 14), (4, 10), (5, 18), (6, 8)):
        write_session(d / f"s{seed}.jsonl", seed=seed, n_steps=steps)
    return d


@pytest.fixture(scope="module")
def three_sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # in input order middle, shortest, longest: submitted longest first (5, 3, 4) and finished, on two
    # workers, in the order 3, 5, 4: input order differs from both
    d = tmp_path_factory.mktemp("three")
    for seed, steps in ((3, 10), (4, 6), (5, 14)):
        write_session(d / f"s{seed}.jsonl", seed=seed, n_steps=steps)
    return d


def test_bench_figures_do_not_depend_on_jobs(three_sessions, tmp_path, capsys):
    docs = []
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}.json"
        rc = main(["bench", str(three_sessions), "--min-assistant", "1", "--no-progress",
                   "--pager", "name=tight,high_watermark=6000,low_watermark=2000",
                   "--jobs", str(jobs), "--json", str(out)])
        assert rc == 0
        docs.append(orjson.loads(out.read_bytes()))
    text = capsys.readouterr().out
    assert "on 1 process(es)" in text and "on 2 process(es)" in text
    one, two = (untimed(d) for d in docs)
    assert one == two
    assert [s["strategy"] for s in one["summary"]] == [
        "full", "window-32k", "mask-10", "clear-100k", "pager", "tight"]
    assert [s["id"] for s in one["sessions"]] == ["synth-3-10", "synth-4-6", "synth-5-14"]  # input order


def test_one_progress_bar_counts_every_workers_calls(sessions):
    from pager.lab.replay.runner import run
    from pager.lab.replay.session import load_sessions
    from pager.lab.replay.strategies import FullResend, SlidingWindow

    loaded = load_sessions([sessions])
    stream = io.StringIO()
    run(loaded, [FullResend(), SlidingWindow(4000)], pricing=pricing("anthropic"), jobs=2,
        progress=True, stream=stream)
    total = sum(s.n_assistant for s in loaded)
    assert f"] {total}/{total} calls" in stream.getvalue()


def _square(x: int) -> int:
    parallel.emit("advance", (1, f"x={x}"))
    return x * x


def test_run_tasks_keeps_input_order_and_forwards_events():
    events: list[Any] = []
    got = parallel.run_tasks(_square, [(i,) for i in range(7)], jobs=2,
                             weights=[i for i in range(7)],
                             on_event=lambda kind, payload: events.append(kind))
    assert got == [i * i for i in range(7)]
    assert events.count("advance") == 7
    assert parallel.run_tasks(_square, [(3,)], jobs=1) == [9]


def _worker_state(_: int) -> tuple[str, bool, str | None, str | None]:
    import os
    import sys

    from pager.core import tokens

    return (sys.modules["pager"].__file__, tokens._cached_tiktoken.cache_info().currsize > 0,
            os.environ.get("PYTHONPATH"), os.environ.get("PYTHONSAFEPATH"))


def test_workers_start_warm_with_this_checkout_and_this_environment(monkeypatch):
    import os
    from multiprocessing import forkserver

    import pager

    # a fork server another test of this process started (a plain one) stays as it is: stop it, so
    # that this run starts the warm one (multiprocessing starts a stopped server again when needed)
    forkserver._forkserver._stop()
    parallel._warm_path = None

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", "") + os.pathsep + "/nonexistent")
    for state in parallel.run_tasks(_worker_state, [(0,), (1,)], jobs=2):
        # the fork server loaded the counter, from the package this process runs
        assert state == (pager.__file__, True, os.environ["PYTHONPATH"], os.environ.get("PYTHONSAFEPATH"))
    # sys.path changed since the server started: its modules may be another checkout's, so spawn
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "data"))
    assert parallel._context().get_start_method() == "spawn"


def _fake_open(path, session, **options):  # pager.open's signature, no store
    class Fake:
        last_report = None

        def assemble(self, request):
            msgs = request["messages"]
            keep = options.get("recent_units", 3) * 2
            return {"messages": msgs[:2] + msgs[2:][-keep:]}

        def close(self):
            pass

    return Fake()


def _candidates() -> list[tune.Candidate]:
    return tune.validate([{}, {"recent_units": 1}, {"recent_units": 5}])


def _points(sessions_dir: Path, **kw: Any) -> list[tune.Point]:
    from pager.lab.replay.session import load_sessions

    return tune.run_points(load_sessions([sessions_dir]), _candidates(),
                           pricing=pricing("anthropic"), batch=2, opener=_fake_open, **kw)


def test_tune_points_do_not_depend_on_jobs(sessions):
    one, two = _points(sessions, jobs=1), _points(sessions, jobs=2)
    assert one == two and len(one) == 3
    assert one[1].coverage < one[0].coverage < one[2].coverage  # the fake keeps recent_units


def test_tune_interrupted_then_resumed_gives_the_same_points(sessions):
    settings = {"any": 1}
    log = tune.Log(settings=settings)
    seen = []

    def stop_after_two(lg: tune.Log) -> None:
        seen.append(1)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _points(sessions, jobs=1, log=log, on_progress=stop_after_two)
    done = {sid for per in log.results.values() for sid in per}
    assert len(done) == 2  # two sessions finished, for every candidate

    # the log goes to JSON and back (as --json and --resume do) and the run finishes
    from pager.lab.cli.tune import _write_atomic

    doc = {"written_by": "pager tune", "settings": settings, "runs": log.runs_json()}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "log.json"
        _write_atomic(str(f), orjson.dumps(doc))
        resumed = tune.Log.resume(f, settings)
        calls = []
        points = _points(sessions, jobs=2, log=resumed, on_progress=lambda lg: calls.append(1))
    assert len(calls) == 2  # only the two sessions left were replayed
    assert points == _points(sessions, jobs=1)


def test_tune_cli_log_resume_and_ctrl_c(sessions, tmp_path, capsys, monkeypatch):
    log = tmp_path / "log.json"
    argv = ["tune", str(sessions), "--min-assistant", "1", "--no-progress", "--jobs", "1",
            "--grid", "recent_units=2", "--json", str(log)]

    real = tune.tune_session
    calls = []

    def interrupt_on_third(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(tune, "tune_session", interrupt_on_third)
    assert main(argv) == 130
    out, err = capsys.readouterr()
    assert "interrupted; 0 of 2 configurations measured on every session" in err
    assert "--resume" in err
    doc = orjson.loads(log.read_bytes())
    assert doc["complete"] is False and all(len(r["sessions"]) == 2 for r in doc["runs"])

    monkeypatch.setattr(tune, "tune_session", real)
    assert main([*argv, "--resume"]) == 0
    out, err = capsys.readouterr()
    assert "2 of 4 sessions already measured" in err
    resumed = orjson.loads(log.read_bytes())
    assert resumed["complete"] is True and len(resumed["points"]) == 2

    assert main(argv) == 0  # afresh, same figures
    capsys.readouterr()
    fresh = orjson.loads(log.read_bytes())
    assert untimed(fresh["points"]) == untimed(resumed["points"])


# --------------------------------------------------------------------------
# Faults and effective cost, by hand


def test_effective_cost_by_hand():
    price = pricing("anthropic")
    fault = FaultCost(recall_tokens=340, output_tokens=40, output_price=5)
    records = [
        CallRecord(index=2, prompt_tokens=1000, cached_tokens=0, completion_tokens=10,
                   needs=2, covered=2),            # no fault
        CallRecord(index=4, prompt_tokens=2000, cached_tokens=1000, completion_tokens=10,
                   needs=3, covered=1),            # fault: 2 needs missing, priced once
        CallRecord(index=6, prompt_tokens=500, cached_tokens=500, completion_tokens=10),
    ]
    full = [CallRecord(index=i, prompt_tokens=4000, cached_tokens=0 if i == 2 else 3000,
                       completion_tokens=10) for i in (2, 4, 6)]
    m = summarize_session("s", "x", records, price, full, fault=fault)
    cost = 1.25 * 1000 + (0.1 * 1000 + 1.25 * 1000) + 0.1 * 500
    per_fault = 0.1 * 2000 + 1.25 * 340 + 5 * 40
    full_cost = 1.25 * 4000 + 2 * (0.1 * 3000 + 1.25 * 1000)
    assert m.faults == 1 and m.fault_rate == pytest.approx(1 / 3)
    assert m.cost == pytest.approx(cost)
    assert m.effective_cost == pytest.approx(cost + per_fault)
    assert m.effective_vs_full == pytest.approx((cost + per_fault) / full_cost)
    # under pricing "none" a fault re-reads the prompt at the full price
    none = summarize_session("s", "x", records, pricing("none"), full, fault=fault)
    assert none.effective_cost == pytest.approx(3500 + 2000 + 340 + 200)


def test_fault_cost_rejects_negative_constants():
    from pager.errors import ConfigError

    with pytest.raises(ConfigError):
        FaultCost(recall_tokens=-1)


def test_full_resend_never_faults_and_word_counted_tiny_session():
    from pager.lab.replay.runner import run
    from pager.lab.replay.strategies import FullResend, ObservationMasking

    facts = word_facts()
    r = run([tiny_session()], [FullResend(facts=facts), ObservationMasking(keep=0, facts=facts)],
            pricing=pricing("none"), facts=facts, progress=False)
    full, mask = r.summary
    assert full.faults == 0 and full.effective_vs_full == 1.0
    # masking hides the tool output: message 4 ("MAX_SIZE is 4096 in src/app.py") misses
    # MAX_SIZE and 4096 (a fault); message 6 finds MAX_SIZE in message 4 itself: 3 calls, 1 fault
    assert mask.faults == 1 and mask.fault_rate == pytest.approx(1 / 3)
    assert mask.effective_vs_full > mask.cost_vs_full
    assert len(TINY) == 7
