"""Every recipe of docs/integrations.md, executed against servers started here on 127.0.0.1.

The proxy recipe runs as written (``python -m pager proxy``, in a subprocess)
with the provider URLs pointed at a canned model server and a free port for
8787; the other recipes then talk to that proxy. Lines of a python recipe
ending in ``# yours`` make a real client or model: the test drops them and
supplies a local one under the same name.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
from lazy import lazy_module  # noqa: E402

anthropic = lazy_module("anthropic")  # at first use: tests/lazy.py

import httpx  # noqa: E402

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

from pager.proxy import ServerThread  # noqa: E402
from proxy_upstream import make_upstream  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "integrations.md"
KEY = "sk-test-DOC-SECRET-1b2c"
PLACEHOLDER = "http://127.0.0.1:8787"


def _wait_listening(proc: subprocess.Popen, port: int) -> None:
    """Wait until the started ``pager proxy`` accepts connections on ``port``; fail with its output if it exits."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"pager proxy did not start: {proc.stdout.read().decode()[-2000:]}")
            time.sleep(0.05)


def recipes() -> dict[str, tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"<!-- recipe: ([\w-]+) -->\n```(\w+)\n(.*?)^```", text, re.S | re.M)
    return {name: (lang, body) for name, lang, body in found}


RECIPES = recipes()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("integrations")
    up_app = make_upstream()
    with ServerThread(up_app, graceful=1.0) as up:
        argv = shlex.split(RECIPES["proxy"][1].replace("\\\n", " "))
        assert argv[:4] == ["python", "-m", "pager", "proxy"]
        port = _free_port()
        swap = {"8787": str(port), "https://api.openai.com": up, "https://api.anthropic.com": up}
        argv = [sys.executable, *[swap.get(a, a) for a in argv[1:]]]
        proc = subprocess.Popen(argv, cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        _wait_listening(proc, port)
        info = {"url": url, "upstream": up, "up_app": up_app, "work": work, "proc": proc}
        try:
            yield info
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def _subst(text: str, servers: dict[str, Any]) -> str:
    return text.replace(PLACEHOLDER, servers["url"])


def _env_line(name: str, servers: dict[str, Any]) -> dict[str, str]:
    """Return the VAR=value assignments leading the recipe's command."""
    words = shlex.split(_subst(RECIPES[name][1], servers))
    return dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))


def _run_python(name: str, namespace: dict[str, Any], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    lang, body = RECIPES[name]
    assert lang == "python"
    kept = "\n".join(line for line in body.splitlines() if not line.rstrip().endswith("# yours"))
    monkeypatch.chdir(cwd)
    exec(compile(kept, f"docs/integrations.md[{name}]", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


def test_every_recipe_is_tested():
    assert set(RECIPES) == {
        "proxy", "claude-code", "codex", "openai-env", "openai-python", "aio", "langchain", "langgraph",
        "openai-agents", "litellm", "mcp-claude", "mcp-codex", "upstream-module", "proxy-upstream",
    }


def test_an_upstream_added_by_a_loaded_module(servers, tmp_path):
    # the module recipe as a file, the command recipe as written: a new route to a new upstream
    (tmp_path / "gateway_upstream.py").write_text(RECIPES["upstream-module"][1], encoding="utf-8")
    argv = shlex.split(RECIPES["proxy-upstream"][1].replace("\\\n", " "))
    assert argv[:4] == ["python", "-m", "pager", "proxy"] and "--load" in argv
    port = _free_port()
    swap = {"8788": str(port), "gateway=http://127.0.0.1:4000": "gateway=" + servers["upstream"]}
    argv = [sys.executable, *[swap.get(a, a) for a in argv[1:]]]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, port)
        base = f"http://127.0.0.1:{port}/gateway/v1"
        with openai.OpenAI(base_url=base, api_key=KEY, max_retries=0) as client:
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "via the gateway"}])
        assert reply.choices[0].message.content == "echo: via the gateway"
        path, headers, _ = servers["up_app"].state.seen[-1]
        assert path == "/v1/chat/completions" and headers["authorization"] == f"Bearer {KEY}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_openai_clients_through_the_proxy(servers, monkeypatch, tmp_path):
    for var, value in _env_line("openai-env", servers).items():
        monkeypatch.setenv(var, value)
    with openai.OpenAI(api_key=KEY, max_retries=0) as client:  # base URL from the recipe's variable
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi from env"}])
    assert reply.choices[0].message.content == "echo: hi from env"
    with openai.OpenAI(base_url=servers["url"] + "/v1", api_key=KEY, max_retries=0) as client:
        ns = _run_python("openai-python", {"client": client}, tmp_path, monkeypatch)
    assert ns["reply"].choices[0].message.content == "echo: Fix the failing test."


