"""``pager reindex STORE``: rebuild the recall index from the store outright."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pager.errors import ConfigError

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("reindex", help="rebuild the Tantivy recall index from the store",
                       description="Delete and rebuild the recall index; the SQLite store is the source of truth.")
    p.add_argument("store", help="the store folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pager.storage.index import PageIndex
    from pager.storage.indexing import feed_index
    from pager.storage.sqlite import DB_NAME, SQLiteStore

    folder = Path(args.store)
    if not (folder / DB_NAME).exists():
        raise ConfigError(f"{folder} holds no pager store (no {DB_NAME})")
    t0 = time.perf_counter()
    shutil.rmtree(folder / "index", ignore_errors=True)
    store = SQLiteStore(folder)
    index = PageIndex(folder / "index")

    def progress(done: int, total: int) -> None:
        print(f"\rindexed {done}/{total} pages", end="", file=sys.stderr, flush=True)

    try:
        done = feed_index(store, index, 0, progress)
    finally:
        index.close()
        store.close()
    print(f" in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    print(f"reindexed {folder}: {done} pages")
    return 0
