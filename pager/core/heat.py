"""Heat policies: score the page table at a logical clock; higher is hotter.

Theory of operation
-------------------
The planner keeps L1 pinned and fills L2, the hot working set, with the
hottest pages that fit its quota. "Hottest" is decided here, and only here,
by a *heat policy*: a small object with one required method,
``score(table, clock)``, that maps a :class:`PageTable` (one row per
candidate page, as numpy columns) and the logical clock (the step index:
the number of assistant messages so far) to one float per row.

Policies are pure: no wall clock, no randomness, no I/O, no state that
changes between calls. The same table at the same clock always gives the
same scores, so a replay is reproducible and a plan can be explained after
the fact. Scores must be finite; only their order matters to the planner.

The shipped policies score in *bits of heat*: ``log2`` of a heat that halves
every ``half_life`` steps without a reference. That keeps scores finite and
ordered at any clock (a linear ``2 ** -age`` underflows to 0 after a few
thousand steps and every old page would tie), and lets the reference-aware
policy add its evidence as plain sums ("a fully relevant page counts as
``relevance_weight`` half-lives younger").

``rank`` orders rows hottest first; ties go to the newer page (higher
``page_id``), so an order never depends on the order rows were fetched in.

Writing a policy::

    @register_policy
    @attrs.frozen
    class Biggest(HeatPolicy):
        name: ClassVar[str] = "biggest"
        def score(self, table, clock):
            return table.tokens.astype(np.float64)

    get_policy("biggest").rank(table, clock)
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Iterable, Mapping, Sequence, TypeVar

import attrs
import numpy as np

from pager.errors import ConfigError, InputError
from pager.core.pages import KIND_CODE, KINDS, PageRecord

__all__ = [
    "DEFAULT_POLICY",
    "HORIZONS",
    "NEEDS",
    "NeedTable",
    "POLICIES",
    "DecayPolicy",
    "FIFOPolicy",
    "HeatPolicy",
    "LFUPolicy",
    "LRUPolicy",
    "PageTable",
    "ReferencePolicy",
    "get_policy",
    "rank_scores",
    "register_policy",
]

DEFAULT_POLICY = "reference"

# Kinds whose pages are tool output: bulky, read once, rarely needed verbatim
# again unless referred back to, so the kind-aware policies age them faster.
_TOOL_CODES = (KIND_CODE["tool"], KIND_CODE["file"])

# Sizes are penalised per doubling above this many tokens (about one screen).
SIZE_UNIT = 1024

# Parameter bounds: wide enough for any tuning, narrow enough that every score
# stays finite for any int64 column and clock (ages reach ~1.8e19 at worst).
_HALF_LIFE_RANGE = (1e-6, 1e12)
_WEIGHT_MAX = 1e6


# ---------------------------------------------------------------------------
# The page table


def _column(dtype: type) -> Any:
    """Return an attrs converter to a read-only 1-D view of ``dtype``."""

    def convert(value: Any) -> np.ndarray:
        try:
            arr = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise InputError(f"page table column is not {np.dtype(dtype).name}: {exc}") from None
        if arr.ndim != 1:
            raise InputError(f"page table columns must be 1-D, got shape {arr.shape}")
        # A view, so the caller's own array stays writable; ours cannot be
        # changed under a policy's feet.
        view = arr.view()
        view.flags.writeable = False
        return view

    return convert


def _optional_column(dtype: type) -> Any:
    """Return a converter like ``_column`` that lets None through (filled in after init)."""
    convert = _column(dtype)
    return lambda value: None if value is None else convert(value)


_ROW_DEFAULTS: dict[str, Any] = {
    "ref_count": 0,
    "tokens": 0,
    "kind": "user",
    "stale": False,
    "relevance": 0.0,
    "task": True,
    "overlap": 0.0,
}


@attrs.frozen(eq=False)
class PageTable:
    """Hold the candidate pages a policy scores, one numpy column per fact.

    All columns have the same length ``n``; row ``i`` of every column is the
    same page. Columns are read-only views (the caller's arrays are not
    copied). ``last_ref`` equals ``created`` for a page never referred back to.
    ``relevance`` (in [0, 1]) is the page's overlap with the pinned goals and
    the active task, computed by the caller (see ``pager.terms``).

    Two columns are optional (a caller that does not know them passes
    nothing): ``task``, whether the page belongs to the active task (default
    all True: one task), and ``overlap`` (in [0, 1]), the page's term overlap
    with the latest steps, what the agent is working on right now (default 0).
    """

    page_id: np.ndarray = attrs.field(converter=_column(np.int64))
    created: np.ndarray = attrs.field(converter=_column(np.int64))
    last_ref: np.ndarray = attrs.field(converter=_column(np.int64))
    ref_count: np.ndarray = attrs.field(converter=_column(np.int64))
    tokens: np.ndarray = attrs.field(converter=_column(np.int64))
    kind: np.ndarray = attrs.field(converter=_column(np.int8))
    stale: np.ndarray = attrs.field(converter=_column(np.bool_))
    relevance: np.ndarray = attrs.field(converter=_column(np.float64))
    task: np.ndarray | None = attrs.field(default=None, converter=_optional_column(np.bool_))
    overlap: np.ndarray | None = attrs.field(default=None, converter=_optional_column(np.float64))

    def __attrs_post_init__(self) -> None:
        n = len(self.page_id)
        if self.task is None:
            object.__setattr__(self, "task", _column(np.bool_)(np.ones(n, dtype=bool)))
        if self.overlap is None:
            object.__setattr__(self, "overlap", _column(np.float64)(np.zeros(n)))
        lengths = {f.name: len(getattr(self, f.name)) for f in attrs.fields(type(self))}
        if len(set(lengths.values())) > 1:
            raise InputError(f"page table columns differ in length: {lengths}")

    def __len__(self) -> int:
        return len(self.page_id)

    @classmethod
    def empty(cls) -> PageTable:
        """Return a table with no rows."""
        return cls(*([()] * len(attrs.fields(cls))))

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> PageTable:
        """Build a table from one mapping per page; convenient for tests.

        Keys are the column names. Defaults: ``page_id`` the row's position,
        ``created`` 0, ``last_ref`` = ``created``, ``ref_count`` 0,
        ``tokens`` 0, ``kind`` "user" (a name from ``pages.KINDS`` or its
        code), ``stale`` False, ``relevance`` 0.0.
        """
        names = [f.name for f in attrs.fields(cls)]
        cols: dict[str, list[Any]] = {name: [] for name in names}
        for i, row in enumerate(rows):
            unknown = set(row) - set(names)
            if unknown:
                raise InputError(f"row {i}: unknown page table columns {sorted(unknown)}")
            created = row.get("created", 0)
            values = {**_ROW_DEFAULTS, "page_id": i, "created": created, "last_ref": created, **row}
            values["kind"] = _kind_code(values["kind"])
            for name in names:
                cols[name].append(values[name])
        return cls(**cols)

    @classmethod
    def from_pages(cls, pages: Sequence[PageRecord], relevance: Sequence[float] | None = None) -> PageTable:
        """Build a table from stored ``PageRecord`` values, with an optional relevance column."""
        n = len(pages)
        rel = np.zeros(n) if relevance is None else relevance
        return cls(
            page_id=[p.id for p in pages],
            created=[p.step for p in pages],
            # a record written before references were tracked may hold 0; the table
            # wants the creation step there.
            last_ref=[max(p.last_ref, p.step) for p in pages],
            ref_count=[p.ref_count for p in pages],
            tokens=[p.tokens for p in pages],
            kind=[KIND_CODE.get(p.kind, KIND_CODE["user"]) for p in pages],
            stale=[p.stale for p in pages],
            relevance=rel,
        )

    def take(self, rows: Any) -> PageTable:
        """Return the sub-table of ``rows`` (an index array or a boolean mask)."""
        return PageTable(*(getattr(self, f.name)[rows] for f in attrs.fields(type(self))))


def _kind_code(kind: Any) -> int:
    if isinstance(kind, str):
        try:
            return KIND_CODE[kind]
        except KeyError:
            raise InputError(f"unknown page kind {kind!r}; valid: {', '.join(KINDS)}") from None
    return int(kind)


# ---------------------------------------------------------------------------
# The policy base class and registry


def rank_scores(scores: np.ndarray, page_id: np.ndarray) -> np.ndarray:
    """Return row indices hottest first; equal scores put the newer page first.

    Use this when you already hold the scores (to report them) and want the
    order ``HeatPolicy.rank`` would give without scoring twice.
    """
    # lexsort sorts by the last key first, ascending. ~id (= -id - 1) reverses
    # the id order without overflowing at int64's minimum, as -id would.
    return np.lexsort((~np.asarray(page_id, dtype=np.int64), -np.asarray(scores, dtype=np.float64)))


class HeatPolicy:
    """Score candidate pages; subclass and override ``score``.

    Subclasses set ``name`` (the registry key) and take their parameters as
    constructor keyword arguments with defaults; ``params()`` returns them so
    ``get_policy(policy.name, **policy.params())`` rebuilds an equal policy.
    Declaring the subclass with ``@attrs.frozen`` gives validation, a useful
    ``repr`` and ``params()`` for free.
    """

    __slots__ = ()
    name: ClassVar[str] = ""

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        """Return one finite float64 per row of ``table``; higher is hotter.

        ``clock`` is the current step. Read nothing but the two arguments.
        """
        raise NotImplementedError

    def checked_score(self, table: PageTable, clock: int) -> np.ndarray:
        """Return ``score``'s answer after checking it: one finite float per row, else ``ConfigError``.

        The scheduler calls this, never ``score`` directly: a policy that
        returns NaN or the wrong length would silently mis-order pages.
        """
        name = self.name or type(self).__name__
        try:
            scores = np.asarray(self.score(table, clock), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"heat policy {name!r} returned scores that are not numbers: {exc}") from exc
        if scores.shape != (len(table),):
            raise ConfigError(
                f"heat policy {name!r} returned shape {scores.shape} for a table of {len(table)} rows"
            )
        if not np.isfinite(scores).all():
            raise ConfigError(f"heat policy {name!r} returned non-finite scores (NaN or infinity)")
        return scores

    def rank(self, table: PageTable, clock: int) -> np.ndarray:
        """Return row indices of ``table`` hottest first, ties newer page first."""
        return rank_scores(self.checked_score(table, clock), table.page_id)

    def params(self) -> dict[str, Any]:
        """Return the constructor parameters that reproduce this policy."""
        if attrs.has(type(self)):
            return attrs.asdict(self, recurse=False)
        return {k: v for k, v in getattr(self, "__dict__", {}).items() if not k.startswith("_")}


POLICIES: dict[str, type[HeatPolicy]] = {}

# Shipped policies that live in their own module (they need more than this one
# does), loaded by ``get_policy`` on first use of their name.
SHIPPED_ELSEWHERE: dict[str, str] = {"fitted": "pager.core.fitted"}

_P = TypeVar("_P", bound=type[HeatPolicy])


def register_policy(cls: _P) -> _P:
    """Register a policy class under its ``name``; usable as a decorator.

    Re-registering the same class is a no-op; taking a name another class
    holds is a ``ConfigError`` (shadowing a shipped policy silently would make
    a config file mean different things in different programs).
    """
    if not (isinstance(cls, type) and issubclass(cls, HeatPolicy)):
        raise ConfigError(f"{cls!r} is not a HeatPolicy subclass")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name or name != name.strip().lower():
        raise ConfigError(f"{cls.__name__}.name must be a non-empty lower-case string, got {name!r}")
    if cls.score is HeatPolicy.score:
        raise ConfigError(f"{cls.__name__} does not override score()")
    held = POLICIES.get(name)
    if held is not None and held is not cls:
        raise ConfigError(f"heat policy name {name!r} is taken by {held.__module__}.{held.__qualname__}")
    POLICIES[name] = cls
    return cls


def get_policy(
    spec: str | HeatPolicy | type[HeatPolicy] | None = None, **params: Any
) -> HeatPolicy:
    """Return a policy instance from a name, class or instance (None: the default).

    ``params`` are passed to the constructor (for an instance: replaced with
    ``attrs.evolve``). Unknown names and bad parameters raise ``ConfigError``
    naming what would have been valid.
    """
    if spec is None:
        spec = DEFAULT_POLICY
    if isinstance(spec, HeatPolicy):
        if not params:
            return spec
        if not attrs.has(type(spec)):
            raise ConfigError(f"cannot change parameters of {spec!r}; pass its class instead")
        return _construct(type(spec), lambda: attrs.evolve(spec, **params))
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key not in POLICIES and key in SHIPPED_ELSEWHERE:
            importlib.import_module(SHIPPED_ELSEWHERE[key])  # registers itself
        cls = POLICIES.get(key)
        if cls is None:
            valid = sorted(set(POLICIES) | set(SHIPPED_ELSEWHERE))
            raise ConfigError(f"unknown heat policy {spec!r}; valid: {', '.join(valid)}")
    elif isinstance(spec, type) and issubclass(spec, HeatPolicy):
        cls = spec
    else:
        raise ConfigError(f"a heat policy is a name, a HeatPolicy class or instance, not {spec!r}")
    return _construct(cls, lambda: cls(**params))


def _construct(cls: type[HeatPolicy], make: Any) -> HeatPolicy:
    try:
        return make()
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        valid = ", ".join(f.name for f in attrs.fields(cls)) if attrs.has(cls) else "see its constructor"
        raise ConfigError(f"bad parameters for heat policy {cls.name or cls.__name__!r}: {exc} (valid: {valid})") from None


# ---------------------------------------------------------------------------
# Parameter validation: raise ConfigError directly, so constructing a policy by
# hand fails the same way a config file does.


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"expected a number, got {value!r}")
    return float(value)


def _to_opt_float(value: Any) -> float | None:
    return None if value is None else _to_float(value)


def _half_life(_inst: Any, attr: attrs.Attribute, value: float | None) -> None:
    lo, hi = _HALF_LIFE_RANGE
    if value is not None and not lo <= value <= hi:
        raise ConfigError(f"{attr.name} must be in [{lo:g}, {hi:g}] steps, got {value!r}")


def _weight(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= _WEIGHT_MAX:
        raise ConfigError(f"{attr.name} must be in [0, {_WEIGHT_MAX:g}], got {value!r}")


def _fraction(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{attr.name} must be in [0, 1], got {value!r}")


def _half_life_field(default: float) -> Any:
    return attrs.field(default=default, converter=_to_float, validator=_half_life)


def _tool_half_life_field() -> Any:
    return attrs.field(default=None, converter=_to_opt_float, validator=_half_life)


def _weight_field(default: float) -> Any:
    return attrs.field(default=default, converter=_to_float, validator=_weight)


# ---------------------------------------------------------------------------
# Shared column arithmetic (vectorised; no loop over rows anywhere)


def _age(clock: int, since: np.ndarray) -> np.ndarray:
    """Return steps from ``since`` to ``clock`` as float64, never negative."""
    # Subtract in float64: int64 arithmetic could overflow for extreme inputs,
    # and every step count a session can reach is exact in float64.
    age = float(clock) - since.astype(np.float64)
    return np.maximum(age, 0.0, out=age)


def _half_lives(kind: np.ndarray, half_life: float, tool_half_life: float | None) -> np.ndarray | float:
    """Return each row's half-life: tool and file outputs use the tool half-life."""
    tool = half_life / 2.0 if tool_half_life is None else tool_half_life
    if tool == half_life:
        return half_life
    return np.where(np.isin(kind, _TOOL_CODES), tool, half_life)


