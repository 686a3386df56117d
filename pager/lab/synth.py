"""Synthetic coding-agent sessions, for running the benchmark without recorded ones.

``generate_session(seed, n_steps)`` returns a header and a list of OpenAI
chat messages shaped like a real coding agent's session: a system prompt
listing tools, a first user task naming files and functions, then steps of
an assistant message with tool calls (``cat`` a file, ``grep``, run the
tests, edit with ``sed`` or ``python``) each answered by tool output of a
realistic size (file reads 1-15 KB, test logs with tracebacks, now and then
an output over 30 KB). Files are read again after they are edited, so later
reads differ. Later assistant messages refer back to identifiers, paths,
error strings and line numbers seen in outputs many steps before (what need
coverage measures), and the user now and then switches between two
sub-tasks.

Everything is drawn from ``random.Random(seed)``: the same seed and length
give the same bytes. ``python -m pager.lab.synth`` rewrites the bundled sessions.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import orjson

__all__ = ["BUNDLED", "generate_session", "main", "write_session"]

# (file name, seed, assistant steps) of the sessions shipped in pager/data/
BUNDLED = (
    ("example_session.jsonl", 11, 80),
    ("synth_short.jsonl", 7, 30),
    ("synth_long.jsonl", 23, 200),
)

PROJECTS = ("ledgerly", "tinyq", "mdcraft", "packrat", "skein", "orbitdb")
PACKAGES = ("core", "io", "net", "util", "cli", "store")
NOUNS = ("header", "buffer", "config", "session", "cache", "record", "token", "schema",
         "packet", "frame", "index", "entry", "batch", "cursor", "segment", "window",
         "ledger", "queue", "snapshot", "offset", "checksum", "payload", "manifest")
VERBS = ("parse", "load", "build", "encode", "decode", "validate", "flush", "read", "write",
         "merge", "split", "resolve", "compute", "apply", "render", "fetch", "commit", "rotate")
ERRORS = ("ValueError", "KeyError", "TypeError", "IndexError", "AssertionError", "RuntimeError")
PROSE = ("Let me look at", "I'll check", "Next I need to inspect", "Now let me verify",
         "To understand the failure I'll read", "Let me search for")

PLANS = (
    "The goal is to make `{func}` fail early with a clear message, so I want to see every caller first.",
    "If the offset arithmetic is wrong the error would surface later in the stack, which matches the report.",
    "I will keep the change small and run the affected tests right after it.",
    "The tests around `{func}` should tell me whether the empty-input path is covered at all.",
    "Before editing I want to confirm which constant bounds the buffer length here.",
)

SYSTEM = """You are a careful software engineering agent working in a Linux container.
The repository is checked out at /workspace/{project}. You can call one tool:

bash(command: str) -> str
    Run a shell command in the repository and return its stdout and stderr.
    Long outputs are returned in full; prefer sed -n 'A,Bp' FILE for parts of files.

