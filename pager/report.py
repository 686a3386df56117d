"""Per-call reports: what one ``assemble`` did, for logs, people and the benchmark."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import orjson

__all__ = ["Report", "ReportLog"]


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
    count over the session.
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

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class ReportLog:
    """Append reports as JSON lines to ``reports.jsonl`` in the store folder."""

    def __init__(self, folder: str | os.PathLike[str] | None, enabled: bool = True) -> None:
        # a store with no folder (in memory, a database server) keeps no report file
        self.path = Path(folder) / "reports.jsonl" if folder is not None else None
        self.enabled = enabled and self.path is not None

    def append(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        # one write call per line: a crash leaves at most one torn last line,
        # which readers skip
        with open(self.path, "ab") as fh:  # type: ignore[arg-type]
            fh.write(orjson.dumps(record) + b"\n")

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
