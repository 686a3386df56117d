"""Start ``python -c CODE`` writer processes without paying an interpreter start and pager's imports each time.

A test that needs another process (two writers on one store, a writer killed by SIGKILL)
used to start ``python -c CODE``: ~1 s of CPU before the code's first line (the
interpreter, ``import pager``, the tokenizer's tables), for code that then ran for a
fraction of that. Here one helper process per pytest worker (the zygote) imports pager
and loads the tokenizer once, single-threaded, and forks a child for each request: the
child is a process of its own, with its own memory, stdin, stdout, stderr, working folder,
environment and ``sys.argv``, that runs CODE as ``python -c`` would (``__name__ ==
"__main__"``, exit status from ``SystemExit``, a traceback and status 1 for an uncaught
error, atexit handlers run); SIGKILL kills it as it kills any process, and its exit
status comes back as ``subprocess`` reports it (``-9``).

What differs from a fresh interpreter: the modules the zygote imported were imported
before CODE ran (a test about what ``import pager`` itself does must start
``sys.executable``), and variables of the environment read at import time were read
when the zygote started. Nothing of a store is opened in the zygote: each child opens
its own.

``popen`` and ``run`` take the arguments of ``subprocess.Popen`` and ``subprocess.run``
that the tests use, with ``[sys.executable, "-c", CODE, *argv]`` as ``args``.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
from typing import IO, Any

_SERVER = r"""
import atexit, builtins, json, os, select, signal, socket, struct, sys, threading

sock = socket.socket(fileno=int(sys.argv[1]))
import pager, pager.pager  # what every child needs, imported once
from pager.core.tokens import default_counter

default_counter().count("warm")  # the tokenizer's tables
try:
    import pager.storage.postgres  # psycopg, for the PostgreSQL writers
except ImportError:  # the PostgreSQL extra is not installed: its tests are skipped
    pass
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears of exits
status = {}  # child pid -> the fd its exit status is written to


def exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def child(req, fds):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    os.close(wake_r)
    os.close(wake_w)
    for fd in (fds[3], *status.values()):  # exit-status pipes: this one's and its running siblings'
        os.close(fd)
    for target, fd in zip((0, 1, 2), fds[:3]):
        os.dup2(fd, target)
    for fd in set(fds[:3]):
        if fd > 2:
            os.close(fd)
    if req["cwd"] is not None:
        os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["-c", *req["argv"]]
    code = 0
    try:
        exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # from CODE's first frame, as python -c prints it
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        threading._shutdown()  # as the interpreter does at exit: wait for non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def reap():
    while status:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status.pop(pid, None)
        if fd is not None:
            os.write(fd, str(os.waitstatus_to_exitcode(st)).encode())
            os.close(fd)


while True:
    ready, _, _ = select.select([sock, wake_r], [], [])
    if wake_r in ready:
        try:
            while os.read(wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        reap()
    if sock in ready:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 22, 4)
        if not msg:  # the test process is gone
            break
        pid = os.fork()
        if pid == 0:
            child(json.loads(msg), fds)
        for fd in set(fds[:3]):
            os.close(fd)
        status[pid] = fds[3]
        sock.send(struct.pack("i", pid))
"""

_zygote: tuple[int, socket.socket, subprocess.Popen[bytes]] | None = None
_lock = threading.Lock()


def _server() -> socket.socket:
    """Return the socket to this process's zygote, starting it at the first use (again after a fork)."""
    global _zygote
    if _zygote is not None and _zygote[0] == os.getpid():
        return _zygote[1]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            stdin=subprocess.DEVNULL, env=env)  # this checkout's pager, whatever the folder
    theirs.close()
    _zygote = (os.getpid(), ours, proc)
    return ours


@atexit.register
def _stop() -> None:
    if _zygote is not None and _zygote[0] == os.getpid():
        _zygote[1].close()  # the zygote reads end-of-file and exits
        _zygote[2].wait(timeout=30)


