"""What every replay worker needs, loaded once in the fork server that forks the workers.

``parallel`` asks the ``forkserver`` start method to import this module before it
forks any worker: numpy, pager, the SQLite store and tiktoken's cl100k tables
(``default_counter``) are then in each worker from the start, shared copy-on-write,
where each worker of each run used to import and load them afresh (~1.2 s of CPU
a worker). Importing it starts no thread and opens no file beyond the tables.

Nothing here may fail: an exception would end the fork server, and with it every
worker. What cannot load here is loaded (and its error raised) by the task that
needs it, in the worker, as without this module.
"""

from __future__ import annotations


def _load() -> None:
    import pager.lab.replay.runner  # noqa: F401 - the replay task (replay_session)
    import pager.lab.tune  # noqa: F401 - the tune task (tune_session)
    import pager.pager  # noqa: F401 - PagerStrategy's facade
    import pager.storage.sqlite  # noqa: F401 - the store each PagerStrategy opens
    from pager.core.tokens import default_counter

    default_counter()  # the counter every task's Facts use, cached for the process


try:
    _load()
except Exception:  # noqa: S110 - see the docstring: the worker's task raises it
    pass
