"""The objective's need of a few rows, held with their row numbers, reads as a whole table's (issue 23).

Between rounds the planner weighs only the big outputs at the tail, and asks for
their need alone (``PlanInput.scored(rows)``): ``PlanInput.need`` then holds
those rows' values and ``need_rows`` their row numbers, instead of a table of
every row filled with zeros (0.7 ms a call at 50,000 pages). Whatever the
planner reads of it must be what the whole table gives.
"""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import given, settings, strategies as st

from pager.core.heat import HORIZONS
from pager.core.plan import _need_at, _need_over
from pager.core.layout import PlanInput


def _input(n: int) -> PlanInput:
    z = np.zeros(n, dtype=np.int64)
    return PlanInput(page=np.arange(1, n + 1), tokens=z + 100, stub_tokens=z + 10, unit=np.arange(n),
                     pinned=np.zeros(n, dtype=bool), tool=np.ones(n, dtype=bool), heat=None)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.integers(0, n - 1), unique=True, max_size=n),
    st.lists(st.integers(0, n - 1), max_size=2 * n),
    st.integers(0, 2**32 - 1),
)), st.floats(0.5, 2000.0))
def test_rows_held_read_as_the_whole_table(case: tuple[int, list[int], list[int], int], horizon: float) -> None:
    n, held, asked, seed = case
    table = np.random.default_rng(seed).random((n, len(HORIZONS))) * np.asarray(HORIZONS)
    full = np.zeros_like(table)
    full[held] = table[held]  # what the table of every row held: the rows scored, zeros elsewhere
    whole = attrs.evolve(_input(n), need=full)
    few = attrs.evolve(_input(n), need=table[held], need_rows=np.asarray(held, dtype=np.int64))
    rows = np.asarray(asked, dtype=np.int64)
    assert np.array_equal(_need_at(few, rows), _need_at(whole, rows))
    assert np.array_equal(_need_over(few, rows, horizon), _need_over(whole, rows, horizon))
