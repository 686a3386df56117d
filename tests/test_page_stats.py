"""Schema 6: a page's changed statistics live in ``page_stats``, not in the row that holds its message.

The statistics (staleness, last reference, reference count) change after a
page is recorded, most calls; writing them into the page's own row rewrote
its message too. A store written by schema 5 (statistics in the page rows,
no ``page_stats``) migrates at open without copying anything: each page's
own columns hold its statistics until they change again.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import orjson

import pager
from pager.core.pages import StatUpdate
from pager.lab.synth import generate_session
from pager.storage.sqlite import DB_NAME, SCHEMA_VERSION, SQLiteStore

OPTS = {"context_window": 24_000, "log_reports": False}
STATS = ("stale", "last_ref", "ref_count")


def _fresh(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return orjson.loads(orjson.dumps(msgs))  # new objects: nothing is known by identity


def _ends(msgs: list[dict[str, Any]]) -> list[int]:
    return [k for k in range(2, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]


def _recorded(path: Path, seed: int, calls: int) -> tuple[list[dict[str, Any]], list[int]]:
    _h, msgs = generate_session(seed, 40)
    ends = _ends(msgs)
    with pager.open(path, session="s", **OPTS) as p:
        for k in ends[:calls]:
            p.assemble({"messages": msgs[:k]})
    return msgs, ends


def _as_schema_5(path: Path, snapshot: bool) -> int:
    """Take the store at ``path`` back to schema 5: statistics in the page rows, no ``page_stats``.

    Returns how many pages had changed statistics. ``snapshot``: keep the
    session's snapshot (else drop it: the reopen reads the rows).
    """
    db = sqlite3.connect(path / DB_NAME)
    with db:
        moved = db.execute("SELECT COUNT(*) FROM page_stats").fetchone()[0]
        for col in STATS:
            db.execute(f"UPDATE pages SET {col} = (SELECT s.{col} FROM page_stats s WHERE s.id = pages.id) "
                       "WHERE id IN (SELECT id FROM page_stats)")
        db.execute("DROP TABLE page_stats")
        if not snapshot:
            db.execute("DELETE FROM snapshots")
        db.execute("UPDATE settings SET value='5' WHERE key='schema_version'")
    db.close()
    return moved


def _stats(p: pager.Pager) -> list[tuple[Any, ...]]:
    h = p.history
    return list(zip(h.page, h.stale, h.last_ref, h.ref_count))


def test_a_schema_5_store_migrates_and_keeps_its_statistics(tmp_path: Path) -> None:
    for snapshot in (True, False):
        path, ref = tmp_path / f"old-{snapshot}", tmp_path / f"ref-{snapshot}"
        msgs, ends = _recorded(path, 11, 30)
        shutil.copytree(path, ref)
        assert _as_schema_5(path, snapshot) > 0  # the session changed some page's statistics
        with pager.open(path, session="s", **OPTS) as a, pager.open(ref, session="s", **OPTS) as b:
            assert a.store.setting("schema_version") == str(SCHEMA_VERSION) == "6"
            assert a._mirror.store._db.execute("SELECT COUNT(*) FROM page_stats").fetchone()[0] == 0
            assert _stats(a) == _stats(b)
            stale = {pid: s for pid, s, _l, _r in _stats(a)}
            assert any(stale.values()) and any(r for *_x, r in _stats(a))
            # the store's own reads give them too: records, and the rows a crash's reopen reads
            recs = a.store.load_pages(a.history.page)
            assert [(r.id, r.stale, r.last_ref, r.ref_count) for r in recs] == _stats(a)
            for k in ends[30:36]:
                assert a.assemble({"messages": _fresh(msgs[:k])}) == b.assemble({"messages": _fresh(msgs[:k])}), k
            assert _stats(a) == _stats(b)
            after = _stats(a)
        with pager.open(path, session="s", **OPTS) as a:
            assert _stats(a) == after
        db = sqlite3.connect(path / DB_NAME)
        with db:
            db.execute("DELETE FROM snapshots")  # and from the rows alone
        db.close()
        with pager.open(path, session="s", **OPTS) as a:
            assert _stats(a) == after


def test_update_stats_writes_a_row_of_its_own_and_every_read_sees_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "st")
    branch = store.ensure_session("s")
    with pager.open(tmp_path / "rec", session="s", **OPTS) as p:
        _h, msgs = generate_session(3, 12)
        p.assemble({"messages": msgs})
        pages = p.store.load_pages(p.history.page[:3])
    _b, ids = store.record("s", branch, None, 0, [_new(r) for r in pages])
    db = store._db
    before = db.execute("SELECT * FROM pages ORDER BY id").fetchall()
    db.execute("DELETE FROM snapshot_moved")
    store.update_stats([StatUpdate(ids[1], last_ref=9, ref_count=4, stale=True)])
    assert db.execute("SELECT * FROM pages ORDER BY id").fetchall() == before  # the page rows are as recorded
    assert db.execute("SELECT * FROM page_stats").fetchall() == [(ids[1], 1, 9, 4)]
    assert db.execute("SELECT session FROM snapshot_moved").fetchall() == [("s",)]
    rec = store.load_pages([ids[1]])[0]
    assert (rec.stale, rec.last_ref, rec.ref_count) == (True, 9, 4)
    cols = store.branch_columns(branch)
    assert (cols.stale[1], cols.last_ref[1], cols.ref_count[1]) == (True, 9, 4)
    assert (cols.stale[0], cols.ref_count[0]) == (False, 0)
    (got,) = [r for r, _m in store.iter_pages() if r.id == ids[1]]
    assert (got.stale, got.last_ref, got.ref_count) == (True, 9, 4)
    store.update_stats([StatUpdate(ids[1], last_ref=11, ref_count=5, stale=False)])  # replaced, not added
    assert db.execute("SELECT * FROM page_stats").fetchall() == [(ids[1], 0, 11, 5)]
    store.close()


def _new(rec: Any) -> Any:
    from pager.core.pages import NewPage

    return NewPage(hash=rec.hash, kind=rec.kind, role=rec.role, step=rec.step, tokens=rec.tokens,
                   stub_tokens=rec.stub_tokens, chars=rec.chars, handle=rec.handle, message=b"{}",
                   call_id=rec.call_id, call_ids=rec.call_ids, tool_name=rec.tool_name, path=rec.path,
                   labels=rec.labels, terms=tuple(rec.terms or ()))


def test_the_session_mark_is_written_again_once_a_snapshot_or_another_connection_dropped_it(tmp_path: Path) -> None:
    path = tmp_path / "st"
    _recorded(path, 5, 6)
    with pager.open(path, session="s", **OPTS) as p:
        store, h = p.store, p.history
        db = store._db
        marked = lambda: db.execute("SELECT session FROM snapshot_moved").fetchall()  # noqa: E731
        assert marked() == []  # the close wrote a snapshot
        store.update_stats([StatUpdate(h.page[2], 50, 3, False)], "s")
        assert marked() == [("s",)]
        assert p._mirror.save_snapshot()  # drops the mark: the next change marks again
        assert marked() == []
        store.update_stats([StatUpdate(h.page[2], 51, 4, False)], "s")
        assert marked() == [("s",)]
        other = sqlite3.connect(path / DB_NAME)  # another connection's snapshot, say, drops it
        with other:
            other.execute("DELETE FROM snapshot_moved")
        other.close()
        store.update_stats([StatUpdate(h.page[2], 52, 5, False)], "s")
        assert marked() == [("s",)]
        assert p._mirror.save_snapshot()
        try:  # a mark written in a transaction that rolls back is gone: written again at the next change
            with store.transaction():
                store.update_stats([StatUpdate(h.page[2], 53, 6, False)], "s")
                assert marked() == []  # its statements wait for the end of the transaction (sqlite_tx)
                store.max_page_id()  # or for another method of the store, which runs them first
                assert marked() == [("s",)]
                raise KeyError("roll back")
        except KeyError:
            pass
        assert marked() == []
        store.update_stats([StatUpdate(h.page[2], 54, 6, False)], "s")
        assert marked() == [("s",)]