def test_claude_code_recipe(servers, monkeypatch):
    env = _env_line("claude-code", servers)
    assert shlex.split(RECIPES["claude-code"][1])[-1] == "claude"
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    client = anthropic.Anthropic(api_key=KEY, max_retries=0)  # base URL from ANTHROPIC_BASE_URL, as Claude Code
    counted = client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hello there"}])
    assert counted.input_tokens > 0
    reply = client.messages.create(model="m", max_tokens=50, system="You are Claude Code.",
                                   messages=[{"role": "user", "content": "hi from claude"}])
    assert reply.content[0].text == "echo: hi from claude"


def test_codex_recipe(servers, monkeypatch):
    cfg = tomllib.loads(_subst(RECIPES["codex"][1], servers))
    provider = cfg["model_providers"][cfg["model_provider"]]
    assert provider["wire_api"] == "responses"
    monkeypatch.setenv(provider["env_key"], KEY)
    # what Codex sends: POST {base_url}/responses with the key from env_key
    r = httpx.post(provider["base_url"] + "/responses", timeout=30,
                   headers={"authorization": f"Bearer {os.environ[provider['env_key']]}"},
                   json={"model": "m", "instructions": "You are Codex.",
                         "input": [{"role": "user", "content": "hi from codex"}]})
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "echo: hi from codex"


def test_async_recipe(monkeypatch, tmp_path, capsys):
    _run_python("aio", {"__name__": "recipe"}, tmp_path, monkeypatch)
    assert int(capsys.readouterr().out.strip()) > 0
    assert (tmp_path / "ctx").is_dir()


def _fake_chat_model(text: str) -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    return GenericFakeChatModel(messages=iter([AIMessage(content=text, usage_metadata={
        "input_tokens": 30, "output_tokens": 3, "total_tokens": 33, "input_token_details": {"cache_read": 20}})]))


def test_langchain_recipes(monkeypatch, tmp_path):
    pytest.importorskip("langchain")
    ns = _run_python("langchain", {"model": _fake_chat_model("fixed")}, tmp_path, monkeypatch)
    assert ns["result"]["messages"][-1].content == "fixed"
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="create_react_agent has been moved")
        (tmp_path / "lg").mkdir()
        ns = _run_python("langgraph", {"model": _fake_chat_model("graph fixed")}, tmp_path / "lg", monkeypatch)
    assert ns["result"]["messages"][-1].content == "graph fixed"


def test_openai_agents_recipe(monkeypatch, tmp_path):
    pytest.importorskip("agents")
    from agents import Agent
    from test_adapter_openai_agents import _sdk  # its RecordingModel, built at first use

    agent = Agent(name="coder", instructions="You are a coding agent.", model=_sdk().RecordingModel())
    ns = _run_python("openai-agents", {"agent": agent}, tmp_path, monkeypatch)
    assert ns["result"].final_output == "done"


def test_litellm_recipe(servers, monkeypatch, tmp_path):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    # the provider is the canned model server, as a user's environment would name theirs
    monkeypatch.setenv("OPENAI_BASE_URL", servers["upstream"] + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    saved = list(litellm.callbacks)
    try:
        ns = _run_python("litellm", {}, tmp_path, monkeypatch)
    finally:
        litellm.callbacks = saved
    assert ns["reply"].choices[0].message.content == "echo: Fix the failing test."


def test_mcp_recipes(monkeypatch, tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    import pager

    claude = shlex.split(RECIPES["mcp-claude"][1])
    codex = tomllib.loads(RECIPES["mcp-codex"][1])["mcp_servers"]["pager"]
    assert claude[claude.index("--") + 1:] == [codex["command"], *codex["args"]]  # one server, two clients
    with pager.open(tmp_path / "ctx", session="s1") as p:
        p.assemble({"model": "m", "messages": [{"role": "user", "content": "remember ZEBRA-42"}]})
        p.search("ZEBRA")  # commits the index
    params = StdioServerParameters(command=sys.executable, args=codex["args"], env=_env(), cwd=str(tmp_path))

    async def go() -> list[str]:
        async with Client(params, read_timeout_seconds=60) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    assert asyncio.run(go()) == ["expand", "note", "recall", "search"]


def test_proxy_recipe_shuts_down_gracefully(servers):
    # last in the module: the proxy the recipes used stops on SIGTERM with exit code 0
    proc = servers["proc"]
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal it caught, as servers do
    assert proc.wait(30) in (0, -signal.SIGTERM)
    log = proc.stdout.read().decode()
    assert "Finished server process" in log
    assert KEY not in log