Rules:
- Read code before changing it; run the tests after every change.
- Keep changes minimal and in the style of the surrounding code.
- When the task is done, reply with a summary of the change and no tool call.
"""


class _Project:
    """A fake repository: modules with functions, constants and versions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.name = rng.choice(PROJECTS)
        self.files: dict[str, dict[str, Any]] = {}
        for pkg in rng.sample(PACKAGES, 4):
            for noun in rng.sample(NOUNS, 3):
                path = f"src/{self.name}/{pkg}/{noun}.py"
                n_funcs = rng.randint(4, 28)
                funcs = []
                for _ in range(n_funcs):
                    name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
                    if rng.random() < 0.3:
                        name = "_" + name
                    funcs.append(name)
                consts = {f"{rng.choice(NOUNS).upper()}_{rng.choice(('SIZE', 'LIMIT', 'RETRIES', 'TIMEOUT'))}":
                          rng.randint(10, 4096) for _ in range(rng.randint(1, 4))}
                self.files[path] = {
                    "funcs": list(dict.fromkeys(funcs)),
                    "consts": consts,
                    "class": noun.capitalize() + rng.choice(("Reader", "Writer", "Store", "Codec")),
                    "version": 0,
                    "seed": rng.randrange(1 << 30),
                }
        self.tests = {f"tests/test_{Path(p).stem}.py": p for p in self.files}
        # a file's text depends only on its path and version (its own generator, seeded from
        # both): a session reads one ~6 times, each ~1 ms of random draws
        self._sources: dict[tuple[str, int], tuple[str, dict[str, int]]] = {}

    def source(self, path: str) -> tuple[str, dict[str, int]]:
        """Return a file's text at its current version and the line of each function."""
        key = (path, self.files[path]["version"])
        if key not in self._sources:
            self._sources[key] = self._source(path)
        text, where = self._sources[key]
        return text, dict(where)

    def _source(self, path: str) -> tuple[str, dict[str, int]]:
        f = self.files[path]
        rng = random.Random(f["seed"] * 31 + f["version"])
        mod = path[4:-3].replace("/", ".")
        lines = [f'"""{f["class"]} and helpers for {mod}."""', "", "from __future__ import annotations",
                 "", "import struct", "from typing import Any", ""]
        for c, v in f["consts"].items():
            lines.append(f"{c} = {v}")
        lines += ["", ""]
        where: dict[str, int] = {}
        lines.append(f"class {f['class']}:")
        lines.append(f'    """Hold the state of one {Path(path).stem}."""')
        lines.append("")
        # the draws of ``rng.choice`` / ``rng.randint`` taken directly (``_randbelow``, what both call),
        # in the same order, and only the chosen line formatted: the same text, a third of the time
        below = rng._randbelow
        funcs = f["funcs"]
        consts = list(f["consts"])
        for name in funcs:
            where[name] = len(lines) + 1
            arg = NOUNS[below(len(NOUNS))]
            lines.append(f"    def {name}(self, {arg}, offset=0):")
            lines.append(f'        """{name.strip("_").replace("_", " ").capitalize()} from {arg}."""')
            for _ in range(3 + below(10)):  # randint(3, 12)
                other = funcs[below(len(funcs))]
                const = consts[below(len(consts))]
                # each alternative's draws, in the order the tuple of all eight made them
                error = ERRORS[below(len(ERRORS))]
                width = 2 + below(63)  # randint(2, 64)
                code = "IHQB"[below(4)]
                field, default = NOUNS[below(len(NOUNS))], below(100)  # randint(0, 99)
                what, align = NOUNS[below(len(NOUNS))], (4, 8, 16, 64)[below(4)]
                every = 2 + below(8)  # randint(2, 9)
                pick = below(8)
                lines.append(
                    f"        if len({arg}) < {const}:" if pick == 0 else
                    f"            raise {error}(f\"short {arg}: {{len({arg})}} < {{{const}}}\")" if pick == 1 else
                    f"        value = self.{other}({arg}[offset:offset + {width}])" if pick == 2 else
                    f"        offset += struct.calcsize('<{code}')" if pick == 3 else
                    f"        self._{field} = value if value is not None else {default}" if pick == 4 else
                    f"        # keep {what} aligned to {align} bytes" if pick == 5 else
                    f"        for i, item in enumerate({arg}):" if pick == 6 else
                    f"            total = total + item if i % {every} else total"
                )
            lines.append("        return value")
            lines.append("")
        return "\n".join(lines) + "\n", where


def _call(ids: list[int], seed: int, command: str) -> dict[str, Any]:
    ids[0] += 1
    return {"id": f"call_{seed}_{ids[0]}", "type": "function",
            "function": {"name": "bash", "arguments": orjson.dumps({"command": command}).decode()}}


