"""The schedulers, by mode: ``paging`` (the default) and ``rollover``.

``pager.schedulers.base`` says what a scheduler is. ``get_scheduler`` builds
the one a session's ``mode`` names; a third mode is a module with a class
meeting ``base.Scheduler`` and one entry here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pager.schedulers.paging import PagingScheduler
from pager.schedulers.rollover import RolloverScheduler

if TYPE_CHECKING:  # pragma: no cover
    from pager.core.heat import HeatPolicy
    from pager.core.tokens import TokenCounter
    from pager.options import Options
    from pager.schedulers.base import Scheduler

__all__ = ["SCHEDULERS", "get_scheduler"]

# mode -> build(options, counter, heat policy, session name)
SCHEDULERS: dict[str, Callable[..., "Scheduler[Any]"]] = {
    "paging": lambda options, counter, policy, session: PagingScheduler(options.paging, counter, policy),
    "rollover": lambda options, counter, policy, session: RolloverScheduler(options.rollover, counter, session),
}


def get_scheduler(options: "Options", counter: "TokenCounter", policy: "HeatPolicy", session: str) -> "Scheduler[Any]":
    """Return the scheduler of ``options.mode`` for one session (``Options`` checked the mode)."""
    return SCHEDULERS[options.mode](options, counter, policy, session)