class Child:
    """A process forked by the zygote, with the part of ``subprocess.Popen``'s interface the tests use."""

    def __init__(self, args: list[str], pid: int, status: int, stdin: IO[Any] | None, stdout: IO[Any] | None,
                 stderr: IO[Any] | None) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._status = status

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._read_status()
        assert self.returncode is not None
        return self.returncode

    def _read_status(self) -> None:
        data = os.read(self._status, 64)  # written in one write (under PIPE_BUF: whole), then closed
        os.close(self._status)
        self.returncode = int(data)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this child's
            os.kill(self.pid, sig)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Send ``input``, read stdout and stderr to their end (each on a thread: neither pipe can fill), wait."""
        out: dict[str, Any] = {}
        readers = [threading.Thread(target=lambda n=name, f=f: out.__setitem__(n, f.read()), daemon=True)
                   for name, f in (("stdout", self.stdout), ("stderr", self.stderr)) if f is not None]
        for t in readers:
            t.start()
        if self.stdin is not None:
            # as subprocess.communicate: a child that exited without reading its input is not an error
            try:
                if input:
                    self.stdin.write(input)
            except BrokenPipeError:
                pass
            try:
                self.stdin.close()  # closed even when its flush fails
            except BrokenPipeError:
                pass
        for t in readers:
            t.join(timeout)
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(timeout)
        return out.get("stdout"), out.get("stderr")


def _end(spec: Any, mode: str, text: bool) -> tuple[int, IO[Any] | None]:
    """Return (the child's fd, the test's file object or None) for one of stdin/stdout/stderr."""
    if spec is subprocess.PIPE:
        r, w = os.pipe()
        child_fd, ours = (r, w) if mode == "w" else (w, r)
        f = os.fdopen(ours, mode + ("" if text else "b"))
        return child_fd, f
    if spec is None:
        return (os.open(os.devnull, os.O_RDONLY) if mode == "w" else os.dup(1 if mode == "r" else 2)), None
    if spec is subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDONLY if mode == "w" else os.O_WRONLY), None
    return os.dup(spec if isinstance(spec, int) else spec.fileno()), None


def popen(args: list[str], *, stdin: Any = None, stdout: Any = None, stderr: Any = None, text: bool = False,
          cwd: Any = None, env: dict[str, str] | None = None) -> Child:
    """Start ``args`` (``[sys.executable, "-c", CODE, *argv]``) as a child of the zygote; see the module docstring.

    ``stdin=None`` is the null device (the tests never hand theirs on); ``stdout``/``stderr=None``
    are this process's own, as with ``subprocess``.
    """
    if len(args) < 3 or args[0] != sys.executable or args[1] != "-c":
        raise ValueError(f"the zygote runs `{sys.executable} -c CODE ...`, not {args[:2]}")
    ends = [_end(stdin, "w", text), _end(stdout, "r", text), _end(stderr if stderr is not subprocess.STDOUT
                                                                   else None, "r", text)]
    if stderr is subprocess.STDOUT:
        os.close(ends[2][0])
        ends[2] = (os.dup(ends[1][0]), None)
    status_r, status_w = os.pipe()
    req = {"code": str(args[2]), "argv": [str(a) for a in args[3:]], "cwd": None if cwd is None else str(cwd),
           "env": dict(os.environ if env is None else env)}
    fds = [ends[0][0], ends[1][0], ends[2][0], status_w]
    try:
        with _lock:
            sock = _server()
            socket.send_fds(sock, [json.dumps(req).encode()], fds)
            (pid,) = struct.unpack("i", sock.recv(4))
    finally:
        for fd in fds:
            os.close(fd)  # the zygote holds its copies
    return Child(list(map(str, args)), pid, status_r, ends[0][1], ends[1][1], ends[2][1])


def run(args: list[str], *, input: Any = None, capture_output: bool = False, text: bool = False,
        timeout: float | None = None, check: bool = False, cwd: Any = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` for a zygote child (the arguments the tests use)."""
    pipe = subprocess.PIPE if capture_output else None
    child = popen(args, stdin=subprocess.PIPE if input is not None else None, stdout=pipe, stderr=pipe, text=text,
                  cwd=cwd, env=env)
    try:
        out, err = child.communicate(input, timeout)
    except BaseException:
        child.kill()
        child.wait()
        raise
    if check and child.returncode:
        raise subprocess.CalledProcessError(child.returncode, args, out, err)
    return subprocess.CompletedProcess(args, child.returncode, out, err)
