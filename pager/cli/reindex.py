"""``pager reindex STORE``: rebuild the recall index from the store outright."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("reindex", help="rebuild the recall index from the store",
                       description="Clear and rebuild the store's recall index (a folder's Tantivy index, or a "
                                   "PostgreSQL store's); the store is the source of truth.")
    p.add_argument("store", help="the store: a folder or a postgresql:// URL")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pager.cli.inspect import _name  # a folder as a path, a URL without its password
    from pager.session import open_store
    from pager.storage.indexing import feed_index

    t0 = time.perf_counter()
    store = open_store(args.store, must_exist=True)

    def progress(done: int, total: int) -> None:
        print(f"\rindexed {done}/{total} pages", end="", file=sys.stderr, flush=True)

    try:
        # the index the store provides, whatever it is; a damaged Tantivy folder is set aside on open
        index = store.open_index()
        try:
            index.clear()
            done = feed_index(store, index, 0, progress)
        finally:
            index.close()
    finally:
        store.close()
    print(f" in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    print(f"reindexed {_name(args.store)}: {done} pages")
    return 0

