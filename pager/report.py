"""Per-call reports: what one ``assemble`` did, for logs, people and the benchmark."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import attrs
import orjson

from pager.stateio import open_private

__all__ = ["LayoutLog", "Report", "ReportLog", "layout_delta"]


@attrs.frozen(slots=True)
class Report:
    """What one ``assemble`` emitted and why.

    ``layers`` are token counts: ``l1`` (pinned rows and the card), ``l2``
    (history shown in full), ``stubs`` (tool outputs shown as stubs), ``l3``
    (recalled pages). ``changed_from`` is the index of the first emitted
    message that differs from the previous call's prompt (None when the
    prefix was kept: the prompt only grew at the tail). ``faults`` (demoted
    pages needed again), ``recall_hits`` (pages recalled so far) and
    ``recall_precision`` (the share of them the next message referred to)
    count over the session. ``behind`` is how many recorded rows lay past
    the request's history (a request overtaken by a newer one): such a call
    recorded nothing and changed no layout.
    """

    session: str
    call: int
    step: int
    messages_in: int
    messages_out: int
    tokens: int
    budget: int
    layers: dict[str, int]
    pages_kept: int
    pages_stubbed: int
    pages_dropped: int
    pages_recalled: int
    handles_issued: int
    new_pages: int
    round: bool
    reason: str
    prefix_kept: bool
    changed_from: int | None
    faults: int
    elapsed_ms: float
    recall_hits: int = 0
    recall_precision: float | None = None
    mode: str = "paging"
    notices: tuple[str, ...] = ()
    behind: int = 0  # recorded rows past this request's history: > 0, it was planned read-only

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


log = logging.getLogger("pager.report")


def layout_delta(prev: list[Any] | None, slots: list[Any]) -> tuple[int, list[Any]]:
    """Return where ``slots`` first differ from ``prev`` and the slots from there on.

    What a report keeps of its prompt's layout (``pager ui`` rebuilds each
    call's prompt from it): between demotion rounds a layout only grows at its
    tail, so the part kept per call is a few slots; a round keeps the whole
    layout. ``prev`` is the layout of an earlier call of the same writer.
    """
    if prev is None:
        return 0, slots
    m = min(len(prev), len(slots))
    # the common case first, at C speed: everything but the last few slots unchanged
    j = max(0, m - 8) if slots[: max(0, m - 8)] == prev[: max(0, m - 8)] else 0
    while j < m and slots[j] == prev[j]:
        j += 1
    return j, slots[j:]


class LayoutLog:
    """Keep each call's layout in the report log as a change against this writer's previous one."""

    def __init__(self) -> None:
        self._base: tuple[int, list[Any], str] | None = None  # (call, slots, card) last logged

    def entry(self, call: int, layout: Mapping[str, Any]) -> dict[str, Any]:
        """Return the report's ``layout`` entry for call ``call`` (a few slots between rounds).

        ``pager ui`` rebuilds each call's prompt from it; the card is kept
        only when it changed.
        """
        base = self._base
        start, tail = layout_delta(base[1] if base else None, layout["slots"])
        delta: dict[str, Any] = {"base": base[0] if base and start else None, "from": start, "slots": tail}
        if not start or base is None or base[2] != layout.get("card", ""):
            delta["card"] = layout.get("card", "")
        self._base = (call, layout["slots"], layout.get("card", ""))
        return delta


class ReportLog:
    """Append reports as JSON lines to ``reports.jsonl`` in the store folder.

    The file rotates by size: past ``max_bytes`` it becomes ``reports.jsonl.1``
    (older ones shift up to ``.{keep}``, the oldest is dropped), so a long-lived
    store's log stays bounded.
    """

    MAX_BYTES = 16 * 1024 * 1024
    KEEP = 3

    def __init__(self, folder: str | os.PathLike[str] | None, enabled: bool = True, *,
                 max_bytes: int | None = None, keep: int | None = None) -> None:
        self.max_bytes = self.MAX_BYTES if max_bytes is None else max_bytes
        self.keep = self.KEEP if keep is None else keep
        # a store with no folder (in memory, a database server) keeps no report file
        self.path = Path(folder) / "reports.jsonl" if folder is not None else None
        self.enabled = enabled and self.path is not None

    def append(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        assert self.path is not None
        line = orjson.dumps(record) + b"\n"
        try:
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                self._rotate()
            # one write call per line: a crash leaves at most one torn last line, which readers skip;
            # created 0600 and never through a symlink (it holds what the agent saw)
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            with os.fdopen(fd, "ab") as fh:
                fh.write(line)
        except OSError as exc:
            # reports are observability: a full disk must not fail the call that produced one
            if exc.errno == errno.ELOOP:
                log.warning("%s is a symlink; pager never writes reports through one", self.path)

    def _rotate(self) -> None:
        assert self.path is not None
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.keep:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()

    def read(self) -> list[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return []
        out = []
        for line in self.path.read_bytes().splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        return out
