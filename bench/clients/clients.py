"""The three real clients: pinned versions, install, and how each is started headless at a base URL.

Versions are pinned here and nowhere else. Each run gets its own HOME (and
CODEX_HOME), so no user configuration leaks in and nothing leaks out; the API
key is a dummy; every process has a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import attrs

__all__ = ["CLIENTS", "PINS", "ClientRun", "install", "run_client"]

# Claude Code 2.1.316 is the newest 2.1.x that refuses an unchanged re-read ("Wasted call — file unchanged
# since your last Read"), the behaviour the proxy must serve; 2.1.317 to 2.1.332 (latest on 2026-12-01) answer
# re-reads in full here (bisected with the bed, see README.md), so they cannot test it.
PINS = {
    "claude": ("@anthropic-ai/claude-code", "2.1.316"),
    "codex": ("@openai/codex", "0.171.0"),
    "opencode": ("opencode-ai", "1.18.33"),
}
BINARIES = {"claude": "claude", "codex": "codex", "opencode": "opencode"}
CLIENTS = tuple(PINS)
MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.5", "opencode": "bed-coder"}
WIRE = {"claude": "anthropic", "codex": "openai", "opencode": "openai"}


def install(prefix: Path, timeout: float = 900.0) -> dict[str, str]:
    """Install the pinned clients under ``prefix`` (npm); return each one's ``--version`` line."""
    prefix.mkdir(parents=True, exist_ok=True)
    specs = [f"{pkg}@{ver}" for pkg, ver in PINS.values()]
    if any(_installed(prefix, pkg) != ver for pkg, ver in PINS.values()):
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel", "error",
                        *specs], check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    versions = {}
    for name, binary in BINARIES.items():
        home = prefix / "version-home"
        home.mkdir(exist_ok=True)
        out = subprocess.run([str(prefix / "node_modules/.bin" / binary), "--version"], capture_output=True, text=True,
                             timeout=60, env={**_base_env(home), "CODEX_HOME": str(home)})
        versions[name] = (out.stdout.strip().splitlines() or [out.stderr.strip()])[-1]
    return versions


def _installed(prefix: Path, pkg: str) -> str | None:
    try:
        return json.loads((prefix / "node_modules" / pkg / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _base_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "TERM": "dumb", "NO_COLOR": "1", "TMPDIR": str(home / "tmp")}


@attrs.define
class ClientRun:
    client: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    t_start: float
    timed_out: bool = False


def run_client(client: str, prefix: Path, repo: Path, home: Path, base_url: str, prompt: str,
               timeout: float = 600.0) -> ClientRun:
    """Run ``client`` headless in ``repo`` against ``base_url`` (the upstream or the proxy) until it ends."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    env = _base_env(home)
    binary = str(prefix / "node_modules/.bin" / BINARIES[client])
    if client == "claude":
        env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "dummy", "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "IS_SANDBOX": "1",
                "DISABLE_ERROR_REPORTING": "1"}
        argv = [binary, "-p", prompt, "--output-format", "json", "--dangerously-skip-permissions",
                "--model", MODELS[client], "--max-turns", "200"]
    elif client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{MODELS[client]}"\nmodel_provider = "bed"\napproval_policy = "never"\n'
            f'sandbox_mode = "danger-full-access"\n\n[model_providers.bed]\nname = "bed"\n'
            f'base_url = "{base_url}/v1"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"\n')
        env |= {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "dummy"}
        argv = [binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt]
    elif client == "opencode":
        config = home / "opencode.json"  # outside the repo: the repo's files are part of the outcome
        config.write_text(json.dumps({
            "$schema": "https://opencode.ai/config.json",
            "provider": {"bed": {"npm": "@ai-sdk/openai-compatible", "name": "bed",
                                 "options": {"baseURL": f"{base_url}/v1", "apiKey": "dummy"},
                                 "models": {"bed-coder": {"name": "bed-coder", "tool_call": True},
                                            "bed-small": {"name": "bed-small"}}}},
            "model": "bed/bed-coder", "small_model": "bed/bed-small", "autoupdate": False, "share": "disabled",
        }, indent=1))
        env |= {"OPENCODE_CONFIG": str(config), "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_MODELS_FETCH": "1"}
        argv = [binary, "run", prompt]
    else:
        raise ValueError(client)
    shared = prefix / "opencode-config"  # opencode installs its provider SDK here on first start (from npm)
    own = home / ".config" / "opencode"
    if client == "opencode" and shared.is_dir() and not own.exists():
        shutil.copytree(shared, own, symlinks=True)
    t0 = time.time()
    try:
        out = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        run = ClientRun(client, out.returncode, time.time() - t0, out.stdout, out.stderr, t0)
        if client == "opencode" and out.returncode == 0 and (own / "node_modules").is_dir() and not shared.exists():
            # later runs start from this copy: no npm traffic, and a start-up time that is the client's own
            shutil.copytree(own, shared, symlinks=True, ignore=shutil.ignore_patterns("opencode.json*"))
        return run
    except subprocess.TimeoutExpired as exc:
        return ClientRun(client, None, time.time() - t0, _text(exc.stdout), _text(exc.stderr), t0, timed_out=True)


def _text(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
