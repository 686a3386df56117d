"""What one recall-index commit costs, part by part: ``python bench/index_commit_profile.py``.

    python bench/index_commit_profile.py [--pages 1000] [--commits 30] [--batch 2] [--ram] [--heap BYTES]

Builds an index of ``--pages`` synthetic pages (on disk in a temporary folder,
or in RAM with ``--ram``), then commits ``--commits`` batches of ``--batch``
pages through ``PageIndex.commit`` and prints, in milliseconds of CPU
(``time.process_time``: every thread, Tantivy's own included), the median and
mean of the whole commit and of each part ``PageIndex`` runs around Tantivy's
own commit: taking the writer, ``refresh`` and the meta document, letting the
writer go (it waits for Tantivy's merges), ``tighten`` and loading the new
searcher. What is left is Tantivy's ``commit`` (the segment, its term tables
and FSTs, the fsyncs). The load average is printed: on a shared machine the
figures move with it, so compare variants in alternating runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pager.storage import index as index_mod  # noqa: E402
from pager.storage import index_disk  # noqa: E402
from pager.storage.index import IndexDoc, PageIndex  # noqa: E402

WORDS = "alpha beta gamma delta retry jitter flaky wal checkpoint store index parse load".split()


def _doc(pid: int, words: int) -> IndexDoc:
    text = " ".join(WORDS[(pid * 7 + k * 3) % len(WORDS)] for k in range(words)) + f" run{pid}"
    return IndexDoc(page_id=pid, session="s", step=pid, kind="tool", text=text, path=f"src/mod{pid % 40}.py")


def _timed(parts: dict[str, list[float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kw: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            parts.setdefault(name, []).append((time.process_time() - t) * 1000.0)
    return wrapper


def profile(pages: int, commits: int, batch: int, ram: bool) -> dict[str, list[float]]:
    """Return the CPU milliseconds of each commit and of each part, by part name."""
    where = None if ram else Path(tempfile.mkdtemp(prefix="commit-profile-")) / "index"
    ix = PageIndex(where)
    ix.add([_doc(pid, 200) for pid in range(1, pages + 1)])
    ix.commit(pages)
    parts: dict[str, list[float]] = {}
    # the parts, wrapped on the class for this process only (the commit calls them by these names)
    PageIndex._w = _timed(parts, "take the writer", PageIndex._w)  # type: ignore[method-assign]
    PageIndex._read_meta = _timed(parts, "read the meta document", PageIndex._read_meta)  # type: ignore[method-assign]
    PageIndex._release = _timed(parts, "let the writer go (merges)", PageIndex._release)  # type: ignore[method-assign]
    index_disk.DiskMixin._refresh = _timed(parts, "refresh", index_disk.DiskMixin._refresh)  # type: ignore[method-assign]
    index_disk.DiskMixin._reload = _timed(parts, "load the searcher", index_disk.DiskMixin._reload)  # type: ignore[method-assign]
    index_mod.tighten = _timed(parts, "tighten", index_mod.tighten)
    whole: list[float] = []
    pid = pages
    for _ in range(commits):
        ix.add([_doc(pid + 1 + j, 300) for j in range(batch)])
        pid += batch
        t = time.process_time()
        ix.commit(pid)
        whole.append((time.process_time() - t) * 1000.0)
    ix.close()
    return {"whole commit": whole, **parts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1000, help="pages in the index before the commits (default 1000)")
    ap.add_argument("--commits", type=int, default=30, help="commits measured (default 30)")
    ap.add_argument("--batch", type=int, default=2, help="pages per commit (default 2)")
    ap.add_argument("--ram", action="store_true", help="an index in RAM (no files, no fsync)")
    ap.add_argument("--heap", type=int, help="the writer's heap in bytes (default pager's WRITER_HEAP)")
    args = ap.parse_args(argv)
    if args.heap:
        index_mod.WRITER_HEAP = args.heap
    load0 = os.getloadavg()[0]
    rows = profile(args.pages, args.commits, args.batch, args.ram)
    print(f"{args.commits} commits of {args.batch} pages into {args.pages} pages, "
          f"{'in RAM' if args.ram else 'on disk'}, heap {index_mod.WRITER_HEAP:,} bytes; ms CPU, every thread")
    for name, values in rows.items():
        print(f"  {name:28s} median {statistics.median(values):7.2f}   mean {statistics.mean(values):7.2f}")
    print(f"load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