def generate_session(seed: int, n_steps: int, *, big_every: int = 25) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return ``(header, messages)`` of a synthetic session with ``n_steps`` assistant messages.

    ``big_every``: about one step in this many produces an output over 30 KB.
    """
    if n_steps < 1:
        raise ValueError("n_steps must be at least 1")
    rng = random.Random(seed)
    proj = _Project(rng)
    paths = sorted(proj.files)
    ids = [0]
    # two sub-tasks, each centred on one file and one function
    tasks = []
    for _ in range(2):
        path = rng.choice(paths)
        tasks.append((path, rng.choice(proj.files[path]["funcs"])))
    facts: list[tuple[int, str]] = []  # (message index, sentence about something seen)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM.format(project=proj.name)},
        {"role": "user", "content": (
            f"In {proj.name}, `{tasks[0][1]}` in {tasks[0][0]} fails on truncated input: "
            f"it should raise a clear error instead of crashing deeper in the stack. "
            f"Also, separately, `{tasks[1][1]}` in {tasks[1][0]} needs to handle an empty "
            f"payload. Fix the first one first, add tests for both, and keep the test suite green.")},
    ]
    active = 0
    for step in range(n_steps):
        last = step == n_steps - 1
        path, func = tasks[active]
        text = f"{rng.choice(PROSE)} {path}. {rng.choice(PLANS).format(func=func)}"
        old = [f for f in facts if len(msgs) - f[0] >= 20]
        if old and rng.random() < 0.45:
            # refer back to something seen long ago: what need coverage measures
            text = rng.choice(old)[1] + " " + text
        if last:
            msgs.append({"role": "assistant", "content": (
                f"Done. `{tasks[0][1]}` in {tasks[0][0]} now validates its input and "
                f"`{tasks[1][1]}` in {tasks[1][0]} handles an empty payload; tests added in "
                f"{', '.join(sorted({'tests/test_' + Path(p).stem + '.py' for p, _ in tasks}))}.")})
            break
        n_calls = 2 if rng.random() < 0.15 else 1
        calls, outputs = [], []
        for _ in range(n_calls):
            command, output, new_facts = _action(rng, proj, path, func, step, len(msgs), big_every)
            calls.append(_call(ids, seed, command))
            outputs.append(output)
            facts.extend(new_facts)
        msgs.append({"role": "assistant", "content": text, "tool_calls": calls})
        for call, output in zip(calls, outputs):
            msgs.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if step > 5 and rng.random() < 0.04:
            active = 1 - active
            p2, f2 = tasks[active]
            msgs.append({"role": "user", "content": (
                f"Let's switch to the other problem for now: `{f2}` in {p2}. "
                f"Come back to the first one afterwards.")})
    # "agent" keeps the module's name from before pager.lab: the bundled files stay byte for byte
    header = {"type": "session", "id": f"synth-{seed}-{n_steps}", "source": "synthetic",
              "agent": "pager.synth", "seed": seed, "steps": n_steps, "license": "MIT"}
    return header, msgs


def _action(rng: random.Random, proj: _Project, path: str, func: str, step: int, at: int,
            big_every: int) -> tuple[str, str, list[tuple[int, str]]]:
    """Return (command, output, facts) of one tool call."""
    r = rng.random()
    if step == 0 or r < 0.3:
        target = path if rng.random() < 0.5 else rng.choice(sorted(proj.files))
        src, where = proj.source(target)
        if rng.random() < 1 / big_every:
            # a big read: the whole package at once
            pkg = str(Path(target).parent)
            parts = [proj.source(p)[0] for p in sorted(proj.files) if p.startswith(pkg)]
            src = "\n".join(parts)
            while len(src) < 30_000:
                src += "\n" + proj.source(rng.choice(sorted(proj.files)))[0]
            return f"cat {pkg}/*.py", src, []
        f = proj.files[target]
        name = rng.choice(list(where))
        const, val = rng.choice(list(f["consts"].items()))
        facts = [(at, f"Earlier {target} defined `{name}` at line {where[name]}."),
                 (at, f"Recall that {const} = {val} in {target}.")]
        return f"cat {target}", src, facts
    if r < 0.45:
        ident = func if rng.random() < 0.6 else rng.choice(proj.files[rng.choice(sorted(proj.files))]["funcs"])
        lines = []
        for p in sorted(proj.files):
            src, where = proj.source(p)
            if ident in where:
                lines.append(f"{p}:{where[ident]}:    def {ident}(self, buf, offset=0):")
            for q, f2 in where.items():
                if rng.random() < 0.08:
                    lines.append(f"{p}:{f2 + 3}:        value = self.{ident}(buf[offset:offset + 8])")
        out = "\n".join(lines) or ""
        facts = [(at, f"The grep for `{ident}` found it in {lines[0].split(':')[0]} "
                      f"line {lines[0].split(':')[1]}.")] if lines else []
        return f"grep -rn '{ident}' src/", out, facts
    if r < 0.75:
        return _pytest(rng, proj, path, func, at, big=rng.random() < 1 / big_every * 2)
    # an edit; the file changes, so a later read differs
    target = path if rng.random() < 0.7 else rng.choice(sorted(proj.files))
    proj.files[target]["version"] += 1
    src, where = proj.source(target)
    name = rng.choice(list(where))
    if rng.random() < 0.5:
        cmd = (f"python - <<'EOF'\nimport re, pathlib\np = pathlib.Path('{target}')\n"
               f"s = p.read_text()\ns = s.replace('return value', 'return value  # checked', 1)\n"
               f"p.write_text(s)\nEOF")
    else:
        cmd = f"sed -i '{where[name]}s/offset=0/offset: int = 0/' {target}"
    return cmd, "", [(at, f"I edited `{name}` in {target} around line {where[name]}.")]


def _pytest(rng: random.Random, proj: _Project, path: str, func: str, at: int,
            big: bool) -> tuple[str, str, list[tuple[int, str]]]:
    test_file = f"tests/test_{Path(path).stem}.py"
    total = rng.randint(40, 240) * (4 if big else 1)
    failed = rng.choice((0, 1, 1, 2, 3))
    verbose = big or rng.random() < 0.12
    out = ["=" * 29 + " test session starts " + "=" * 30,
           f"platform linux -- Python 3.11.{rng.randint(2, 9)}, pytest-8.{rng.randint(0, 3)}.0",
           f"rootdir: /workspace/{proj.name}", f"collected {total} items", ""]
    tests = sorted(proj.tests)
    if verbose:
        below = rng._randbelow  # rng.choice's own draw, taken directly (as in ``_Project._source``)
        for k in range(total):
            t = tests[below(len(tests))]
            verb = VERBS[below(len(VERBS))]
            out.append(f"{t}::test_{verb}_{NOUNS[below(len(NOUNS))]}_{k} PASSED [{100 * (k + 1) // total:3d}%]")
    else:
        for t in tests:
            out.append(f"{t} " + "." * rng.randint(3, 30))
    facts = []
    failures: list[tuple[str, str]] = []
    if failed:
        out.append("")
        out.append("=" * 35 + " FAILURES " + "=" * 35)
        for k in range(failed):
            src, where = proj.source(path)
            fn = func if k == 0 else rng.choice(list(where))
            err = rng.choice(ERRORS)
            const, val = rng.choice(list(proj.files[path]["consts"].items()))
            got = rng.randint(0, val)
            tname = f"test_{fn.strip('_')}_{rng.choice(('short', 'empty', 'truncated', 'roundtrip'))}"
            tline = rng.randint(12, 300)
            out += [f"{'_' * 20} {tname} {'_' * 20}", "", f"    def {tname}():",
                    f">       obj.{fn}(b\"\\x00\" * {got})", "", f"{test_file}:{tline}: ", "_ " * 30]
            depth = rng.randint(2, 9)
            for d in range(depth):
                other = rng.choice(list(where))
                out += [f"src/{proj.name}/{Path(path).parent.name}/{Path(path).stem}.py:"
                        f"{where[other] + rng.randint(1, 9)}: in {other}",
                        f"    value = self.{rng.choice(list(where))}(buf[offset:offset + {rng.randint(2, 64)}])"]
            message = f"short {Path(path).stem}: {got} < {val}"
            out += [f"E   {err}: {message}", ""]
            failures.append((tname, f"{err}: {message}"))
            facts.append((at, f"The test run showed `{err}: {message}` from `{fn}` "
                              f"({test_file}:{tline})."))
        out.append("=" * 30 + " short test summary info " + "=" * 30)
        out += [f"FAILED {test_file}::{name} - {err}" for name, err in failures]
    secs = rng.uniform(0.5, 40)
    out.append(f"{'=' * 20} {failed} failed, {total - failed} passed in {secs:.2f}s {'=' * 20}")
    return f"python -m pytest {'-v ' if verbose else ''}-x {test_file if rng.random() < 0.5 else 'tests'}", \
        "\n".join(out), facts


def write_session(path: str | Path, seed: int, n_steps: int) -> Path:
    """Write one synthetic session as JSON lines; return its path."""
    header, msgs = generate_session(seed, n_steps)
    p = Path(path)
    with p.open("wb") as fh:
        for obj in (header, *msgs):
            fh.write(orjson.dumps(obj) + b"\n")
    return p


def main(argv: list[str] | None = None) -> int:
    """Write the bundled sessions to ``pager/data`` (or the folder given)."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "data"
    folder.mkdir(parents=True, exist_ok=True)
    for name, seed, steps in BUNDLED:
        out = write_session(folder / name, seed, steps)
        print(out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
