"""Fuzzing every public method: hostile arguments, each call under a 5 s watchdog.

Each call's arguments are drawn from generators seeded by (seed, call
number), so a run is repeatable and a worker that had to be killed for a hang
resumes at the next call. The inputs include every one that broke an earlier
version (an unhashable ``role``, ``tools`` not a list, non-JSON or >64-bit
values in ``tools``, a lone surrogate in a tool name, ``"function": 1.5`` in
a tool call, ``search(None | b"x")``, ``search("x", k="5")``, lone
surrogates in ``pin``, ``note`` and a session name, a NUL in the store path,
a 1 MB single-line bash command) and random mutations of valid requests.
Since issue 20 also (``chaos_shapes``): requests in all three wire formats
with a lone surrogate or a wrong-typed value at any string position (values
and keys), a Responses item with a non-string ``role`` or a non-list
``summary``, surrogates in Anthropic's ``system`` and block types, non-string
dict keys, ``bytearray`` ids, values nested past every encoder's limit (in
requests and in every method's arguments), and over-long ``state_dir`` and
store paths.

Counted: calls; *untyped errors* (any exception not a ``PagerError``);
*hangs* (a call still running after the watchdog's bound); *invalid
prompts* (an ``assemble`` result that fails ``pager.core.pairing.check``).
"""

from __future__ import annotations

import math
import os
import random
import reprlib
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import orjson

import chaos_common as cc
from pager.lab.replay.parallel import worker_context
import chaos_shapes as shapes

WATCHDOG_SECONDS = 5.0
METHODS = ("open", "assemble", "observe", "call_tool", "search", "expand", "note", "pin", "intercept",
           "tools", "task_state", "stats", "reindex", "close", "store_sessions")
BIG = "cat " + "a" * 1_000_000  # a 1 MB single-line shell command


class _Weird:
    """An object no JSON encoder knows."""

    def __repr__(self) -> str:
        return "<weird>"


