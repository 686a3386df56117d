"""Task clustering: which task a user message belongs to, and a page's task label.

Every page carries a label ``task:<n>``, ``n`` being the row of the user
message that opened the task. Detection is pure and runs at record time, from
the terms of the user messages alone (``pager.core.terms``), so a reopened
store rebuilds the same labels. See docs/policies.md, "Task clustering".
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pager.core import terms as terms_mod

__all__ = ["TASK_K", "TASK_MATCH", "detect_task", "task_of"]

# Task detection: a user message continues the active task when it shares at
# least this share of its terms (of at most TASK_K) with the task's user
# messages; otherwise it returns to the earlier task it shares most with
# (same threshold), or starts a new task if its terms weigh at least
# terms.MIN_STRENGTH (one path or file name, or two identifiers) and it matches
# none. A message with less ("go on", "yes") is no evidence of a switch and
# stays in the active task.
TASK_MATCH = 0.25
TASK_K = 8


def task_of(label_set: Sequence[str]) -> int | None:
    """Return the task number of a page's labels (``task:<n>``), or None."""
    for x in label_set:
        if x.startswith("task:"):
            return int(x[5:])
    return None


def detect_task(
    terms: frozenset[str], active: int | None, tasks: Mapping[int, frozenset[str]], row: int
) -> int:
    """Return the task a user message at ``row`` with ``terms`` belongs to.

    ``tasks`` maps each known task to the terms of its user messages;
    ``active`` is the current task (None before the first user message). The
    first user message starts task ``row``.
    """
    if active is None:
        return row

    def share(task: int) -> float:
        return terms_mod.relevance(tasks.get(task, frozenset()), terms, k=TASK_K)

    evidence = sum(terms_mod.term_weight(t) for t in terms)
    if evidence < terms_mod.MIN_STRENGTH or share(active) >= TASK_MATCH:
        return active
    best, best_share = None, TASK_MATCH
    for task in tasks:
        if task != active:
            sh = share(task)
            if sh >= best_share and (best is None or sh > best_share or task > best):
                best, best_share = task, sh
    return best if best is not None else row
