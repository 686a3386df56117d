"""Every code block of README.md and docs/*.md runs in the test suite.

- ``python`` blocks are executed. docs/api.md's each in a fresh namespace and an
  empty temporary directory; the other files' blocks in document order, each in
  a fresh namespace, in one sandbox directory per file (so a later block can use
  the store an earlier one made). Blocks that talk to a model provider
  (``from openai import OpenAI``) run against a fake client (``FakeOpenAI``)
  that answers from a script with the real SDK's response types and, as the
  provider does, refuses a request whose tool calls and results do not pair.
  Such a block is skipped only when the ``openai`` package is absent (the skip
  says so).
- ``bash``, ``sh`` and ``console`` blocks (in ``console``, the lines starting
  with ``$``) run line by line (``\\`` continuations joined, ``&&`` chains
  split), each ``pager ...`` / ``python -m pager ...`` command through
  ``pager.cli.main`` in that sandbox, expected to exit 0. Paths the examples
  name (``../shared/traces``, ``my-sessions/``, ``session.jsonl``,
  ``grid.json``, ...) are small synthetic sessions and files made by
  ``sandbox``; ``pager/data`` is the bundled data, but a command that replays
  "the bundled sessions" by default replays one small session instead, and
  every replay runs in this process (``--jobs`` defaults to 1 here), so the
  suite stays fast. Two kinds of command are not
  run, and the test says so: ``pip install ...`` (what CI's own run does) and
  ``python -m pytest`` (this test suite itself).
- ``json`` blocks must parse. Blocks with no language or ``text`` are output
  and diagrams, not code.

Synopses and option / report tables are checked against the code, so the docs
cannot drift silently.
"""

from __future__ import annotations

import re
import shlex
import sys
import types
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

import pager
from pager.core import heat
from pager.cli import build_parser, main
from pager.options import Options
from pager.report import Report

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DATA = ROOT / "pager" / "data"
DOC_FILES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SHELL = {"bash", "sh", "console"}
# Not run here: installs, the test suite itself, and PostgreSQL's own tools (docs/scale-out.md's
# backups need a server; tests/test_store_postgres.py exercises the store on a real one).
NOT_RUN = (("pip", "install"), ("python", "-m", "pytest"), ("pg_dump",), ("pg_restore",), ("psql",))
# Docs with a runner of their own (they start servers and fake framework models).
OWN_RUNNER = {"integrations.md": "tests/test_integrations_doc.py"}


def blocks(path: Path, lang: str) -> list[str]:
    """Return the fenced ```lang blocks of ``path`` in order."""
    if not path.exists():
        return []
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def all_blocks(path: Path) -> list[tuple[str, str]]:
    """Return every fenced block of ``path`` as ``(language, code)``, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def shell_commands(lang: str, block: str) -> list[list[str]]:
    """Return the commands of a shell block as word lists (``&&`` chains split)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            out.append(words[:cut])
            words = words[cut + 1:]
    return out


def pager_argv(words: list[str]) -> list[str] | None:
    """Return the arguments of a ``pager`` command, None for a command that is not run."""
    if words[:1] == ["pager"]:
        return words[1:]
    if words[:3] == ["python", "-m", "pager"]:
        return words[3:]
    if words[:3] == ["python", "-m", "pager.lab.fit"]:
        return ["fit", *words[3:]]  # run through pager.lab.fit.main (run_doc)
    if any(tuple(words[:len(k)]) == k for k in NOT_RUN):
        return None
    if words and "=" in words[0] and words[0].split("=", 1)[0].isupper():
        # an agent started with its base URL pointed at the proxy (claude, codex): a third-party
        # program; tests/test_integrations_doc.py runs these recipes with the real SDKs instead
        return None
    raise AssertionError(f"a documented command this test cannot run: {shlex.join(words)}")


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``tmp_path``; a policy an example registers does not outlive the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(heat, "POLICIES", dict(heat.POLICIES))
    return tmp_path