# ---------------------------------------------------------------------------
# Shipped policies


@register_policy
@attrs.frozen
class DecayPolicy(HeatPolicy):
    """Recency of creation with exponential decay, kind-aware.

    Heat halves every ``half_life`` steps since the page was created; tool and
    file outputs halve every ``tool_half_life`` steps (default: half of
    ``half_life``). References are ignored: this is a smooth sliding window.
    """

    name: ClassVar[str] = "decay"
    half_life: float = _half_life_field(8.0)
    tool_half_life: float | None = _tool_half_life_field()

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        return -_age(clock, table.created) / _half_lives(table.kind, self.half_life, self.tool_half_life)


@register_policy
@attrs.frozen
class LRUPolicy(HeatPolicy):
    """Least recently used: the later a page was last referred to, the hotter.

    The score is minus the steps since ``last_ref`` (a never-referenced page
    counts from its creation); nothing else is read.
    """

    name: ClassVar[str] = "lru"

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        return -_age(clock, table.last_ref)


@register_policy
@attrs.frozen
class LFUPolicy(HeatPolicy):
    """Least frequently used, with the count decaying since the last reference.

    Heat is ``(1 + ref_count) * 2 ** (-age / half_life)`` with age counted
    from ``last_ref``: each doubling of references adds one bit, each
    ``half_life`` steps without one takes a bit away.
    """

    name: ClassVar[str] = "lfu"
    half_life: float = _half_life_field(32.0)

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        refs = np.maximum(table.ref_count, 0).astype(np.float64)
        return np.log2(1.0 + refs) - _age(clock, table.last_ref) / self.half_life


