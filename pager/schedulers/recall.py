"""L3: which demoted pages to recall into the next prompt, and which lines of them.

The query is what the agent is about to work on: the terms of the latest
assistant message and of any user message after it. The Tantivy index finds
pages about those words (BM25); a page is recalled only if the query also
*refers* to it as heat does (``terms.TermIndex.references``: paths, file
names, handles and error names count double), so a recall is evidence, not
noise that costs tokens on every call. Each page is cut to an excerpt around
its first matching line, so a recall costs a few hundred tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from pager.core.render import excerpt_span, line_range
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.history import History
    from pager.storage.index import PageIndex
    from pager.options import Options

__all__ = ["recall_candidates", "recall_query"]

# The page's label line inside the recall block (handle, step, kind, path, lines).
LABEL_TOKENS = 24


def recall_query(history: "History") -> set[str]:
    """Return the terms of the latest assistant message and any user message after it."""
    query: set[str] = set()
    for i in range(len(history) - 1, -1, -1):
        if history.role[i] in ("assistant", "user"):
            query |= history.terms[i]
            if history.role[i] == "assistant":
                break
    return query


def recall_candidates(
    history: "History",
    index: "PageIndex",
    options: "Options",
    session: str,
    shown: set[int],
    page_text: Callable[[int], str],
    counter: TokenCounter,
) -> tuple[list[tuple[int, int]], dict[int, tuple[int, int]]]:
    """Return ``(page id, rendered tokens)`` best first, and the line range to show of each.

    Pages in ``shown`` (in the prompt in full) and L1 are never candidates;
    nor are stale file reads or system messages.
    """
    h = history
    query = recall_query(h)
    if not query:
        return [], {}
    exclude = set(shown)
    exclude.update(h.page[: h.pinned_count()])
    hits = index.search_terms(
        sorted(query), session=session, k=options.recall_pages * 3, exclude=exclude,
        min_score=options.recall_min_score,
    )
    strength = h.term_index.references(query) if options.recall_min_strength else {}
    needles = [t.lower() for t in query if len(t) >= 4]
    out: list[tuple[int, int]] = []
    spans: dict[int, tuple[int, int]] = {}
    for hit in hits:
        r = h.row_of.get(hit.page_id)
        if r is None or h.stale[r] or h.kind[r] == "system":
            continue
        if options.recall_min_strength and strength.get(hit.page_id, 0) < options.recall_min_strength:
            continue
        text = page_text(hit.page_id)
        span = excerpt_span(text, needles, options.recall_page_tokens * 4)
        if span is None:
            continue
        spans[hit.page_id] = span
        out.append((hit.page_id, MESSAGE_OVERHEAD + LABEL_TOKENS + counter.count(line_range(text, *span))))
    return out, spans