def run_block(code: str, name: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": name})  # noqa: S102 - our own docs


@pytest.mark.parametrize("index", range(len(blocks(DOCS / "api.md", "python"))))
def test_api_example_runs(index: int, isolated: Path) -> None:
    run_block(blocks(DOCS / "api.md", "python")[index], f"docs/api.md[{index}]")


# --------------------------------------------------------------------------
# A fake provider for the examples that call a model


class FakeOpenAI:
    """``openai.OpenAI`` for the docs: scripted answers as real SDK objects, no network.

    Answers in turn: a call of pager's ``recall`` tool, a call of the harness's
    ``bash`` tool, then a final text. Like the provider, it refuses (raises) a
    request in which a tool call goes unanswered or a tool result answers no call.
    """

    SCRIPT = (
        {"tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "recall", "arguments": '{"query": "test_config"}'}}]},
        {"tool_calls": [{"id": "call_2", "type": "function",
                         "function": {"name": "bash", "arguments": '{"command": "echo ok"}'}}]},
        {"content": "The failing test passes now."},
    )
    requests: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._create))

    def _create(self, **request: Any) -> Any:
        from openai.types.chat import ChatCompletion

        self._check_pairing(request["messages"])
        turn = len(FakeOpenAI.requests) % len(self.SCRIPT)
        FakeOpenAI.requests.append(request)
        message = {"role": "assistant", "content": None, **self.SCRIPT[turn]}
        prompt = sum(len(str(m.get("content") or "")) // 4 + 4 for m in request["messages"])
        return ChatCompletion.model_validate({
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0,
            "model": request["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 12,
                      "total_tokens": prompt + 12, "prompt_tokens_details": {"cached_tokens": 0}},
        })

    @staticmethod
    def _check_pairing(messages: list[dict[str, Any]]) -> None:
        open_calls: set[str] = set()
        for i, m in enumerate(messages):
            if m["role"] == "tool":
                if m.get("tool_call_id") not in open_calls:
                    raise ValueError(f"400: messages[{i}]: a tool result answers no tool call")
                open_calls.discard(m["tool_call_id"])
            else:
                if open_calls:
                    raise ValueError(f"400: messages[{i}]: tool calls {sorted(open_calls)} unanswered")
                if m["role"] == "assistant":
                    open_calls = {c["id"] for c in m.get("tool_calls") or ()}


def needs_provider(code: str) -> bool:
    return "from openai import OpenAI" in code


# --------------------------------------------------------------------------
# The sandbox the examples run in


def small_session(path: Path, sid: str, steps: int) -> None:
    """Write a short coding session: a task, then ``steps`` tool calls and results, an answer."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix parse_config in src/app/config_{sid}.py"}]
    for i in range(steps):
        cid = f"call_{i}"
        args = orjson.dumps({"command": f"grep -n parse_config src/app/mod_{i % 4}.py"}).decode()
        msgs.append({"role": "assistant", "content": f"Step {i}: look at mod_{i % 4}.py",
                     "tool_calls": [{"id": cid, "type": "function",
                                     "function": {"name": "bash", "arguments": args}}]})
        msgs.append({"role": "tool", "tool_call_id": cid,
                     "content": "".join(f"{i}{j}: value_{j} = parse_config(path_{j})\n"
                                        for j in range(12))})
    msgs.append({"role": "assistant", "content": "parse_config in src/app/mod_1.py is fixed."})
    head = {"type": "session", "id": sid, "source": "docs-test"}
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in (head, *msgs)))


def sandbox(root: Path) -> Path:
    """Make the files the examples name; return the working directory (``root/work``)."""
    work = root / "work"
    (work / "pager").mkdir(parents=True)
    (work / "pager" / "data").symlink_to(DATA, target_is_directory=True)
    traces = root / "shared" / "traces"  # ../shared/traces as seen from work/
    traces.mkdir(parents=True)
    small_session(traces / "a.jsonl", "trace-a", 10)
    small_session(traces / "b.jsonl", "trace-b", 11)
    for folder in ("my-sessions", "held-out", "held-out-sessions", "more/sessions"):
        (work / folder).mkdir(parents=True)
        small_session(work / folder / "s.jsonl", folder.replace("/", "-"), 10)
    small_session(work / "session.jsonl", "session", 6)
    (work / "variants.json").write_text('[{"name": "from-file", "high_watermark": 20000}]')
    (work / "grid.json").write_text('{"low_watermark": [6000, 8000]}')
    (work / "tuned.json").write_text('{"options": {"high_watermark": 32000}}')
    return work


def fast(monkeypatch: pytest.MonkeyPatch, work: Path) -> None:
    """Replay in this process, and one small session where the bundled ones are the default."""
    from pager.lab.cli import common as common_cli
    from pager.lab.cli import replay as replay_cli

    monkeypatch.setattr(common_cli, "default_jobs", lambda: 1)
    # the examples' tune runs replay a sample of 4 configurations, not 48: the docs are checked
    # for running as written, the tuning itself by tests/test_tune.py
    from pager.lab import tune as tune_mod

    real_cap = tune_mod.cap
    monkeypatch.setattr(tune_mod, "cap", lambda candidates, max_points, **kw: real_cap(
        candidates, min(max_points, 4), **kw))
    monkeypatch.setattr(replay_cli, "example_paths", lambda: [work / "session.jsonl"])


def run_doc(path: Path, work: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run every block of ``path`` in ``work``; return the commands that were not run."""
    not_run = []
    if path.name in OWN_RUNNER:
        return [f"every block: run by {OWN_RUNNER[path.name]}"]
    for i, (lang, code) in enumerate(all_blocks(path)):
        where = f"{path.relative_to(ROOT)}[{i}]"
        if lang == "python":
            if path.name == "api.md":
                continue  # each block on its own: test_api_example_runs
            FakeOpenAI.requests = []
            run_block(code, where)
        elif lang in SHELL:
            for words in shell_commands(lang, code):
                argv = pager_argv(words)
                if argv is None or argv[:1] in (["proxy"], ["mcp"], ["ui"]):
                    # servers run until stopped: tests/test_integrations_doc.py starts them as
                    # subprocesses and runs the recipes against them
                    not_run.append(shlex.join(words))
                    continue
                try:
                    if argv[:1] == ["fit"]:
                        from pager.lab.fit import main as fit_main

                        rc = fit_main(argv[1:])
                    else:
                        rc = main(argv)
                except SystemExit as exc:
                    rc = exc.code
                out, err = capsys.readouterr()
                assert rc == 0, f"{where}: pager {shlex.join(argv)} exited {rc}\n{out}\n{err}"
        elif lang == "json":
            orjson.loads(code)
    return not_run


# conftest.GROUPS' group of the tests that import an SDK costing seconds of CPU (anthropic ~3.5 s):
# a doc whose examples import one runs on the worker that imports it anyway, not on both
SDK_GROUP = "sdk"
SDK_IMPORT = re.compile(r"^\s*(?:import|from)\s+anthropic\b", re.M)


def doc_param(path: Path) -> Any:
    heavy = any(SDK_IMPORT.search(code) for lang, code in all_blocks(path) if lang == "python")
    return pytest.param(path, id=path.name, marks=[pytest.mark.xdist_group(SDK_GROUP)] if heavy else [])


@pytest.mark.parametrize("path", [doc_param(p) for p in DOC_FILES])
def test_doc_code_blocks_run(path: Path, isolated: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    codes = [code for lang, code in all_blocks(path) if lang == "python"]
    if any(needs_provider(c) for c in codes):
        openai = pytest.importorskip("openai", reason=f"{path.name}'s examples call a model "
                                     "through the openai package, which is not installed")
        monkeypatch.setattr(openai, "OpenAI", FakeOpenAI)
    work = sandbox(isolated)
    monkeypatch.chdir(work)
    fast(monkeypatch, work)
    not_run = run_doc(path, work, capsys)
    for cmd in not_run:
        print(f"{path.name}: not run here: {cmd}")


def test_readme_tool_loop_pairs_calls_and_results(isolated: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    openai = pytest.importorskip("openai", reason="the README's loop needs the openai package")
    monkeypatch.setattr(openai, "OpenAI", FakeOpenAI)
    work = sandbox(isolated)
    monkeypatch.chdir(work)
    loop = next(c for c in blocks(ROOT / "README.md", "python") if "call_tool" in c)
    FakeOpenAI.requests = []
    run_block(loop, "README.md[tool loop]")
    # three model calls: recall answered by pager, bash by the harness, then the answer
    assert len(FakeOpenAI.requests) == 3
    last = FakeOpenAI.requests[-1]["messages"]
    assert [m["role"] for m in last[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert {t["function"]["name"] for t in FakeOpenAI.requests[0]["tools"]} >= {"recall", "bash"}


def test_shell_blocks_parse() -> None:
    assert shell_commands("bash", "pager a b  # note\npip install . && python -m pager x \\\n  --y\n") == [
        ["pager", "a", "b"], ["pip", "install", "."], ["python", "-m", "pager", "x", "--y"]]
    assert shell_commands("console", "$ pager state resume s/\n===== out =====\n") == [
        ["pager", "state", "resume", "s/"]]
    with pytest.raises(AssertionError):
        pager_argv(["curl", "http://x"])


def _subparsers(parser):  # argparse keeps them on a private action
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


def test_cli_synopses_match_argparse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    subs = _subparsers(build_parser())
    parsers = {name: p for name, p in subs.items()}
    for group in ("state", "pool"):
        for action, p in _subparsers(subs[group]).items():
            parsers[f"{group} {action}"] = p
    for name, parser in parsers.items():
        usage = parser.format_usage().strip()
        assert usage in text, f"docs/cli.md lacks the synopsis of pager {name}:\n{usage}"
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, f"docs/cli.md does not describe {flag} of pager {name}"


def test_api_tables_cover_every_option_and_report_field() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in Options.names():
        assert f"| `{name}` |" in text, f"docs/api.md: option {name} is not in the table"
    for field in attrs.fields(Report):
        assert re.search(rf"^\|[^\n]*`{field.name}`", text, re.M), f"docs/api.md: Report.{field.name} missing"
    for name in pager.__all__:
        if name.endswith("Error"):
            assert name in text, f"docs/api.md: {name} is not in the error tree"
