"""Bit-flip campaign: damage the recall index one bit at a time; every store must heal.

    python bench/chaos/chaos_bitflip.py                  # 108 flips: 12 per index file type
    python bench/chaos/chaos_bitflip.py --per-type 30 --seed 7 --json out.json

A base store is built once (two sessions, a few hundred pages, every one with
a word only it holds, several Tantivy segments with deletions). Each round
copies it, flips one random bit of one file of the round's type (``meta.json``,
``.managed.json``, ``.idx``, ``.pos``, ``.term``, ``.store``, ``.fast``,
``.fieldnorm``, ``.del``), then:

1. opens the session, searches and assembles: any exception that is not a
   ``PagerError`` counts as *untyped* (must be 0; a ``PanicException`` or a
   ``TypeError`` from Tantivy is untyped);
2. closes it and opens it again: the store is *healed* when that open raises
   nothing, the index holds exactly the store's pages (no phantom, none
   missing), its committed files pass their checksums, and every page's own
   word finds that page (must be every round).

Three set pieces run too: the ``index`` path replaced by a plain file, phantom
documents (index documents with no page behind them), and a flip made while
the index is open (found at the next search, not at open).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import chaos_common  # noqa: F401  (puts the worktree's pager first on sys.path)
import pager
from pager.storage.index import PageIndex
from pager.storage.index_files import verify
from pager.storage.indexing import index_doc

__all__ = ["FILE_TYPES", "build_base", "campaign", "check_healed", "flip_one"]

FILE_TYPES = ("meta.json", ".managed.json", ".idx", ".pos", ".term", ".store", ".fast", ".fieldnorm", ".del")
SESSIONS = ("alpha", "beta")


def word(session: str, i: int) -> str:
    """Return the word only message ``i`` of ``session`` holds."""
    return f"w{SESSIONS.index(session)}x{i:04d}q"


def history(session: str, n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"step {i}: {word(session, i)} in src/mod_{i % 7}.py retry budget"})
    return msgs


def build_base(where: Path, messages: int = 120) -> dict[str, int]:
    """Write the base store (several commits: several segments, and a deletion)."""
    counts = {}
    for s in SESSIONS:
        msgs = history(s, messages)
        with pager.open(where, session=s, log_reports=False) as p:
            for n in [*range(12, len(msgs), 12), len(msgs)]:
                p.assemble({"messages": msgs[:n]})
                p._feeder.flush()  # one commit per batch: several segments
            p.note(f"a note of {s}: it commits once more")
            counts[s] = p.store.count_pages(s)
            first = next(p.store.iter_pages(0))
    # the first page indexed again replaces its document: a segment with a deletion (.del). A commit's
    # meta document no longer replaces the one before it (pager.storage.index), so nothing else deletes
    ix = PageIndex(where / "index")
    try:
        ix.add([index_doc(*first)])
        ix.commit()
    finally:
        ix.close()
    return counts


def _files_of(index: Path, kind: str) -> list[Path]:
    if kind in ("meta.json", ".managed.json"):
        return [index / kind] if (index / kind).exists() else []
    return sorted(p for p in index.iterdir() if p.is_file() and p.name.endswith(kind) and not p.name.startswith("."))


def flip_one(index: Path, kind: str, rng: random.Random) -> str | None:
    """Flip one random bit of one file of type ``kind``; return what was flipped (None: no such file)."""
    files = [f for f in _files_of(index, kind) if f.stat().st_size]
    if not files:
        return None
    f = rng.choice(files)
    at = rng.randrange(f.stat().st_size)
    bit = rng.randrange(8)
    with open(f, "r+b") as fh:  # in place: a reader that has the file mapped never sees it cut short
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << bit)]))
    return f"{f.name}@{at}:{bit}"


def _probe(where: Path, messages: int) -> None:
    """Open, search and assemble, as an agent's harness would after the damage."""
    with pager.open(where, session="alpha", log_reports=False) as p:
        p.search(word("alpha", 3))
        p.search("retry budget", cross_session=True)
        msgs = history("alpha", messages) + [{"role": "user", "content": f"and {word('beta', 5)}?"}]
        p.assemble({"messages": msgs})


def check_healed(where: Path, messages: int) -> str | None:
    """Return why the store at ``where`` is not healed by this open, or None when it is."""
    try:
        with pager.open(where, session="alpha", log_reports=False) as p:
            index, store = p._feeder.index, p.store
            ids = index.page_ids()
            stored = {r.id for r, _m in store.iter_pages(0)}
            if ids != stored:
                return f"index holds {len(ids - stored)} phantoms, misses {len(stored - ids)} pages"
            verify(Path(where) / "index", set())
            for s in SESSIONS:
                for i in range(messages):
                    hits = p.search(word(s, i), k=3, cross_session=True) if s == "alpha" else \
                        index.search(word(s, i), session=s, k=3)
                    if not any(word(s, i) in h.snippet for h in hits):
                        return f"{word(s, i)} not found"
    except BaseException as exc:  # noqa: BLE001 - a campaign counts every failure
        return f"reopen raised {type(exc).__name__}: {exc}"
    return None