@register_policy
@attrs.frozen
class FIFOPolicy(HeatPolicy):
    """First in, first out: the newest page is the hottest, nothing else counts.

    The score is the creation step. This is the sliding-window baseline, for
    comparison in replays.
    """

    name: ClassVar[str] = "fifo"

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        return table.created.astype(np.float64)


@register_policy
@attrs.frozen
class ReferencePolicy(HeatPolicy):
    """Recency of last reference, plus evidence the page is still needed.

    Heat (in bits) starts at minus the half-lives of the page's age, where a
    reference renews ``ref_recency`` of the age (tool and file outputs age
    twice as fast by default), then adds ``ref_weight`` per doubling of references,
    ``relevance_weight`` times the relevance to the pinned goals and active
    task, and subtracts ``stale_penalty`` for a superseded file read and
    ``size_penalty`` per doubling of size above ``SIZE_UNIT`` tokens.
    """

    name: ClassVar[str] = "reference"
    # Defaults tuned on the development traces (docs/policies.md, "Tuning"):
    # renewing the whole age on a reference (ref_recency=1) and heavy weights
    # kept pages whose terms the recent turns already carried.
    half_life: float = _half_life_field(12.0)
    tool_half_life: float | None = _tool_half_life_field()
    ref_weight: float = _weight_field(0.5)
    stale_penalty: float = _weight_field(4.0)
    relevance_weight: float = _weight_field(1.0)
    size_penalty: float = _weight_field(0.5)
    ref_recency: float = attrs.field(default=0.5, converter=_to_float, validator=_fraction)
    # A page of another task than the active one loses this many bits, so a
    # task switch demotes the old task's units together at the next round and a
    # return to it restores them (``PageTable.task``).
    task_penalty: float = _weight_field(0.0)
    overlap_weight: float = _weight_field(0.0)

    def score(self, table: PageTable, clock: int) -> np.ndarray:
        if self.ref_recency == 1.0:
            since = table.last_ref
        else:
            # A reference renews this fraction of the page's age: 1 counts age
            # from the last reference (LRU), 0 from creation (FIFO).
            created = table.created.astype(np.float64)
            since = created + self.ref_recency * (table.last_ref.astype(np.float64) - created)
        heat = -_age(clock, since) / _half_lives(table.kind, self.half_life, self.tool_half_life)
        if self.ref_weight:
            heat += self.ref_weight * np.log2(1.0 + np.maximum(table.ref_count, 0).astype(np.float64))
        if self.relevance_weight:
            # Clip: relevance is the caller's number; a stray 1.3 must not
            # outweigh what the weight promises.
            heat += self.relevance_weight * np.clip(np.nan_to_num(table.relevance), 0.0, 1.0)
        if self.stale_penalty:
            heat -= self.stale_penalty * table.stale
        if self.size_penalty:
            size = np.maximum(table.tokens, 0).astype(np.float64) / SIZE_UNIT
            heat -= self.size_penalty * np.log2(1.0 + size)
        if self.task_penalty:
            heat -= self.task_penalty * ~table.task
        if self.overlap_weight:
            heat += self.overlap_weight * np.clip(np.nan_to_num(table.overlap), 0.0, 1.0)
        return heat


