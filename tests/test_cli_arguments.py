"""Bad arguments of ``pager bench``, ``tune`` and ``replay``: exit 2, one line, nothing replayed.

Every case runs the command line in-process (``pager.cli.main``) on a session
that would take seconds to replay; a check that came after the replay would
show up as a replay's output (``sessions, ... calls``) and as a slow test.
Also here: a failed run makes the exit status non-zero and the report names it,
and ``pager --version``.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import pager
from pager.cli import main
from pager.lab.cli import bench as bench_cli
from pager.lab.replay import strategies as strategies_mod
from pager.lab.synth import write_session

from _replay_helpers import TINY, write_session as write_tiny


@pytest.fixture(scope="module")
def _session_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("synth") / "s.jsonl"
    write_session(path, seed=5, n_steps=12)  # drawn once for the module's tests (~60 ms each)
    return path.read_bytes()


@pytest.fixture
def sessions(tmp_path: Path, _session_bytes: bytes) -> Path:
    d = tmp_path / "sessions"
    d.mkdir()
    (d / "s.jsonl").write_bytes(_session_bytes)
    return d


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line(rc: int, out: str, err: str, *words: str) -> None:
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "calls" not in out and "sessions from" not in err, (out, err)


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    bad_opt = tmp_path / "bad_opt.json"
    bad_opt.write_text('{"high_watermark": -1}')
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"no_such_option": 1}')
    not_json = tmp_path / "not.json"
    not_json.write_text("{")
    not_session = tmp_path / "notes.jsonl"
    not_session.write_text('{"event": 1}\n')
    (tmp_path / "adir").mkdir()
    return {"bad_opt": bad_opt, "unknown": unknown, "not_json": not_json,
            "not_session": not_session, "dir": tmp_path / "adir"}


BENCH_CASES = [
    (["--html", "{tmp}/missing/r.html"], ["--html", "no such directory"]),
    (["--html", "{tmp}/adir"], ["--html", "is a directory"]),
    (["--json", "{tmp}/missing/r.json"], ["--json", "no such directory"]),
    (["--json", "{tmp}/r.x", "--html", "{tmp}/r.x"], ["--json and --html name the same file"]),
    (["--pager", "foo=1"], ["--pager foo=1", "unknown option"]),
    (["--pager", "high_watermark=-5"], ["--pager high_watermark=-5", "must be a positive"]),
    (["--pager", "policy=nosuch"], ["--pager policy=nosuch", "nosuch"]),
    (["--pager", "novalue"], ["--pager expects KEY=VALUE"]),
    (["--pager", "name=pager,recent_units=2"], ["'pager' is taken"]),
    (["--pager", "name=full,recent_units=2"], ["'full' is taken"]),
    (["--pager-config", "{tmp}/none.json"], ["--pager-config", "cannot read"]),
    (["--pager-config", "{unknown}"], ["--pager-config", "unknown option"]),
    (["--pager-config", "{not_json}"], ["--pager-config", "not JSON"]),
    (["--jobs", "0"], ["--jobs", "positive integer"]),
    (["--jobs", "two"], ["--jobs", "positive integer"]),
    (["--window", "0"], ["--window", "positive integer"]),
    (["--min-assistant", "-1"], ["--min-assistant", "integer >= 0"]),
    (["--long-gap", "0"], ["--long-gap", "positive integer"]),
    (["--context-window", "x"], ["--context-window"]),
    (["--cache-discount", "2"], ["--cache-discount", "between 0 and 1"]),
    (["--cache-discount", "0.9"], ["--cache-discount", "openai"]),
    (["--fault-tokens", "-3"], ["--fault-tokens", ">= 0"]),
    (["--output-price", "nan"], ["--output-price"]),
    (["--pricing", "free"], ["--pricing", "invalid choice"]),
]


@pytest.mark.parametrize("argv,words", BENCH_CASES, ids=[" ".join(a) for a, _ in BENCH_CASES])
def test_bench_bad_argument(argv, words, sessions, tmp_path, capsys):
    files = _bad_files(tmp_path)
    argv = [a.format(tmp=tmp_path, **files) for a in argv]
    rc, out, err = run(["bench", str(sessions), "--no-progress", "--min-assistant", "1", *argv],
                       capsys)
    assert_one_line(rc, out, err, *words)


def test_bench_missing_path_and_named_non_session(tmp_path, capsys):
    files = _bad_files(tmp_path)
    rc, out, err = run(["bench", str(tmp_path / "nope"), "--no-progress"], capsys)
    assert_one_line(rc, out, err, "no such file or directory")
    rc, out, err = run(["bench", str(files["not_session"]), "--no-progress"], capsys)
    assert_one_line(rc, out, err, "not a session file")


TUNE_CASES = [
    (["--grid", "bogus=1"], ["unknown grid key 'bogus'"]),
    (["--grid", "high_watermark=-5"], ["--grid high_watermark=-5", "must be a positive"]),
    (["--grid", "policy=decay,nosuch"], ["--grid policy=nosuch", "nosuch"]),
    (["--grid", "recent_units=two"], ["--grid recent_units=two"]),
    (["--grid", "high_watermark="], ["no values"]),
    (["--grid-file", "{tmp}/none.json"], ["--grid-file", "cannot read"]),
    (["--grid-file", "{not_json}"], ["--grid-file", "not JSON"]),
    (["--base", "{bad_opt}"], ["--base", "must be a positive"]),
    (["--base", "{unknown}"], ["--base", "unknown option"]),
    (["--coverage-floor", "2"], ["--coverage-floor", "between 0 and 1"]),
    (["--target-coverage", "-1"], ["--coverage-floor", "between 0 and 1"]),
    (["--max-points", "0"], ["--max-points", "positive integer"]),
    (["--batch", "0"], ["--batch", "positive integer"]),
    (["--jobs", "0"], ["--jobs", "positive integer"]),
    (["--resume"], ["--resume needs --json"]),
    (["--resume", "--json", "{tmp}/none.json"], ["--resume: no log"]),
    (["--write", "{tmp}/missing/t.json"], ["--write", "no such directory"]),
    (["--write", "{tmp}/t.json", "--json", "{tmp}/t.json"], ["--write and --json name the same file"]),
    (["--objective", "cost"], ["--objective", "invalid choice"]),
]


@pytest.mark.parametrize("argv,words", TUNE_CASES, ids=[" ".join(a) for a, _ in TUNE_CASES])
def test_tune_bad_argument(argv, words, sessions, tmp_path, capsys):
    files = _bad_files(tmp_path)
    argv = [a.format(tmp=tmp_path, **files) for a in argv]
    rc, out, err = run(["tune", str(sessions), "--no-progress", "--min-assistant", "1",
                        "--grid", "recent_units=2", *argv], capsys)
    assert_one_line(rc, out, err, *words)


def test_tune_resume_refuses_a_log_of_other_settings(sessions, tmp_path, capsys):
    log = tmp_path / "log.json"
    base = ["tune", str(sessions), "--no-progress", "--min-assistant", "1", "--jobs", "1",
            "--grid", "recent_units=2", "--max-points", "1", "--json", str(log)]
    rc, out, err = run(base, capsys)
    assert rc == 0 and orjson.loads(log.read_bytes())["complete"]
    rc, out, err = run([*base, "--resume", "--pricing", "none"], capsys)
    assert_one_line(rc, out, err, "--resume", "other pricing")
    log.write_text('{"points": []}')
    rc, out, err = run([*base, "--resume"], capsys)
    assert_one_line(rc, out, err, "--resume", "not a log written by pager tune")


REPLAY_CASES = [
    (["--config", "{tmp}/none.json"], ["--config", "cannot read"]),
    (["--config", "{unknown}"], ["--config", "unknown option"]),
    (["--config", "{bad_opt}"], ["--config", "must be a positive"]),
    (["--context-window", "0"], ["--context-window", "positive integer"]),
    (["--jobs", "x"], ["--jobs", "positive integer"]),
    (["--min-assistant", "-2"], ["--min-assistant"]),
]


@pytest.mark.parametrize("argv,words", REPLAY_CASES, ids=[" ".join(a) for a, _ in REPLAY_CASES])
def test_replay_bad_argument(argv, words, sessions, tmp_path, capsys):
    files = _bad_files(tmp_path)
    argv = [a.format(tmp=tmp_path, **files) for a in argv]
    rc, out, err = run(["replay", str(sessions / "s.jsonl"), "--no-progress", *argv], capsys)
    assert_one_line(rc, out, err, *words)


def _failing_build(self, history):
    if len(history) > 6:
        raise RuntimeError("boom at a later call")
    return list(history)


def test_a_failed_run_exits_1_and_the_report_names_it(sessions, tmp_path, capsys, monkeypatch):
    write_tiny(sessions / "tiny.jsonl", TINY, sid="tiny")
    monkeypatch.setattr(strategies_mod.PagerStrategy, "build", _failing_build)
    monkeypatch.setattr(strategies_mod.PagerStrategy, "reset", lambda self, header: None)
    monkeypatch.setattr(strategies_mod.PagerStrategy, "close", lambda self: None)
    js, page = tmp_path / "r.json", tmp_path / "r.html"
    rc, out, err = run(["bench", str(sessions), "--no-progress", "--min-assistant", "1",
                        "--jobs", "1", "--json", str(js), "--html", str(page)], capsys)
    assert rc == 1
    assert "pager (1 failed)" in out
    assert "failed: 1 run(s)" in out and "pager on synth-5-12: RuntimeError: boom" in out
    assert "1 run(s) failed" in err
    assert orjson.loads(js.read_bytes())["failures"] == [
        {"session": "synth-5-12", "strategy": "pager",
         "error": "RuntimeError: boom at a later call (building for message 7)"}]
    text = page.read_text()
    assert 'id="failures"' in text and "boom at a later call" in text

    rc, out, err = run(["replay", str(sessions), "--no-progress", "--jobs", "1"], capsys)
    assert rc == 1 and "pager on synth-5-12: RuntimeError: boom" in out


def test_explain_prints_a_glossary_of_every_column(sessions, capsys):
    rc, out, _ = run(["bench", str(sessions), "--no-progress", "--min-assistant", "1",
                      "--no-pager", "--jobs", "1", "--explain"], capsys)
    assert rc == 0
    glossary = out[out.index("columns:"):]
    for col in bench_cli.SUMMARY_HEAD[1:]:
        assert f"  {col}  " in glossary, col
    rc, out, _ = run(["bench", str(sessions), "--no-progress", "--min-assistant", "1",
                      "--no-pager", "--jobs", "1"], capsys)
    assert "columns:" not in out and "--explain" in out


def test_version(capsys, monkeypatch):
    import functools
    from importlib import metadata

    import pager.cli

    # one scan of every installed distribution's metadata (~0.5 s) for the fallback and the check
    monkeypatch.setattr(metadata, "packages_distributions", functools.cache(metadata.packages_distributions))
    printed = []
    # the distribution looked up by its name, then (another name, as a fork might use) found by a scan
    for name in (pager.cli.DISTRIBUTION, "no-such-distribution"):
        monkeypatch.setattr(pager.cli, "DISTRIBUTION", name)
        with pytest.raises(SystemExit) as exc:
            main(["--version"])
        assert exc.value.code == 0
        printed.append(capsys.readouterr().out)
    out = printed[0]
    assert out.startswith("pager ") and out.endswith("\n") and printed[1] == out
    assert out[len("pager "):-1] in (pager.__version__, *_installed_versions())


def _installed_versions() -> list[str]:
    from importlib import metadata

    return [metadata.version(d) for d in metadata.packages_distributions().get("pager", ())]


@pytest.mark.parametrize("argv, words", [
    (["proxy", "--store", "STORE", "--scope", "project"], ["--scope project", "--pool"]),
    (["inspect", "STORE", "--owner", "bob"], ["--owner", "--as"]),
    (["inspect", "STORE", "--as", "s1", "--format", "openai-chat"], ["--format", "--as"]),
    (["inspect", "NOWHERE"], ["no pager store"]),
])
def test_pool_identity_bad_argument(argv, words, tmp_path, capsys):
    """The pool flags of ``proxy`` and ``inspect``: refused before anything is served or printed."""
    with pager.open(tmp_path / "ctx", session="s1") as p:
        p.assemble({"messages": [{"role": "user", "content": "hello"}]})
    argv = [str(tmp_path / "ctx") if a == "STORE" else str(tmp_path / "nowhere") if a == "NOWHERE" else a
            for a in argv]
    assert_one_line(*run(argv, capsys), *words)
