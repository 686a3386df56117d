"""SIGKILL campaign: children work on a store and are killed at random; the parent reopens and checks.

Each round forks a child (from a fork server that has already imported
pager, so a round costs milliseconds, not an interpreter start) that works
on one session of a store in a temp dir, in one of four ways:

- ``assemble``: extends the session's conversation request by request (as a
  harness would, continuing from what the store holds) and adds notes,
  appending an acknowledgement line after each call returned;
- ``open``: opens and closes the session over and over, after the parent
  damaged the index (removed it, truncated or removed one of its files,
  planted a stale ``.del`` file) so that opening has healing to do;
- ``reindex``: rebuilds the index, through ``Pager.reindex`` and ``pager reindex``;
- ``export``: runs ``pager state export`` into a state directory.

The parent kills it with SIGKILL after a random delay, then reopens the
store (which heals the index) and checks it against the acknowledgements:
the store opens, no acknowledged message or note is lost, nothing is stored
twice, and every stored page is in the recall index. Counts are returned.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import chaos_common as cc
from pager.lab.replay.parallel import worker_context
import pager

FOCUS = (("assemble", 0.45), ("open", 0.2), ("reindex", 0.2), ("export", 0.15))
SESSIONS = ("alpha", "beta", "gamma")
STEPS = 120  # conversation length (steps of about two messages)
ROUNDS_PER_STORE = 40  # a fresh store now and then keeps reopen checks cheap


def _ack(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())  # one write(2): a kill leaves a whole line or none


def child(store: str, session: str, focus: str, ack_path: str, state_dir: str, seed: int,
          history: list[dict[str, Any]]) -> None:
    """Work on ``store`` until killed (or a few seconds passed); ``history`` is the session's conversation."""
    import pager
    from pager.cli import main as cli

    r = random.Random(seed)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    stop = time.monotonic() + 8.0
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)  # the CLI prints what it wrote; nobody reads it
    with open(ack_path + ".err", "w") as err:
        os.dup2(err.fileno(), 2)  # a child's traceback, shown if it dies of an error
    while time.monotonic() < stop:
        if focus == "open":
            pager.open(store, session=session, log_reports=False).close()
            _ack(fd, "opened")
        elif focus == "reindex":
            if r.random() < 0.5:
                with pager.open(store, session=session, log_reports=False) as p:
                    p.reindex()
            else:
                cli(["reindex", store])
            _ack(fd, "reindexed")
        elif focus == "export":
            cli(["state", "export", store, state_dir, "--session", session])
            _ack(fd, "exported")
        else:
            with pager.open(store, session=session, log_reports=r.random() < 0.5) as p:
                _ack(fd, "ready")
                for _ in range(r.randrange(1, 12)):
                    n = cc.next_boundary(history, len(p.history))
                    if n is None:
                        return
                    p.assemble({"messages": history[:n]})
                    _ack(fd, f"msg {session} {n}")
                    if r.random() < 0.2:
                        text = f"note {session} {seed} {n}"
                        p.note(text)
                        _ack(fd, f"note {session} {text}")
    os.close(fd)


def _holders(store: Path) -> list[str]:
    """Return the processes that have a file of ``store`` open (a diagnosis for a failed reopen)."""
    out = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                target = os.readlink(fd)
                if target.startswith(str(store)):
                    out.append(f"{fd_dir.parent.name}:{target[len(str(store)):]}")
        except OSError:
            continue
    return out