def _round(base: Path, work: Path, messages: int, damage: Callable[[Path], str | None],
           out: collections.Counter, failures: list[dict[str, Any]], label: str) -> None:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    what = damage(work)
    if what is None:
        out["skipped"] += 1
        return
    out["flips"] += 1
    out[f"flips{label}"] += 1
    try:
        _probe(work, messages)
        out["first_open_ok"] += 1
        if list(work.glob("index.damaged-*")):
            out["moved_aside"] += 1  # found damaged (checksum, Tantivy error) and rebuilt
            out[f"moved_aside{label}"] += 1
    except pager.PagerError as exc:
        out["typed_errors"] += 1
        failures.append({"type": label, "what": what, "typed": f"{type(exc).__name__}: {exc}"[:300]})
    except BaseException as exc:  # noqa: BLE001 - PanicException is a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["untyped_errors"] += 1
        failures.append({"type": label, "what": what, "untyped": f"{type(exc).__name__}: {exc}"[:300]})
    why = check_healed(work, messages)
    if why is None:
        out["healed"] += 1
    else:
        out["not_healed"] += 1
        failures.append({"type": label, "what": what, "not_healed": why})


def _as_file(work: Path) -> str:
    shutil.rmtree(work / "index")
    (work / "index").write_text("not a folder")
    return "index is a plain file"


def _phantoms(work: Path) -> str:
    """Commit index documents for 8 page ids the store does not have (a writer killed between commits)."""
    with pager.open(work, session="alpha", log_reports=False) as p:
        rec, msg = next(p.store.iter_pages(0))
        top = p.store.max_page_id()
    ix = PageIndex(work / "index")
    try:
        import attrs

        ix.add([attrs.evolve(index_doc(rec, msg), page_id=top + k) for k in range(1, 9)])
        ix.commit()
    finally:
        ix.close()
    return "8 phantom documents"


def _flip_while_open(work: Path, messages: int, rng: random.Random, out: collections.Counter,
                     failures: list[dict[str, Any]]) -> None:
    """Flip a bit of a .fast file of an index already open: the next search must heal, not raise."""
    with pager.open(work, session="alpha", log_reports=False) as p:
        what = flip_one(work / "index", ".fast", rng)
        out["flips"] += 1
        out["flips_while_open"] += 1
        try:
            p.search(word("alpha", 1))
            p.assemble({"messages": history("alpha", messages) + [{"role": "user", "content": "more"}]})
            out["first_open_ok"] += 1
        except pager.PagerError as exc:
            out["typed_errors"] += 1
            failures.append({"type": "while-open", "what": what, "typed": str(exc)[:300]})
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            out["untyped_errors"] += 1
            failures.append({"type": "while-open", "what": what, "untyped": f"{type(exc).__name__}: {exc}"[:300]})
    why = check_healed(work, messages)
    out["healed" if why is None else "not_healed"] += 1
    if why:
        failures.append({"type": "while-open", "what": what, "not_healed": why})


def campaign(per_type: int = 12, seed: int = 0, messages: int = 120, workdir: Path | None = None,
             log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the campaign; return its counts (``untyped_errors`` and ``not_healed`` must be 0)."""
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="pager-bitflip-", dir=workdir))
    out: collections.Counter = collections.Counter()
    failures: list[dict[str, Any]] = []
    try:
        base = tmp / "base"
        counts = build_base(base, messages)
        out["base_pages"] = sum(counts.values())
        work = tmp / "work"
        for kind in FILE_TYPES:
            for _ in range(per_type):
                _round(base, work, messages, lambda w, k=kind: flip_one(w / "index", k, rng), out, failures,
                       "_" + kind.strip("."))
            log(f"{kind}: {out['flips_' + kind.strip('.')]} flips, healed so far {out['healed']}")
        _round(base, work, messages, _as_file, out, failures, "_index_is_a_file")
        _round(base, work, messages, _phantoms, out, failures, "_phantoms")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        _flip_while_open(work, messages, rng, out, failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"counts": dict(sorted(out.items())), "failures": failures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-type", type=int, default=12, help="flips per index file type (9 types)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--messages", type=int, default=120, help="messages per session in the base store")
    ap.add_argument("--json", type=Path, help="also write the counts here")
    a = ap.parse_args(argv)
    got = campaign(a.per_type, a.seed, a.messages, log=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    text = json.dumps(got, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    c = got["counts"]
    return 1 if c.get("untyped_errors", 0) or c.get("not_healed", 0) else 0


if __name__ == "__main__":
    raise SystemExit(main())
