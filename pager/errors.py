"""The exceptions pager raises.

Every error pager raises is a ``PagerError``; each also inherits the builtin a
caller would reach for, so ``except ValueError`` still works::

    PagerError(Exception)
    ├── ConfigError(PagerError, ValueError)        bad option to open() / a policy / a config file
    │   └── PromotionGateError(ConfigError)        a promoted page demoted: promotion is one-way; retire it
    ├── InputError(PagerError, ValueError)         a request pager cannot schedule
    │   ├── MessageError(InputError)               one message is malformed; ``.index`` names it
    │   └── HistoryConflictError(InputError)       kept for callers; assemble plans a history behind read-only
    ├── BudgetError(PagerError, ValueError)        L1 alone does not fit; ``.over_by`` says by how much
    ├── StoreError(PagerError, OSError)            the SQLite store cannot be opened or written
    │   └── SchemaError(StoreError)                the store was written by an incompatible version
    ├── RecallIndexError(PagerError, RuntimeError) the Tantivy index failed; rebuildable
    ├── HandleError(PagerError, KeyError)          an unknown handle, or one of another session
    ├── ToolError(PagerError, ValueError)          an agent tool was called with bad arguments
    └── StateFileError(PagerError, ValueError)     checkpoint files cannot be written as asked
        └── InvariantRewriteError(StateFileError)  an export would rewrite the append-only invariants

One warning, not an error (the store still opens, with what it has)::

    LostWritesWarning(UserWarning)                 acknowledged writes are gone (a lost or cut SQLite WAL)

Third-party errors (sqlite3, tantivy, orjson) are translated at the module
that talks to them; they never escape pager's public API untranslated.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ConfigError",
    "HandleError",
    "HistoryConflictError",
    "InputError",
    "InvariantRewriteError",
    "LostWritesWarning",
    "MessageError",
    "PagerError",
    "PromotionGateError",
    "RecallIndexError",
    "SchemaError",
    "StateFileError",
    "StoreError",
    "ToolError",
]


class PagerError(Exception):
    """Base class of every error pager raises."""


class ConfigError(PagerError, ValueError):
    """An option, policy name or configuration file is invalid."""


class PromotionGateError(ConfigError):
    """A page promoted to a pool (``project`` or ``shared``) was to be demoted back into a session.

    Promotion is a one-way gate: what a pool's readers may find does not
    quietly shrink back. Taking a page out of a pool is ``Pager.retire(handle,
    reason=...)`` (``pager pool retire``), a separate act recorded with who,
    when and why; the page is never deleted.
    """


class InputError(PagerError, ValueError):
    """A request cannot be scheduled as given."""


class MessageError(InputError):
    """One message of a request is malformed.

    ``index`` is the message's position in the request's ``messages`` list.
    """

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f"messages[{index}]: {reason}")


class HistoryConflictError(InputError):
    """A request's history conflicts with what the session recorded. No longer raised by ``assemble``.

    It was raised for a history that is a shorter copy of what another writer
    recorded. Since issue 20 any history behind the recorded branch (whoever
    recorded the rest) is planned read-only and records nothing; the class is
    kept so code that catches it still imports.
    """


class BudgetError(PagerError, ValueError):
    """The pinned layer (L1) alone does not fit the token budget.

    ``over_by`` is how many tokens too many; ``l1_tokens`` and ``budget`` are
    the two figures compared.
    """

    def __init__(self, l1_tokens: int, budget: int, detail: str = "", *, what: str = "the pinned layer (L1)") -> None:
        self.l1_tokens = l1_tokens
        self.budget = budget
        self.over_by = l1_tokens - budget
        msg = (
            f"{what} needs {l1_tokens} tokens but the budget is {budget} "
            f"(over by {self.over_by}); raise context_window, lower output_reserve, "
            "or pin less"
        )
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class StoreError(PagerError, OSError):
    """The durable store cannot be opened, read or written."""


class SchemaError(StoreError):
    """The store was written with a schema this version cannot read."""


class RecallIndexError(PagerError, RuntimeError):
    """The Tantivy recall index failed; it can be rebuilt with ``pager reindex``."""


class HandleError(PagerError, KeyError):
    """A handle is unknown, or belongs to another session."""

    def __str__(self) -> str:  # KeyError quotes its argument; a message reads better
        return str(self.args[0]) if self.args else ""


class ToolError(PagerError, ValueError):
    """An agent tool (recall, expand, note, new_context) got bad arguments."""


class StateFileError(PagerError, ValueError):
    """A checkpoint directory cannot be read or written as asked."""


class InvariantRewriteError(StateFileError):
    """An export would drop or alter an entry of the append-only invariants file."""


class LostWritesWarning(UserWarning):
    """Writes the store acknowledged are gone: its write-ahead log was lost or cut short.

    ``lost`` (a ``pager.storage.acked.LostWrites``) says how many pages and,
    per session, how many versions and pages. Escalate it with
    ``warnings.simplefilter("error", pager.LostWritesWarning)`` to refuse such
    a store instead.
    """

    def __init__(self, message: str, lost: object = None) -> None:
        super().__init__(message)
        self.lost = lost