# ---------------------------------------------------------------------------
# The need table: how often a call needs a page, by kind, size and age


# The horizons (calls ahead) at which ``NeedTable.expected`` answers; the planner interpolates.
HORIZONS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_MAX_AGE = 4096
_AHEAD = np.asarray(HORIZONS, dtype=np.int64)


@attrs.frozen(eq=False)
class NeedTable:
    """Per-call chance that a call needs a page (the page last held one of the call's needs).

    ``rates[group][size][age]``: ``group`` is "call" (the agent's own
    messages, its tool calls, user turns) or "tool" (tool and file output);
    ``size`` the first of ``sizes`` (tokens) the page is within; ``age`` the
    first of ``ages`` (assistant messages since the page was written, or last
    referred to) it is within. The shipped table, ``NEEDS``, was measured by
    ``bench/need_rates.py`` on the training half of the development sessions
    (docs/tuning.md): the chance falls with age like a power law, not the
    halving of heat, which is why it is a table.
    """

    ages: tuple[int, ...]
    sizes: tuple[int, ...]
    rates: Mapping[str, tuple[tuple[float, ...], ...]]
    _cum: np.ndarray = attrs.field(init=False, repr=False)
    _sizes: np.ndarray = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        groups = ("call", "tool")
        if set(self.rates) != set(groups):
            raise ConfigError(f"need table groups must be {groups}, got {sorted(self.rates)}")
        span = _MAX_AGE + HORIZONS[-1] + 1
        age = np.arange(span)
        cols = np.searchsorted(np.asarray(self.ages), age, side="left").clip(0, len(self.ages) - 1)
        cum = np.zeros((len(groups), len(self.sizes), span + 1))
        for g, name in enumerate(groups):
            rows = self.rates[name]
            if len(rows) != len(self.sizes) or any(len(r) != len(self.ages) for r in rows):
                raise ConfigError(f"need table {name!r}: one row per size, one rate per age")
            for k, row in enumerate(rows):
                rate = np.clip(np.asarray(row, dtype=np.float64), 0.0, 1.0)[cols]
                cum[g, k, 1:] = np.cumsum(rate)
        object.__setattr__(self, "_cum", cum)
        object.__setattr__(self, "_sizes", np.asarray(self.sizes))

    def expected(self, table: PageTable, clock: int, scale: float = 1.0) -> np.ndarray:
        """Return, per row and per horizon of ``HORIZONS``, the calls expected to need the page.

        Row ``i``, column ``k``: the sum over the next ``HORIZONS[k]`` calls of
        the chance each needs page ``i`` (times ``scale``), its age counted
        from its last reference.
        """
        return self.expected_of(table.kind, table.tokens, table.created, table.last_ref, clock, scale)

    def expected_of(
        self, kind: np.ndarray, tokens: np.ndarray, created: np.ndarray, last_ref: np.ndarray, clock: int,
        scale: float = 1.0,
    ) -> np.ndarray:
        """Return ``expected`` of the rows these columns hold (the page table's ``kind``, ``tokens``, ...).

        The scheduler asks it for a few rows between rounds (a big output at the tail), where building a
        ``PageTable`` and ``np.isin`` cost more than the arithmetic (issue 23).
        """
        group = ((kind == _TOOL_CODES[0]) | (kind == _TOOL_CODES[1])).astype(np.int64)
        # np.minimum / np.maximum rather than np.clip: the same values, without its Python overhead
        # (searchsorted gives 0..len(sizes); an age is never negative)
        size = np.minimum(np.searchsorted(self._sizes, tokens, side="left"), len(self.sizes) - 1)
        since = np.maximum(created, last_ref)
        age = np.minimum(_age(clock, since), _MAX_AGE).astype(np.int64)
        # gathered element by element: ``self._cum[group, size]`` would copy a row of span + 1 floats per
        # page (2 GB at 50,000 pages) to read twelve of them (issue 23)
        lo = self._cum[group, size, age + 1][:, None]
        hi = self._cum[group[:, None], size[:, None], age[:, None] + _AHEAD[None, :] + 1]
        return np.maximum((hi - lo) * scale, 0.0)


