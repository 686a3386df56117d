"""A page's referable terms, and terms extracted only when first read.

``page_terms`` is what a page is referred to by: the terms of its text
(``pager.core.terms``), and for a file read its path and file name.

``LazyTerms`` holds a tool output's terms before they are extracted. Scanning
a large output is one of the costlier parts of recording it, and between
rounds nothing a call plans with reads a tool page's terms: only user and
assistant messages refer to pages (their terms are scanned at once), and the
term index answers for a tool page only when a recall search could return it
or a round scores relevance. So ``History.prepare`` gives the tool pages that
close a batch (no referring message after them) a ``LazyTerms``, the history
keeps them pending (``History.settle_terms``), and the proxy forwards the
request before the scan: the facade settles every pending page before the
call ends (``Pager._assemble``, after ``ready``), and anything that needs one
earlier settles first. A ``LazyTerms`` reads as the tuple ``NewPage.terms``
would hold (the same order: the same frozenset, built the same way), so a
store writing it later writes the same row. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from pager.core import terms as terms_mod
from pager.core.fileread import base_path

__all__ = ["LazyTerms", "page_terms"]


def page_terms(text: str, path: str | None, limit: int) -> frozenset[str]:
    """Return a page's referable terms; a file page also answers to its path and file name.

    A file read's content rarely names its own path (the call that read it
    does), yet "edit src/x.py" refers to that content more than to anything.
    """
    terms = terms_mod.extract_terms(text, limit=limit)
    if path:
        path = base_path(path)  # a partial read answers to its file
        extra = {path, path.rsplit("/", 1)[-1]}
        if path.startswith("./"):
            extra.add(path[2:])
        terms = terms | frozenset(extra)
    return terms


class LazyTerms(Sequence[str]):
    """``page_terms(text, path, limit)``, extracted on first read; reads as its tuple. Thread-safe enough:
    two first reads at once extract twice and keep equal values."""

    __slots__ = ("_args", "_set", "_tuple")

    def __init__(self, text: str, path: str | None, limit: int) -> None:
        self._args: tuple[str, str | None, int] | None = (text, path, limit)
        self._set: frozenset[str] | None = None
        self._tuple: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        """Whether the terms are still to be extracted."""
        return self._set is None

    def resolve(self) -> frozenset[str]:
        """Return the terms, extracting them the first time (the text is then let go)."""
        got = self._set
        if got is None:
            assert self._args is not None
            got = page_terms(*self._args)
            self._tuple = tuple(got)
            self._set = got
            self._args = None
        return got

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...

    def __getitem__(self, i: Any) -> Any:
        self.resolve()
        return self._tuple[i]

    def __len__(self) -> int:
        self.resolve()
        return len(self._tuple)

    def __iter__(self) -> Iterator[str]:
        self.resolve()
        return iter(self._tuple)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyTerms):
            return self.resolve() == other.resolve() and self._tuple == other._tuple
        if isinstance(other, tuple):
            self.resolve()
            return self._tuple == other
        return NotImplemented

    def __hash__(self) -> int:
        self.resolve()
        return hash(self._tuple)

    def __repr__(self) -> str:
        return f"LazyTerms({self._tuple!r})" if self._set is not None else "LazyTerms(<pending>)"
