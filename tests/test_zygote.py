"""The zygote's children (tests/zygote.py) behave as ``python -c CODE`` does, for what the tests rely on."""

from __future__ import annotations

import subprocess
import sys

import zygote

CASES = [  # (code, argv): none imports pager, so a real interpreter starts quickly
    ("import sys, os; print(sys.argv[1:], os.getcwd(), os.environ['PAGER_ZYGOTE_PROBE']); sys.exit(3)", ["a", "b c"]),
    ("import os, signal; print('acked', flush=True); os.kill(os.getpid(), signal.SIGKILL)", []),
    ("import sys; sys.stderr.write('half'); raise ValueError('boom')", []),
    ("import os; os._exit(9)", []),
    ("import atexit, threading\natexit.register(print, 'atexit')\n"
     "threading.Thread(target=print, args=('thread',)).start()\nraise SystemExit('bye')", []),
    ("print(__name__, input())", []),
]


def test_a_child_runs_code_as_python_c_does(tmp_path):
    env = {**__import__("os").environ, "PAGER_ZYGOTE_PROBE": "probe"}
    for code, argv in CASES:
        args = [sys.executable, "-c", code, *argv]
        want = subprocess.run(args, input="typed\n", capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        got = zygote.run(args, input="typed\n", capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr), code


def test_a_child_talks_line_by_line_and_can_be_killed():
    code = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)"
    child = zygote.popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for n in range(3):
        child.stdin.write(f"{n}\n")
        child.stdin.flush()
        assert child.stdout.readline() == f"got {n}\n"
    assert child.poll() is None
    child.kill()
    assert child.wait(timeout=60) == -9
    child.stdout.close()
    child.stdin.close()


def test_input_a_child_never_reads_is_dropped_as_subprocess_drops_it():
    # more than a pipe holds: the write meets the closed pipe whatever the timing
    args = [sys.executable, "-c", "import os; os.close(0); print('gone')"]
    want = subprocess.run(args, input="x" * (1 << 20), capture_output=True, text=True, timeout=60)
    got = zygote.run(args, input="x" * (1 << 20), capture_output=True, text=True, timeout=60)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr) == (0, "gone\n", "")
