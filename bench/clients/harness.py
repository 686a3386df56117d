"""Start the scripted upstream and pager's proxy, run one scenario of one client, collect what happened.

A scenario run is: a fresh fixture repo, a fresh HOME, the client started
headless (once, or twice at once for ``pair``) against a base URL (the
upstream itself, or a proxy started for the run with a fresh store), and the
upstream log entries the run produced.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import uvicorn

from clients import MODELS, ClientRun, run_client
from fixture import make_repo
from upstream import Upstream

__all__ = ["Proxy", "RunResult", "free_port", "run_scenario", "start_upstream"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float, proc: subprocess.Popen[Any] | None = None) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")


def start_upstream() -> tuple[Upstream, int, uvicorn.Server]:
    """Serve a fresh ``Upstream`` on a free loopback port, in a thread of this process."""
    up = Upstream()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(up.app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_keep_alive=30))
    threading.Thread(target=server.run, daemon=True).start()
    _wait_port(port, 20)
    return up, port, server


@attrs.define
class Proxy:
    """``python -m pager proxy`` from ``pager_src``, started for one run with its own store."""

    pager_src: Path
    store: Path
    upstream_port: int
    args: tuple[str, ...] = ()
    port: int = 0
    proc: subprocess.Popen[Any] | None = None
    log_path: Path | None = None

    def __enter__(self) -> "Proxy":
        self.port = free_port()
        up = f"http://127.0.0.1:{self.upstream_port}"
        argv = [sys.executable, "-m", "pager", "proxy", "--store", str(self.store), "--port", str(self.port),
                "--upstream-anthropic", up, "--upstream-openai", up, *self.args]
        self.log_path = self.store.with_suffix(".log")
        env = {**os.environ, "PYTHONPATH": str(self.pager_src)}
        self.proc = subprocess.Popen(argv, cwd=self.pager_src, env=env, stdout=self.log_path.open("wb"),
                                     stderr=subprocess.STDOUT)
        _wait_port(self.port, 60, self.proc)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@attrs.define
class RunResult:
    client: str
    scenario: str
    mode: str  # direct / proxy
    tags: list[str]
    repo: Path
    runs: list[ClientRun]
    records: list[dict[str, Any]]
    files: dict[str, str]  # repo-relative path -> sha256 of the final content
    store: Path | None = None
    proxy_log: str = ""


def tree_hashes(repo: Path) -> dict[str, str]:
    out = {}
    for p in sorted(repo.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


PROMPTS = {
    "main": "[bed-task:{tag}] The test in run_tests.py fails. Find the bug in the inv package, fix it, check the "
            "tests pass, and report what each source file and docs/DESIGN.md is about.",
    "pair-a": "[bed-task:{tag}] Read src/inv/core.py, src/inv/util.py and docs/DESIGN.md and report their key constants.",
    "pair-b": "[bed-task:{tag}] Read src/inv/storage.py, src/inv/pricing.py and src/inv/report.py and report their key "
              "constants.",
}


def run_scenario(up: Upstream, up_port: int, client: str, scenario: str, mode: str, prefix: Path, work: Path,
                 pager_src: Path, proxy_args: tuple[str, ...], timeout: float) -> RunResult:
    """Run ``client`` through ``scenario`` (main / pair) in ``mode`` (direct / proxy)."""
    root = work / f"{client}-{scenario}-{mode}"
    repo = make_repo(root / "repo")
    parts = ["pair-a", "pair-b"] if scenario == "pair" else [scenario]
    tags = [f"{p}-{client}-{mode}" for p in parts]
    for t in tags:
        up.tasks[t] = {"client": client, "repo": str(repo), "model": MODELS[client]}
    start = len(up.log)

    def go(base_url: str) -> list[ClientRun]:
        with ThreadPoolExecutor(len(tags)) as pool:
            futs = [pool.submit(run_client, client, prefix, repo, root / f"home-{i}", base_url,
                                PROMPTS[parts[i] if parts[i] in PROMPTS else "main"].format(tag=t), timeout)
                    for i, t in enumerate(tags)]
            return [f.result() for f in futs]

    store = None
    proxy_log = ""
    if mode == "direct":
        runs = go(f"http://127.0.0.1:{up_port}")
    else:
        store = root / "store"
        with Proxy(pager_src, store, up_port, proxy_args) as px:
            runs = go(f"http://127.0.0.1:{px.port}")
        proxy_log = px.log_path.read_text(errors="replace") if px.log_path else ""
    for i, r in enumerate(runs):  # kept beside the run, for a person looking into a failed check
        (root / f"client-{i}.stdout").write_text(r.stdout)
        (root / f"client-{i}.stderr").write_text(r.stderr)
    time.sleep(0.2)  # the last stream's end time is set as its generator finishes
    records = up.log[start:]
    return RunResult(client, scenario, mode, tags, repo, runs, records, tree_hashes(repo), store, proxy_log)
