"""``pager state``: export a session's task state as checkpoint files, and resume from them.

    pager state export STORE DIR [--session S] [--transition TEXT]
    pager state resume DIR

``export`` writes ``00_goal.md``, ``10_invariants.md``, ``99_next.md`` and a
``.wal`` line into DIR and prints the files it wrote. ``resume`` prints them in
order with the last WAL line: what a new session reads first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pager.statefiles import StateFileError, export_state, resume_text

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``state export`` and ``state resume`` to the ``pager`` command line."""
    parser = subparsers.add_parser(
        "state",
        help="export the task state as checkpoint files, or print them to resume",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = parser.add_subparsers(dest="state_command", metavar="ACTION")
    sub.required = True

    export = sub.add_parser(
        "export",
        help="write 00_goal.md, 10_invariants.md, 99_next.md and a .wal line",
    )
    export.add_argument("store", metavar="STORE", help="the pager store")
    export.add_argument("dir", metavar="DIR", type=Path, help="the state directory (created)")
    export.add_argument(
        "--session", metavar="S", help="session id (default: the store's most recent session)"
    )
    export.add_argument(
        "--transition",
        metavar="TEXT",
        default=None,
        help="what the WAL line records (default: 'export session=S')",
    )
    export.set_defaults(func=run_export)

    resume = sub.add_parser("resume", help="print the state files in order and the last WAL line")
    resume.add_argument("dir", metavar="DIR", type=Path, help="the state directory")
    resume.set_defaults(func=run_resume)


def _store_api():
    # Imported here: `pager state resume` must not pay for the store, index and
    # token counter, and the facade imports this package's parent.
    import pager

    open_ = getattr(pager, "open", None)
    sessions = getattr(pager, "store_sessions", None)
    if open_ is None or sessions is None:
        raise StateFileError("this build of pager cannot open stores (pager.open is missing)")
    return open_, sessions


def run_export(args: argparse.Namespace) -> int:
    """Export the session's task state into DIR; print each file written."""
    open_, store_sessions = _store_api()
    session = args.session
    # store_sessions refuses a path that holds no store; an export never creates one,
    # nor a session: a typo must not leave an empty session behind
    sessions = list(store_sessions(args.store))
    if session is None:
        if not sessions:
            raise StateFileError(f"store {args.store} has no sessions to export")
        session = sessions[-1]  # store_sessions lists oldest first
    elif session not in sessions:
        raise StateFileError(
            f"store {args.store} has no session {session!r}; "
            f"it has {len(sessions)}: {', '.join(sessions[-5:]) or '(none)'}"
        )
    handle = open_(args.store, session=session)
    try:
        state = handle.task_state()
    finally:
        close = getattr(handle, "close", None)
        if close is not None:
            close()
    transition = args.transition or f"export session={session}"
    for path in export_state(state, args.dir, transition=transition):
        print(path)
    return 0


def run_resume(args: argparse.Namespace) -> int:
    """Print the state directory for a new session to read first."""
    sys.stdout.write(resume_text(args.dir))
    return 0
