"""One PostgreSQL test server for a whole pytest-xdist run, started by the first worker that needs it.

Each worker used to start its own server (``initdb`` and a start: ~1.7 s of CPU and 2-4 s of
a worker's wall time, then a second postmaster's memory). Now the first worker to ask starts
it and the others attach; the last one to leave stops it. Every test still gets a schema of
its own (``pg_dsn``), so sharing the server shares nothing a test can see.

The bookkeeping is a JSON file beside a lock file, in a folder the controller process makes
for the run and removes at its end (``RUN_DIR_KEY`` in each worker's ``workerinput``); the
controller also stops a server that a crashed worker left behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pager.lab.testing_pg import PostgresServer, start_server

RUN_DIR_KEY = "pager_pg_run_dir"
# both workers' tests on one server: twice one worker's peak (~80 connections), with room to spare
MAX_CONNECTIONS = 400


@contextmanager
def _locked(run_dir: Path) -> Iterator[Path]:
    with open(run_dir / "pg.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield run_dir / "pg.json"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(state: Path) -> PostgresServer | None:
    if not state.exists():
        return None
    d = json.loads(state.read_text())
    run_as = pwd.getpwuid(d["uid"]) if d["uid"] is not None else None
    return PostgresServer(bindir=Path(d["bindir"]), root=Path(d["root"]), port=d["port"], run_as=run_as)


def _users(state: Path) -> int:
    return int(json.loads(state.read_text())["users"]) if state.exists() else 0


def _write(state: Path, server: PostgresServer, users: int) -> None:
    uid = server.run_as.pw_uid if server.run_as is not None else None
    d = {"bindir": str(server.bindir), "root": str(server.root), "port": server.port, "uid": uid, "users": users}
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps(d))
    os.replace(tmp, state)


@contextmanager
def attach(run_dir: Path) -> Iterator[PostgresServer]:
    """Yield the run's server, starting it if no worker holds it now; stop it when the last one leaves."""
    with _locked(run_dir) as state:
        server = _read(state)
        if server is None:
            server = start_server(max_connections=MAX_CONNECTIONS)
        _write(state, server, _users(state) + 1)
    try:
        yield server
    finally:
        with _locked(run_dir) as state:
            left = _users(state) - 1
            if left > 0:
                _write(state, server, left)
            else:
                state.unlink(missing_ok=True)
                server.stop()


def stop_leftover(run_dir: Path) -> None:
    """Stop a server still recorded in ``run_dir`` (a worker that died before its teardown)."""
    with _locked(run_dir) as state:
        server = _read(state)
        if server is not None:
            state.unlink()
            server.stop()