NEEDS = NeedTable(
    ages=(1, 2, 4, 8, 16, 32, 64, 128, 1 << 30),
    sizes=(200, 1000, 3000, 1 << 62),
    rates={
        "call": (
            (0.222, 0.065, 0.042, 0.028, 0.0145, 0.0075, 0.0039, 0.001, 0.0005),
            (0.308, 0.143, 0.105, 0.0755, 0.0384, 0.0211, 0.0067, 0.001, 0.0005),
            (0.353, 0.223, 0.142, 0.0734, 0.0514, 0.0402, 0.0049, 0.001, 0.0005),
            (0.353, 0.223, 0.142, 0.0734, 0.0514, 0.0402, 0.0049, 0.001, 0.0005),
        ),
        "tool": (
            (0.181, 0.034, 0.0166, 0.0128, 0.0067, 0.0028, 0.002, 0.0005, 0.0002),
            (0.256, 0.0906, 0.0749, 0.0503, 0.0257, 0.0149, 0.0063, 0.0017, 0.0005),
            (0.275, 0.110, 0.110, 0.071, 0.047, 0.0256, 0.011, 0.0028, 0.001),
            (0.274, 0.175, 0.0838, 0.0786, 0.0525, 0.0312, 0.0109, 0.0028, 0.001),
        ),
    },
)


assert DEFAULT_POLICY in POLICIES
