"""Faster checks on the ingest path answer exactly as the ones they replaced (issue 23)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.core import termscan


@settings(max_examples=examples(150, 500), deadline=None)
@given(text=st.text(st.characters(codec="ascii"), max_size=80) | st.text(max_size=80))
@example(text="a\x1fb")
@example(text="a\x1cb")
@example(text="\x00")
@example(text="x\x85y")
@example(text="plain ascii words")
def test_prop_the_splittable_test_is_the_class_scan(text: str) -> None:
    assert termscan._splittable(text) == (termscan._NOT_SPLITTABLE.search(text) is None)