class _Dumps:
    """An SDK-like object whose ``model_dump`` returns junk."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def model_dump(self, **kwargs: Any) -> Any:  # pydantic's signature: mode=, exclude_none=, ...
        return self.value


def _junk(r: random.Random, depth: int = 0) -> Any:
    pick = r.randrange(28 if depth < 2 else 18)
    if pick < 18:
        return [None, True, 0, -1, 2**70, -(2**80), 1.5, math.nan, math.inf, "", "x", "\ud800", "a\x00b",
                b"bytes", "é" * r.randrange(1, 50), _Weird(), {1, 2}, "{not json"][pick]
    if pick == 18:
        return []
    if pick == 19:
        return {}
    if pick == 20:
        return [_junk(r, depth + 1)]
    if pick == 21:
        return {"k": _junk(r, depth + 1)}
    if pick == 22:
        return {_junk_key(r): 1}
    if pick == 23:
        return (1, 2)
    if pick == 24:
        return shapes.deep(r)
    return shapes.bad_value(r)


def _junk_key(r: random.Random) -> Any:
    return r.choice(["\ud800", "k", "", "role", "content", 1, None, 2.5, (1, 2)])


def _text(r: random.Random) -> Any:
    return r.choice(["a note", "  ", "", "lone \ud800 surrogate", "x" * r.randrange(1, 3000), "日本語のメモ",
                     "NUL\x00inside", "multi\nline\ttext", _junk(r)])


def _history(r: random.Random) -> list[dict[str, Any]]:
    conv = cc.conversation(r.choice(("fz-a", "fz-b")), 30)
    b = cc.boundaries(conv)
    return [dict(m) for m in conv[: r.choice(b)]]


def _mutate_message(r: random.Random, msgs: list[Any]) -> None:
    if not msgs:
        return
    i = r.randrange(len(msgs))
    m = dict(msgs[i]) if isinstance(msgs[i], dict) else {}
    what = r.randrange(10)
    if what == 0:
        m["role"] = r.choice([[], {}, {"a"}, None, 5, "robot", "\ud800", _junk(r)])
    elif what == 1:
        m["content"] = r.choice([_junk(r), [_junk(r)], [{"type": _junk(r)}], [{"type": "text", "text": _junk(r)}],
                                 "lone \udfff", "x" * 200_000])
    elif what == 2:
        m["role"] = "assistant"
        m["tool_calls"] = r.choice([
            _junk(r), [_junk(r)], [{"id": "c1", "function": 1.5}], [{"id": 5, "function": {"name": "bash"}}],
            [{"id": "c1", "function": {"name": "\ud800", "arguments": "{}"}}],
            [{"id": "c1", "function": {"name": "bash", "arguments": _junk(r)}}],
            [{"id": "c1", "function": {"name": _junk(r), "arguments": "{}"}}],
            [{"id": "", "function": {"name": "bash", "arguments": "{}"}}],
        ])
    elif what == 3:
        m["role"] = "tool"
        m["tool_call_id"] = r.choice([_junk(r), "no-such-call", None])
    elif what == 4:
        msgs.insert(i, _junk(r))
        return
    elif what == 5:
        msgs[i] = _junk(r)
        return
    elif what == 6:  # a duplicated call id
        m = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "dup", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "dup", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    elif what == 7:
        del msgs[i]
        return
    elif what == 8:
        m[_junk_key(r)] = _junk(r)
    else:
        m = {"role": r.choice(["user", "system", "developer"]), "content": _text(r)}
    msgs[i] = m


def _big_command(msgs: list[Any], size_cmd: str) -> None:
    cid = f"big-{len(msgs)}"
    msgs.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "bash", "arguments": orjson.dumps({"command": size_cmd}).decode()}}]})
    msgs.append({"role": "tool", "tool_call_id": cid, "content": "ok"})


def _tools(r: random.Random) -> Any:
    good = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    return r.choice([
        _junk(r), [good], [good, _junk(r)], {"bash": good}, "bash",
        [{"type": "function", "function": {"name": "\ud800x", "parameters": {}}}],
        [{"type": "function", "function": {"name": "big", "parameters": {"default": 2**70}}}],
        [{"type": "function", "function": {"name": "odd", "parameters": {"x": _Weird(), "s": {1}, "n": math.nan}}}],
    ])


def _request(r: random.Random, big: str | None) -> Any:
    pick = r.random()
    if pick < 0.05:
        return _junk(r)
    if pick > 0.7 and big is None:
        return shapes.shaped_request(r)  # (request, format): every format, hostile at its boundary
    msgs: Any = _history(r)
    for _ in range(r.choice((0, 1, 1, 2, 3))):
        _mutate_message(r, msgs)
    if big is not None:
        _big_command(msgs, big)
    if pick < 0.1:
        msgs = r.choice([_junk(r), {"0": msgs}, tuple(msgs), "messages"])
    req: dict[Any, Any] = {"model": "m", "messages": msgs}
    if r.random() < 0.3:
        req["tools"] = _tools(r)
    if r.random() < 0.05:
        req[_junk_key(r)] = _junk(r)
    if r.random() < 0.03:
        del req["messages"]
    return req


def _tool_call(r: random.Random, handles: list[str]) -> Any:
    name = r.choice(["recall", "expand", "note", "new_context", "bash", "", _junk(r)])
    args: Any = r.choice([
        {"query": r.choice(["parse_config", _junk(r), "x" * 100_000])},
        {"query": "watermark", "k": r.choice(["5", 0, -3, 2**70, True, 1.5, None, 3])},
        {"handle": r.choice(handles + ["pg:", "pg:999-abcdef", _junk(r)]),
         "start_line": r.choice([None, 1, 0, -1, "2", 2**70, 1.5]), "end_line": r.choice([None, 3, "x", 10**9])},
        {"text": _text(r)}, _junk(r),
    ])
    raw: Any = args
    if r.random() < 0.7:
        try:
            raw = orjson.dumps(args, option=orjson.OPT_NON_STR_KEYS).decode()
        except (orjson.JSONEncodeError, TypeError):
            raw = "{broken"
    if r.random() < 0.05:
        raw = '{"query": "' + "q" * 1_000_000 + '"}'
    call: Any = {"id": r.choice(["call_1", "", None, 5, "\ud800"]), "type": "function",
                 "function": {"name": name, "arguments": raw}}
    if r.random() < 0.1:
        call["function"] = r.choice([1.5, None, "recall", [], _junk(r)])
    if r.random() < 0.05:
        call = r.choice([_junk(r), _Dumps(_junk(r)), _Dumps(call)])
    return call


def _usage(r: random.Random) -> Any:
    u = {k: r.choice([1, "12", _junk(r), 2**70, -5, None]) for k in
         r.sample(["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                   "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens_details"], 3)}
    return r.choice([u, {"usage": u}, {"usage": _junk(r)}, _junk(r), _Dumps(u), _Dumps(_junk(r)),
                     {"usage": {"prompt_tokens": 10, "prompt_tokens_details": _junk(r)}}])


def _fmt(r: random.Random) -> Any:
    return r.choice([None, None, None, "openai-chat", "anthropic-messages", "openai-responses", "nope", _junk(r)])


class Fuzzer:
    """The state one fuzz worker keeps: a temp folder, a few open pagers and the handles seen."""

    def __init__(self, folder: Path) -> None:
        import pager

        self.pager = pager
        self.folder = folder
        self.pagers: list[Any] = []
        self.closed: Any = None
        self.handles: list[str] = []
        self.n_opened = 0
        self.bad_file = folder / "file"
        self.bad_file.write_text("not a folder")
        (folder / "bad.json").write_text("{not json")

    def live(self, r: random.Random) -> Any:
        if not self.pagers or (r.random() < 0.01 and len(self.pagers) < 4):
            self.n_opened += 1
            where = ":memory:" if self.n_opened % 2 else self.folder / f"store{self.n_opened % 3}"
            self.pagers.append(self.pager.open(where, session=f"s{self.n_opened % 5}", context_window=
                                               r.choice([8_000, 32_000, 200_000]), log_reports=False))
        return r.choice(self.pagers)

    def retire(self) -> None:
        for p in self.pagers:
            p.close()
        self.pagers = []

    def call(self, r: random.Random, method: str, big: str | None) -> tuple[str, Callable[[], Any]]:
        """Return a description and a thunk for one fuzzed call of ``method``."""
        pg = self.pager
        if method == "open":
            path = r.choice([self.folder / "opened", ":memory:", "x\x00y", 12345, None, b"bytes", "",
                             self.bad_file, "\ud800dir", self.folder / "opened" / "deeper",
                             self.folder / ("p" * 300), "/tmp/" + "q/" * 3000, shapes.deep(r)])
            session = r.choice(["s", "", None, 5, "\ud800", "a" * 10_000, "x\x00y", ["list"], "日本"])
            window = r.choice([None, 0, -1, "200000", 1.5, 10**30, 100, True, 200_000, math.nan])
            opts = r.choice([{}, {"policy": _junk(r)}, {"mode": _junk(r)}, {"scope": _junk(r)},
                             {"no_such_option": 1}, {"log_reports": "yes"}, {"max_notes": _junk(r)},
                             {"state_dir": r.choice([str(self.folder / ("d" * 300)), "/tmp/" + "e/" * 3000,
                                                     str(self.folder / "sd"), _junk(r), "sd\ud800"])},
                             {"config": r.choice([_junk(r), {"mode": 5}, str(self.folder / "bad.json"),
                                                  str(self.folder / "missing.json")])}])

            def thunk() -> Any:
                p = pg.open(path, session=session, context_window=window, **opts)
                p.close()
            return f"open({_short(path)}, {_short(session)}, {_short(window)}, {_short(opts)})", thunk
        if method == "store_sessions":
            path = r.choice([self.folder / "store0", self.folder / "nowhere", "x\x00y", 5, None, b"b",
                             ":memory:", self.bad_file, "\ud800"])
            return f"store_sessions({_short(path)})", lambda: pg.store_sessions(path)
        if method == "close":
            p = self.live(r)
            self.pagers.remove(p)
            self.closed = p
            return "close()", p.close
        p = self.closed if (self.closed is not None and r.random() < 0.03) else self.live(r)
        if method == "assemble":
            req = _request(r, big)
            kw: dict[str, Any] = {}
            if isinstance(req, tuple):  # a shaped request and the format to name (None: detect it)
                req, name = req
                if name is not None:
                    kw["format"] = name
            if r.random() < 0.1:
                kw["expose_tools"] = r.choice([True, False, "yes", None])
            if r.random() < 0.1:
                kw["format"] = _fmt(r)

            def run_assemble() -> Any:
                out = p.assemble(req, **kw)
                for m in out.get("messages", ()) if isinstance(out, dict) else ():
                    if isinstance(m, dict) and isinstance(m.get("content"), str) and "pg:" in m["content"]:
                        for word in m["content"].split():
                            if word.startswith("pg:") and len(self.handles) < 50:
                                self.handles.append(word.strip(".,;:()[]"))
                return out
            return f"assemble({_short(req)}, {_short(kw)})", run_assemble
        if method == "observe":
            resp, fmt = _usage(r), _fmt(r)
            return f"observe({_short(resp)}, format={_short(fmt)})", lambda: p.observe(resp, format=fmt)
        if method == "call_tool":
            tc, fmt = _tool_call(r, self.handles), _fmt(r)
            return f"call_tool({_short(tc)}, format={_short(fmt)})", lambda: p.call_tool(tc, format=fmt)
        if method == "intercept":
            tc, fmt = _tool_call(r, self.handles), _fmt(r)
            return f"intercept({_short(tc)}, format={_short(fmt)})", lambda: p.intercept(tc, format=fmt)
        if method == "search":
            q = r.choice([None, b"x", 5, "", "parse_config", "x" * 1_000_000, "\ud800", "a AND (b OR",
                          "日本語", "*", _junk(r)])
            k = r.choice(["5", 0, -1, 2**70, True, 1.5, None, 3, 5])
            cs = r.choice([False, True, "yes"])
            return f"search({_short(q)}, k={_short(k)}, cross_session={_short(cs)})", lambda: p.search(q, k=k, cross_session=cs)
        if method == "expand":
            h = r.choice(self.handles + ["pg:", "pg:1-abc", None, 5, b"pg:1", "\ud800", shapes.deep(r)])
            a, b = r.choice([None, 1, 0, -1, "2", 2**70, 1.5, True]), r.choice([None, 2, "x", 10**12])
            return f"expand({_short(h)}, {_short(a)}, {_short(b)})", lambda: p.expand(h, a, b)
        if method in ("note", "pin"):
            t = _text(r)
            return f"{method}({_short(t)})", lambda: getattr(p, method)(t)
        if method == "tools":
            fmt = _fmt(r)
            return f"tools(format={_short(fmt)})", lambda: p.tools(format=fmt)
        if method == "task_state":
            return "task_state()", p.task_state
        if method == "stats":
            return "stats()", p.stats
        if method == "reindex":
            return "reindex()", p.reindex
        raise AssertionError(method)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 4, 120, 120, 8, 8


def _short(value: Any) -> str:
    # bounded: a value nested 50,000 levels deep has no repr()
    s = _REPR.repr(value)
    return s if len(s) < 300 else s[:300] + f"...({len(s)} chars)"


def _prompt_problems(out: dict[str, Any], check: Callable[[Any], list[str]]) -> list[str]:
    """Return the pairing violations of an ``assemble`` result, read back through its own format."""
    from pager.formats.base import detect

    try:
        neutral = detect(out).to_messages(out).messages
    except Exception as exc:  # noqa: BLE001 - a prompt pager cannot read back is invalid
        return [f"the prompt cannot be read back: {exc!r}"]
    return check(neutral)


def worker(seed: int, start: int, count: int, folder: str, out_path: str, progress_path: str,
           big_every: int, huge_at: int | None) -> None:
    """Run calls ``start..count-1``; write the counts; exit 3 at a hang (the parent resumes past it)."""
    from pager.core.pairing import check
    from pager.errors import PagerError

    fz = Fuzzer(Path(folder))
    res: dict[str, Any] = {"calls": 0, "by_method": {}, "untyped": [], "invalid_prompts": [], "typed": 0}
    current = {"deadline": None, "i": -1}
    prog = os.open(progress_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def watchdog() -> None:
        while True:
            time.sleep(0.1)
            d = current["deadline"]
            if d is not None and time.monotonic() > d:
                Path(out_path).write_bytes(orjson.dumps(res, default=str))
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    for i in range(start, count):
        r = random.Random(seed * 1_000_003 + i)
        # every method in turn on even calls; the ones taking model-written input more often on odd ones
        method = METHODS[i % len(METHODS)] if i % 2 == 0 else r.choice(("assemble", "assemble", "call_tool",
                                                                          "search", "note", "observe"))
        big = None
        if huge_at is not None and i == huge_at:
            method, big = "assemble", "cat " + "b" * 50_000_000
        elif big_every and i % big_every == big_every - 1:
            method, big = "assemble", BIG
        desc, thunk = fz.call(r, method, big)
        os.lseek(prog, 0, os.SEEK_SET)
        os.ftruncate(prog, 0)
        os.write(prog, f"{i} {method} {desc[:2000]}".encode("utf-8", "replace"))
        res["calls"] += 1
        res["by_method"][method] = res["by_method"].get(method, 0) + 1
        current["deadline"] = time.monotonic() + WATCHDOG_SECONDS
        try:
            out = thunk()
            if method == "assemble" and isinstance(out, dict):
                problems = _prompt_problems(out, check)
                if problems:
                    res["invalid_prompts"].append(f"{i}: {desc[:500]}: {problems[:3]}")
        except PagerError:
            res["typed"] += 1
        except Exception as exc:  # noqa: BLE001 - what we count
            tb = traceback.format_exc()[-1200:]
            res["untyped"].append(f"{i} {method}: {type(exc).__name__}: {str(exc)[:200]} <- {desc[:400]}\n{tb}")
        finally:
            current["deadline"] = None
        if i % 250 == 249:
            fz.retire()  # bounded memory: fresh pagers now and then
    fz.retire()
    Path(out_path).write_bytes(orjson.dumps(res, default=str))


def run(calls: int, *, seed: int = 0, workdir: str | None = None, big_every: int = 500,
        huge: bool = False, log: Any = None) -> dict[str, Any]:
    """Make ``calls`` fuzzed calls (resuming past hangs); return the counts."""
    ctx = worker_context()  # children start with pager and the tokenizer loaded
    base = Path(tempfile.mkdtemp(prefix="pager-chaos-fuzz-", dir=workdir))
    counts: dict[str, Any] = {"calls": 0, "typed_errors": 0, "untyped_errors": 0, "hangs": 0,
                              "invalid_prompts": 0, "crashed_workers": 0, "by_method": {}, "samples": []}
    start = 0
    huge_at = calls // 2 if huge else None
    try:
        while start < calls:
            folder = base / f"w{start}"
            folder.mkdir()
            out, prog = base / "out.json", base / "progress"
            out.unlink(missing_ok=True)
            w = ctx.Process(target=worker, args=(seed, start, calls, str(folder), str(out), str(prog),
                                                 big_every, huge_at))
            w.start()
            w.join()
            res = orjson.loads(out.read_bytes()) if out.exists() else {"calls": 0, "by_method": {}, "untyped": [],
                                                                       "invalid_prompts": [], "typed": 0}
            counts["calls"] += res["calls"]
            counts["typed_errors"] += res["typed"]
            counts["untyped_errors"] += len(res["untyped"])
            counts["invalid_prompts"] += len(res["invalid_prompts"])
            counts["samples"] += res["untyped"][:5] + res["invalid_prompts"][:5]
            for m, n in res["by_method"].items():
                counts["by_method"][m] = counts["by_method"].get(m, 0) + n
            if w.exitcode == 0:
                break
            last = prog.read_text(errors="replace") if prog.exists() else ""
            at = int(last.split(" ", 1)[0]) if last[:1].isdigit() else start
            if w.exitcode == 3:
                counts["hangs"] += 1
                counts["samples"].append(f"hang over {WATCHDOG_SECONDS}s: {last[:600]}")
            else:
                counts["crashed_workers"] += 1
                counts["samples"].append(f"worker died ({w.exitcode}) at: {last[:600]}")
            if log:
                log(counts["samples"][-1][:300])
            start = at + 1
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return counts