def _wait_for(path: Path, marker: bytes, proc: Any, bound: float) -> None:
    """Wait until ``path`` holds ``marker`` (or the child died, or ``bound`` seconds passed)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and proc.is_alive():
        if marker in path.read_bytes():
            return
        time.sleep(0.01)


def _damage(index_dir: Path, r: random.Random) -> str:
    """Damage the derived index the way a crash or an operator might; return what was done."""
    if not index_dir.exists():
        return "none"
    files = [f for f in index_dir.iterdir() if f.is_file() and not f.name.startswith(".tantivy")]
    how = r.choice(("none", "remove", "truncate", "unlink", "stale-del", "meta"))
    if how == "remove":
        shutil.rmtree(index_dir, ignore_errors=True)
    elif how in ("truncate", "unlink") and files:
        f = r.choice(files)
        if how == "truncate":
            with open(f, "r+b") as fh:
                fh.truncate(max(0, f.stat().st_size // 2))
        else:
            f.unlink()
    elif how == "stale-del" and files:
        seg = r.choice(files).name.split(".")[0]
        (index_dir / f"{seg}.7.del").write_bytes(b"\x00" * 16)
    elif how == "meta" and (index_dir / "meta.json").exists():
        (index_dir / "meta.json").write_text("{not json")
    return how


def run(kills: int, *, seed: int = 0, max_delay: float = 1.2, workdir: str | None = None,
        log: Any = None, wait_ready: float = 0.8) -> dict[str, Any]:
    """Run rounds until ``kills`` children were killed mid-work; return the counts."""
    r = random.Random(seed)
    ctx = worker_context()  # children start with pager and the tokenizer loaded
    counts: dict[str, Any] = {
        "kills": 0, "rounds": 0, "finished_before_kill": 0, "child_errors": 0, "exit_status_unknown": 0,
        "unopenable": 0,
        "lost": 0, "duplicates": 0, "wrong_content": 0, "missing_from_index": 0, "phantoms": 0,
        "acked_messages": 0, "acked_notes": 0, "by_focus": {f: 0 for f, _ in FOCUS}, "damage": {},
        "failures": [],
    }
    base = Path(tempfile.mkdtemp(prefix="pager-chaos-kill-", dir=workdir))
    store = base / "store0"
    acked: dict[str, int] = {}
    notes: dict[str, set[str]] = {}
    try:
        while counts["kills"] < kills:
            if counts["rounds"] % ROUNDS_PER_STORE == 0:
                shutil.rmtree(store, ignore_errors=True)
                store = base / f"store{counts['rounds']}"
                acked, notes = {}, {}
                for s in SESSIONS:  # every session exists, so export and reindex have work
                    with pager.open(store, session=s, log_reports=False) as p:
                        p.assemble({"messages": cc.conversation(s, STEPS)[:2]})
                    acked[s] = 2
            counts["rounds"] += 1
            session = r.choice(SESSIONS)
            focus = r.choices([f for f, _ in FOCUS], [w for _, w in FOCUS])[0]
            if focus == "open" or r.random() < 0.1:
                how = _damage(store / "index", r)
                counts["damage"][how] = counts["damage"].get(how, 0) + 1
            ack_path = base / "acks"
            ack_path.write_bytes(b"")
            Path(str(ack_path) + ".err").unlink(missing_ok=True)
            # the conversation travels with the child (drawn once here, not again in every child)
            proc = ctx.Process(target=child, args=(str(store), session, focus, str(ack_path),
                                                   str(base / "state"), r.randrange(1 << 30),
                                                   cc.conversation(session, STEPS)))
            proc.start()
            if focus == "assemble" and r.random() < wait_ready:
                # opening takes a few hundred ms on a loaded machine: wait until the child has opened
                # the store, so that most kills land inside assemble / note, not inside open
                _wait_for(ack_path, b"ready", proc, 10.0)
            time.sleep(r.uniform(0.0, max_delay))
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            err_file = Path(str(ack_path) + ".err")
            if proc.exitcode == 255 and "Traceback (most recent call last)" not in (
                    err_file.read_text(errors="replace") if err_file.exists() else ""):
                # multiprocessing's placeholder when the fork server's report of a child's exit could
                # not be read: the child's status is unknown (the store is checked all the same). Its
                # stderr may hold pager's own log lines (a damaged index set aside and rebuilt, as this
                # harness damages it): only a traceback says the child failed
                counts["exit_status_unknown"] += 1
            elif proc.exitcode == -signal.SIGKILL:
                counts["kills"] += 1
                counts["by_focus"][focus] += 1
            elif proc.exitcode == 0:
                counts["finished_before_kill"] += 1
            else:
                counts["child_errors"] += 1
                err_file = Path(str(ack_path) + ".err")
                err = err_file.read_text(errors="replace")[-800:] if err_file.exists() else "(no stderr)"
                counts["failures"].append(f"round {counts['rounds']}: {focus} child exited {proc.exitcode}: {err}")
            for line in ack_path.read_text().splitlines():
                parts = line.split(" ", 2)
                if parts[0] == "msg":
                    acked[parts[1]] = max(acked.get(parts[1], 0), int(parts[2]))
                    counts["acked_messages"] += 1
                elif parts[0] == "note":
                    notes.setdefault(parts[1], set()).add(parts[2])
                    counts["acked_notes"] += 1
            try:
                faults = cc.check_store(store, acked, notes, STEPS)
            except Exception as exc:  # noqa: BLE001 - an unopenable store is what we count
                counts["unopenable"] += 1
                counts["failures"].append(f"round {counts['rounds']}: reopen failed after {focus}: {exc!r}; "
                                          f"holders: {_holders(store)}")
                if log:
                    log(traceback.format_exc())
                shutil.rmtree(store / "index", ignore_errors=True)  # go on with the campaign
                continue
            for k, v in faults.items():
                counts[k] += v
            if any(faults.values()):
                counts["failures"].append(f"round {counts['rounds']} ({focus}): {faults}")
            if log and counts["rounds"] % 50 == 0:
                log(f"kills {counts['kills']}/{kills} rounds {counts['rounds']}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return counts


def run_lanes(kills: int, lanes: int, *, seed: int = 0, max_delay: float = 1.2,
              workdir: str | None = None, wait_ready: float = 0.8) -> dict[str, Any]:
    """Run ``lanes`` campaigns side by side (threads, each on its own stores); return the summed counts.

    The lanes mostly wait (on their children, on the random delays), so they overlap well even on a
    loaded machine. A lane that breaks is counted in ``lane_errors`` with its traceback.
    """
    from concurrent.futures import ThreadPoolExecutor

    per = -(-kills // lanes)

    def lane(i: int) -> dict[str, Any]:
        try:
            return run(per, seed=seed + 101 * i, max_delay=max_delay, workdir=workdir, wait_ready=wait_ready)
        except Exception:  # noqa: BLE001 - reported as a fault of the run
            return {"lane_errors": 1, "failures": [f"lane {i}: {traceback.format_exc()[-1500:]}"]}

    with ThreadPoolExecutor(lanes) as pool:
        parts = list(pool.map(lane, range(lanes)))
    total: dict[str, Any] = {"lanes": lanes, "lane_errors": 0}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
            elif isinstance(v, dict):
                d = total.setdefault(k, {})
                for kk, vv in v.items():
                    d[kk] = d.get(kk, 0) + vv
            else:
                total.setdefault(k, []).extend(v[:10])
    return total
