"""The per-call write half of ``assemble`` does only what is new, and writes what it wrote before (issue 23).

Each test holds a shortcut of the write path to the result of the long way:
the acknowledged-writes sidecar kept in pieces writes the very bytes the whole
mapping serialises to; a term numbered without reading the table back gets the
number SQLite would have given it.
"""

from __future__ import annotations

import orjson

from pager.storage import acked as acked_mod
from pager.storage.acked import MAX_RANGES, MAX_SESSIONS, AckedMark


def _reference_merge(data: dict, max_page: int, versions: dict, ranges: dict, at: float) -> dict:
    """The sidecar's merge as the module docstring states it: the mapping a commit leaves behind."""
    known = dict(data.get("versions") or {})
    for name, version in versions.items():
        old = int(known.pop(name, 0) or 0)
        known[name] = max(old, int(version))
    if len(known) > MAX_SESSIONS:
        known = dict(list(known.items())[-MAX_SESSIONS:])
    spans = list(data.get("ranges") or []) + [[a, b, name] for name, (a, b) in ranges.items()]
    return {"v": 1, "max_page": max(int(data.get("max_page") or 0), max_page), "versions": known,
            "ranges": spans[-MAX_RANGES:], "at": at}


def test_the_sidecar_kept_in_pieces_writes_what_the_whole_mapping_serialises_to(tmp_path, monkeypatch):
    clock = iter(range(1, 10**6))
    monkeypatch.setattr(acked_mod.time, "time", lambda: next(clock) + 0.25)
    mine, other = AckedMark(tmp_path), AckedMark(tmp_path)  # two writers of one store
    expect: dict = {}
    pid = 0
    for i in range(MAX_RANGES + 300):
        writer = other if i % 97 == 0 else mine  # another process writes now and then: re-read, not assumed
        names = [f"s{i % (MAX_SESSIONS + 40)}"] + ([f"t{i}"] if i % 5 == 0 else [])
        versions = {n: i + 1 for n in names}
        ranges = {n: (pid + 1 + k, pid + 1 + k) for k, n in enumerate(names) if i % 3}
        pid += len(names)
        writer.record(pid, versions, ranges)
        expect = _reference_merge(expect, pid, versions, ranges, i + 1.25)
        raw = (tmp_path / acked_mod.ACKED_NAME).read_bytes()
        assert raw == orjson.dumps(expect), i
    assert len(expect["ranges"]) == MAX_RANGES and len(expect["versions"]) == MAX_SESSIONS
    assert mine.read() == expect and other.read() == expect


def test_a_sidecar_reset_by_a_check_is_read_again_before_the_next_mark(tmp_path):
    mark = AckedMark(tmp_path)
    mark.record(10, {"a": 3}, {"a": (1, 10)})
    # the database lost everything: the check resets the file to what the database holds
    assert mark.check(lambda: 0, lambda names: {}) is not None
    mark.record(2, {"b": 1}, {"b": (1, 2)})
    got = mark.read()
    assert got["ranges"] == [[1, 2, "b"]] and got["versions"] == {"b": 1} and got["max_page"] == 2
