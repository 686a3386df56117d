"""Feeding the recall index from the store: the index is derived, so this is all it takes.

Used on open (catch up after a crash or a deleted index), by ``Pager.reindex``
and by ``pager reindex``.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson

from pager.core import messages as messages_mod
from pager.storage.index import IndexDoc, PageIndex
from pager.storage.sqlite import PAGE_COLUMNS, Store

__all__ = ["feed_index", "index_doc"]

_COL = {name: i for i, name in enumerate(PAGE_COLUMNS)}


def index_doc(row: tuple, msg: Mapping[str, Any]) -> IndexDoc:
    """Return the index document for a stored page row and its message."""
    labels = tuple(orjson.loads(row[_COL["labels"]] or "[]"))
    return IndexDoc(
        page_id=row[_COL["id"]],
        session=row[_COL["session"]],
        step=row[_COL["step"]],
        kind=row[_COL["kind"]],
        text=messages_mod.message_text(msg),
        labels=labels,
        path=row[_COL["path"]],
        handle=row[_COL["handle"]],
        scope=row[_COL["scope"]] or "session",
    )


def feed_index(store: Store, index: PageIndex, after: int = 0, progress: Any = None) -> int:
    """Index every stored page with id > ``after`` and commit; return how many.

    ``progress(done, total)`` is called after each batch when given.
    """
    total = store.count_pages()
    batch: list[IndexDoc] = []
    done = 0
    last = after
    for row, msg in store.iter_pages(after):
        batch.append(index_doc(row, msg))
        last = row[_COL["id"]]
        if len(batch) >= 1000:
            done += index.add(batch)
            batch = []
            if progress:
                progress(done, total)
    if batch:
        done += index.add(batch)
    index.commit(upto_page_id=last)
    if progress:
        progress(done, total)
    return done
