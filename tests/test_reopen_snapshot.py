"""Reopening from the column snapshot a close leaves: the same mirror and the same calls as from the rows.

Each test closes a session (which writes its snapshot), changes the store
the way a crash, another writer, a fork or a corrupted file would, then
reopens it twice: from the snapshot, and from a copy whose snapshot was
dropped (the row load every reopen did before schema 5). Both must give the
same mirror, and the same prompts for the same calls after.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import pager
from pager.core import snapshot as snap_mod
from pager.core.canonical import canonical_bytes
from pager.core.digest import CHUNK, RunningDigest, digest_messages
from pager.core.history import History
from pager.core.pages import PageColumns, StatUpdate
from pager.lab.synth import generate_session
from pager.storage.base import branch_columns
from pager.storage.sqlite import DB_NAME, SCHEMA_VERSION, SQLiteStore

OPTS = {"context_window": 24_000, "log_reports": False}
# what a reopen loads into the mirror (edits and compact line sizes are learnt anew by any reopen)
LOADED = ("page", "hash", "kind", "role", "tokens", "stub_tokens", "step", "path", "handle", "stale", "last_ref",
          "ref_count", "answers", "labels", "tool_name", "call_ids", "task_num", "unit", "user_rows", "first_user",
          "row_of", "call_rows", "path_rows", "base_keys", "task_terms", "calls", "digest", "branch")


def _fresh(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return orjson.loads(orjson.dumps(msgs))  # new objects: nothing is known by identity


def _ends(msgs: list[dict[str, Any]]) -> list[int]:
    return [k for k in range(2, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]


def _db(path: Any) -> sqlite3.Connection:
    return sqlite3.connect(Path(path) / DB_NAME)


def _snapshots(path: Any) -> list[tuple[str, int, int]]:
    db = _db(path)
    try:
        return [tuple(r) for r in db.execute("SELECT session, branch, rows FROM snapshots ORDER BY session")]
    finally:
        db.close()


def _without_snapshot(src: Any, dst: Any) -> str:
    """Copy the store at ``src`` to ``dst`` and drop its snapshots (it reopens from the rows)."""
    shutil.copytree(src, dst)
    db = _db(dst)
    with db:
        db.execute("DELETE FROM snapshots")
        db.execute("DELETE FROM vocab_snapshot")
    db.close()
    return str(dst)


def _same_mirror(a: History, b: History, live: bool = False) -> None:
    """Assert two mirrors hold the same; ``live``: ``b`` was never reopened (it knows every call, not the last's)."""
    for name in LOADED:
        if live and name in ("calls", "digest"):
            continue
        assert getattr(a, name) == getattr(b, name), name
    assert len(a) == len(b)
    assert [a.terms[i] for i in range(len(a))] == [b.terms[i] for i in range(len(b))]
    assert a.query_terms() == b.query_terms() and a.task == b.task
    words = sorted(set().union(*(a.terms[i] for i in range(len(a)))))
    assert [a.term_index.df(w) for w in words] == [b.term_index.df(w) for w in words]
    for i in range(0, len(a), 5):
        assert a.term_index.references(a.terms[i], before=a.page[i]) == b.term_index.references(
            b.terms[i], before=b.page[i])
        assert a.term_index.terms_of(a.page[i]) == b.term_index.terms_of(b.page[i])
    for name, col in a.columns().items():
        if not (live and name == "compact_tokens"):  # counted on first use after a reopen
            assert (col == b.columns()[name]).all(), name


def _same_calls(a: pager.Pager, b: pager.Pager, msgs: list[dict[str, Any]], ends: list[int]) -> None:
    for k in ends:
        assert a.assemble({"messages": _fresh(msgs[:k])}) == b.assemble({"messages": _fresh(msgs[:k])}), k


@pytest.fixture
def row_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the page rows a reopen read from the pages table (what a sound snapshot spares)."""
    seen = [0]
    real = SQLiteStore._branch_rows

    def counted(self: SQLiteStore, branch: int, start: int) -> Any:
        got = real(self, branch, start)
        seen[0] += len(got[0]["id"])
        return got

    monkeypatch.setattr(SQLiteStore, "_branch_rows", counted)
    return seen


def _recorded(tmp_path: Path, seed: int = 3, steps: int = 45, cut: int | None = None) -> tuple[str, list, list]:
    _h, msgs = generate_session(seed, steps)
    ends = _ends(msgs)
    p = pager.open(tmp_path / "store", session="s", **OPTS)
    for k in ends[:cut]:
        p.assemble({"messages": _fresh(msgs[:k])})
    p.close()
    return str(tmp_path / "store"), msgs, ends


@pytest.mark.parametrize("seed", [3, 11])
def test_close_writes_a_snapshot_and_a_reopen_reads_it_not_the_rows(tmp_path, row_loads, seed):
    path, msgs, ends = _recorded(tmp_path, seed, cut=30)
    ref = _without_snapshot(path, tmp_path / "ref")
    [(session, _branch, rows)] = _snapshots(path)
    assert session == "s" and rows == ends[29]
    row_loads[0] = 0
    a = pager.open(path, session="s")
    assert row_loads[0] == 0  # every page from the snapshot
    b = pager.open(ref, session="s")
    assert row_loads[0] == rows  # the copy without one read them all
    _same_mirror(a.history, b.history)
    _same_calls(a, b, msgs, ends[29:])
    a.close()
    b.close()


def test_a_snapshot_behind_the_store_reads_the_newer_rows_and_the_changed_statistics(tmp_path, row_loads):
    # a process that reopened, recorded more and died without closing: the snapshot covers the old rows only
    path, msgs, ends = _recorded(tmp_path, 5, cut=20)
    [(_s, _b, rows)] = _snapshots(path)
    live = pager.open(path, session="s")
    for k in ends[20:34]:
        live.assemble({"messages": _fresh(msgs[:k])})
    shutil.copytree(path, tmp_path / "crashed")  # the committed state, WAL included, as a kill -9 leaves it
    db = _db(tmp_path / "crashed")
    dirty = db.execute("SELECT COUNT(*) FROM snapshot_moved").fetchone()[0]
    db.close()
    assert dirty > 0  # later messages referred back to pages the snapshot holds: their statistics changed
    ref = _without_snapshot(tmp_path / "crashed", tmp_path / "ref")
    row_loads[0] = 0
    a = pager.open(tmp_path / "crashed", session="s")
    assert row_loads[0] == len(a.history) - rows  # only the rows after the snapshot
    b = pager.open(ref, session="s")
    _same_mirror(a.history, b.history)
    _same_mirror(a.history, live.history, live=True)
    _same_calls(a, b, msgs, ends[34:])
    a.close()
    b.close()
    live.close()


def test_statistics_changed_through_the_store_after_the_snapshot_are_read(tmp_path):
    path, msgs, ends = _recorded(tmp_path, 7, cut=25)
    store = SQLiteStore(path)
    head = store.ensure_session("s")
    ids = store.branch_page_ids(head)
    store.update_stats([StatUpdate(ids[3], 999, 41, True), StatUpdate(ids[-2], 998, 7, False)])
    want = PageColumns.of(store.load_pages(ids))
    got = branch_columns(store, head)
    for name in ("stale", "last_ref", "ref_count", "id", "hash", "kind", "labels", "call_ids", "digest"):
        assert list(getattr(got, name)) == list(getattr(want, name)), name
    assert [set(t) for t in got.terms] == [set(t) for t in want.terms]
    store.close()


def test_a_fork_after_the_snapshot_reads_the_shared_prefix_from_it(tmp_path, row_loads):
    path, msgs, ends = _recorded(tmp_path, 9, cut=30)
    [(_s, branch, rows)] = _snapshots(path)
    live = pager.open(path, session="s")
    k = ends[26]
    edited = _fresh(msgs[:k])
    row = next(i for i in range(k - 12, k) if edited[i]["role"] == "tool")
    edited[row]["content"] = "the same command, run again: 0 failures"
    live.assemble({"messages": edited})  # diverges at ``row``: a new branch sharing the rows before it
    assert live.history.branch != branch
    shutil.copytree(path, tmp_path / "crashed")
    ref = _without_snapshot(tmp_path / "crashed", tmp_path / "ref")
    row_loads[0] = 0
    a = pager.open(tmp_path / "crashed", session="s")
    assert row_loads[0] == len(a.history) - row  # the shared prefix came from the old branch's snapshot
    b = pager.open(ref, session="s")
    _same_mirror(a.history, b.history)
    _same_mirror(a.history, live.history, live=True)
    _same_calls(a, b, [*edited, *msgs[k:]], [k + 1, len(msgs)])
    a.close()
    b.close()
    live.close()
    assert [s[1] for s in _snapshots(path)] == [a.history.branch]  # the close kept the new head's


@pytest.mark.parametrize("damage", ["flipped", "truncated", "foreign", "empty"])
def test_a_corrupt_snapshot_falls_back_to_the_rows_and_is_rewritten(tmp_path, row_loads, damage):
    path, msgs, ends = _recorded(tmp_path, 4, cut=30)
    ref = _without_snapshot(path, tmp_path / "ref")
    db = _db(path)
    with db:
        data = bytearray(db.execute("SELECT data FROM snapshots").fetchone()[0])
        if damage == "flipped":
            data[len(data) // 2] ^= 0x40
        elif damage == "truncated":
            data = data[: len(data) - 100]
        elif damage == "foreign":  # a sound blob, of other pages: the page ids do not match the branch
            cols = {f: [] for f in ("id", "hash", "kind", "role", "step", "tokens", "stub_tokens", "call_id",
                                    "call_ids", "tool_name", "path", "stale", "labels", "last_ref", "ref_count",
                                    "handle", "digest")}
            data = bytearray(snap_mod.encode(cols, np.zeros(0, np.int32), np.zeros(0, np.int64), 1))
        else:
            data = bytearray()
        db.execute("UPDATE snapshots SET data=?", (bytes(data),))
        # and the vocabulary's, so its words are read from the table
        db.execute("UPDATE vocab_snapshot SET data=?", (b"\0" * 40,))
    db.close()
    row_loads[0] = 0
    a = pager.open(path, session="s")
    assert row_loads[0] == len(a.history)  # nothing trusted: every row read
    b = pager.open(ref, session="s")
    _same_mirror(a.history, b.history)
    _same_calls(a, b, msgs, ends[30:32])
    a.close()
    b.close()
    row_loads[0] = 0
    again = pager.open(path, session="s")
    assert row_loads[0] == 0  # the close wrote a sound one again
    again.close()


def test_a_snapshot_is_skipped_when_another_writer_moved_the_session_on(tmp_path):
    path, msgs, ends = _recorded(tmp_path, 6, cut=20)
    a = pager.open(path, session="s")
    b = pager.open(path, session="s")
    b.assemble({"messages": _fresh(msgs[: ends[22]])})
    assert not a._mirror.save_snapshot()  # a's mirror is behind b's pages: it keeps no snapshot of them
    assert b._mirror.save_snapshot()
    b.close()
    assert _snapshots(path)[0][2] == ends[22]
    a.close()  # a catches up with b first (its close writes), and then its mirror is the store's again
    assert _snapshots(path)[0][2] == ends[22]


def test_a_schema_4_store_migrates_and_its_close_writes_the_first_snapshot(tmp_path, row_loads):
    path, msgs, ends = _recorded(tmp_path, 8, cut=25)
    db = _db(path)
    with db:
        for kind, name in db.execute(
                "SELECT type, name FROM sqlite_master WHERE name IN ('pages_stats_moved', 'pages_changed', "
                "'pages_deleted', 'vocab_changed', 'vocab_deleted', 'pages_digest', 'snapshots', 'snapshot_moved', "
                "'vocab_snapshot')").fetchall():
            db.execute(f"DROP {kind.upper()} IF EXISTS {name}")
        db.execute("UPDATE settings SET value='4' WHERE key='schema_version'")
    db.close()
    shutil.copytree(path, tmp_path / "ref")
    row_loads[0] = 0
    a = pager.open(path, session="s")
    assert a.store.setting("schema_version") == str(SCHEMA_VERSION) == "6"
    assert row_loads[0] == len(a.history)  # no snapshot yet: the rows
    _same_calls(a, b := pager.open(tmp_path / "ref", session="s"), msgs, ends[25:27])
    a.close()
    b.close()
    assert _snapshots(path)[0][2] == ends[26]
    row_loads[0] = 0
    again = pager.open(path, session="s")
    assert row_loads[0] == 0
    _same_mirror(again.history, pager.open(_without_snapshot(path, tmp_path / "ref2"), session="s").history)
    again.close()


def test_words_numbered_after_the_vocabulary_snapshot_and_by_other_sessions(tmp_path):
    path, msgs, ends = _recorded(tmp_path, 2, steps=30)
    with pager.open(path, session="other", **OPTS) as o:  # numbers new words after the snapshot's
        o.assemble({"messages": [{"role": "user", "content": "rename frobnicate_widget in src/zz_only_other.py"}]})
    store = SQLiteStore(path)
    head = store.ensure_session("s")
    cols = branch_columns(store, head)
    table = cols.term_table
    db = _db(path)
    numbers = dict(db.execute("SELECT term, id FROM vocab"))
    db.close()
    assert len(table.words) == max(numbers.values()) + 1
    for word in ("frobnicate_widget", *list(numbers)[:50], "no_such_word_anywhere"):
        assert table.ids.get(word) == numbers.get(word), word
        assert (word in table.ids) == (word in numbers)
    assert [table.words[numbers[w]] for w in list(numbers)[:50]] == list(numbers)[:50]
    store.close()


def test_after_a_reopen_a_call_s_terms_the_snapshot_may_cover_are_looked_up_in_one_statement(tmp_path):
    from pager.testing import new_page

    path, msgs, ends = _recorded(tmp_path, 2, steps=20)
    db = _db(path)
    known = [t for (t,) in db.execute("SELECT term FROM vocab ORDER BY id LIMIT 6")]
    db.close()
    store = SQLiteStore(path)
    head = store.ensure_session("s")
    n = len(branch_columns(store, head).id)  # reads the vocabulary snapshot: the words, not their numbers
    shared = store._vocab.shared
    assert shared.covered > len(known)
    asked: list[str] = []
    shared._reader.db.set_trace_callback(lambda sql: asked.append(sql) if "FROM vocab WHERE" in sql else None)
    new = [f"never_seen_{i}" for i in range(1200)]  # past one statement's 900 parameters
    store.record("s", head, None, n, [new_page(700, terms=(known[1], *new[:600], known[4])),
                                      new_page(701, terms=(*new[600:], known[5]))])
    lookups = [q for q in asked if "term IN" in q]
    assert len(lookups) == 2 and len(asked) == 3  # 1,203 terms asked for in two statements; one catch-up read
    fresh = sqlite3.connect(Path(path) / DB_NAME)
    numbers = dict(fresh.execute("SELECT term, id FROM vocab"))
    fresh.close()
    assert all(shared.ids[t] == numbers[t] for t in (known[1], known[4], known[5], *new))
    cols = branch_columns(store, head)
    assert set(cols.terms[-2]) == {known[1], *new[:600], known[4]} and set(cols.terms[-1]) == {*new[600:], known[5]}
    store.close()


def test_link_loaded_is_the_row_by_row_link():
    # the column-by-column link of a first load gives what the row loop gives; with a call id made twice
    # (the loop's answer depends on the order) it leaves the history to the loop
    def cols(call_ids: list[tuple[str, ...]], kinds: list[str], answers: list[Any], paths: list[Any]) -> PageColumns:
        n = len(kinds)
        return PageColumns(
            id=list(range(1, n + 1)), hash=[f"h{i}" for i in range(n)], kind=kinds,
            role=["tool" if k in ("tool", "file") else k for k in kinds], step=[0] * n, tokens=[1] * n,
            stub_tokens=[1] * n, call_id=answers, call_ids=call_ids, tool_name=[None] * n, path=paths,
            stale=[False] * n, labels=[("task:1",) if k == "user" else () for k in kinds], last_ref=[0] * n,
            ref_count=[0] * n, handle=[f"pg:{i}" for i in range(n)], terms=[(f"t{i}", "x") for i in range(n)],
            digest=[None] * n)

    def msg(pid: int) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}

    shapes = [
        ([(), (), ("c1", "c2"), (), (), (), ("c3",), (), ()],
         ["system", "user", "assistant", "tool", "file", "user", "assistant", "file", "tool"],
         [None, None, None, "c1", "c2", None, None, "c3", "c9"], [None, None, None, None, "a.py", None, None,
                                                                   "a.py:1-5", None]),
        ([(), ("c1",), (), ("c1",), ()], ["user", "assistant", "tool", "assistant", "tool"],
         [None, None, "c1", None, "c1"], [None] * 5),  # c1 made twice
        ([(), (), ("c1",)], ["user", "tool", "assistant"], [None, "c1", None], [None] * 3),  # a result before its call
    ]
    for shape in shapes:
        fast, slow = History("s", counter=None), History("s", counter=None)  # type: ignore[arg-type]
        fast.load(cols(*shape), 1, msg)
        slow.load(PageColumns.of([]), 1, msg)
        slow.load(cols(*shape), 1, msg)  # a second load links row by row
        for name in ("unit", "call_rows", "path_rows", "base_keys", "user_rows", "first_user", "task_terms", "calls"):
            assert getattr(fast, name) == getattr(slow, name), (name, shape[1])


def test_the_snapshot_codec_refuses_any_damage():
    n = 6
    cols = {"id": list(range(10, 10 + n)), "hash": [f"h{i}" for i in range(n)], "kind": ["user", "tool"] * 3,
            "role": ["user", "tool"] * 3, "step": list(range(n)), "tokens": [5] * n, "stub_tokens": [2] * n,
            "call_id": [None, "c", None, "d", None, "e"], "call_ids": [(), ("a", "b"), (), (), ("z",), ()],
            "tool_name": [None, "bash"] * 3, "path": [None, "x\ny.py", None, None, "é", None],
            "stale": [False, True] * 3, "labels": [("task:1",), ()] * 3, "last_ref": [1, 2, 3, 4, 5, 6],
            "ref_count": [0, 1, 0, 2, 0, 9], "handle": [f"pg:{i}" for i in range(n)],
            "digest": [None, None, "ab" * 32, None, None, "cd" * 32]}
    lens = np.array([2, 0, 1, 3, 0, 1])
    tid = np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.int32)
    blob = snap_mod.encode(cols, tid, lens, 8)
    got = snap_mod.decode(blob)
    assert got.columns == cols and got.tid.tolist() == tid.tolist() and got.lens.tolist() == lens.tolist()
    cut = got.cut(4)
    assert cut.columns["id"] == cols["id"][:4] and cut.tid.tolist() == [1, 2, 3, 4, 5, 6]
    for i in range(0, len(blob), 7):  # any byte changed, anywhere
        bad = bytearray(blob)
        bad[i] ^= 0x01
        with pytest.raises(snap_mod.SnapshotError):
            snap_mod.decode(bytes(bad))
    for size in (0, 10, len(blob) - 1):
        with pytest.raises(snap_mod.SnapshotError):
            snap_mod.decode(blob[:size])
    with pytest.raises(snap_mod.SnapshotError):  # a number outside the numbering it says it uses
        snap_mod.decode(snap_mod.encode(cols, tid, lens, 7))


def _running(messages: list[dict[str, Any]]) -> str:
    run = RunningDigest()
    for m in messages:
        run.add(canonical_bytes(m))
    return run.hexdigest()


def test_the_chunked_digest_is_the_digest_of_each_message_in_canonical_form():
    plain = [{"role": "user", "content": f"say \"native\" and \"cache_control\" {i}"} for i in range(CHUNK + 3)]
    marked = {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
    native = {"role": "assistant", "content": "ok", "native": [
        {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": []}]}
    nested = {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "x",
                                                                "meta": {"native": 1}}]}
    for extra in ([], [marked], [native], [nested], [marked, native]):
        msgs = [*plain[:CHUNK - 1], *extra, *plain[CHUNK - 1:]]
        for n in (len(msgs), CHUNK, CHUNK + 1, 1):
            got = digest_messages(msgs, n)
            assert got is not None and got.rows == n
            assert got.hexdigest() == _running(msgs[:n]), (extra, n)


def test_a_rolled_back_transaction_after_reading_the_vocabulary_snapshot(tmp_path):
    from pager.testing import new_page

    path, msgs, ends = _recorded(tmp_path, 2, steps=20)
    db = _db(path)
    known = [t for (t,) in db.execute("SELECT term FROM vocab ORDER BY id LIMIT 5")]
    db.close()
    for committed_first in (False, True):
        store = SQLiteStore(path)
        head = store.ensure_session("s")
        n = len(branch_columns(store, head).id)  # reads the vocabulary snapshot, outside any write
        if committed_first:  # a write committed since: the snapshot's words count as committed
            store.record("s", head, None, n, [new_page(899, terms=(known[3],))])
            n += 1
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.record("s", head, None, n, [new_page(900, terms=(known[0], "fresh_word_one"))])
                raise RuntimeError("the call failed")
        # words of the snapshot never asked for yet, a new one: numbered and read back as the table has them
        store.record("s", head, None, n, [new_page(901, terms=(known[1], f"fresh_{committed_first}", known[4]))])
        other = SQLiteStore(path)  # another process's view, read from the table
        for s in (store, other):
            assert set(branch_columns(s, head).terms[-1]) == {known[1], f"fresh_{committed_first}", known[4]}
        other.close()
        store.close()


def test_a_growing_session_keeps_a_snapshot_of_at_least_half_its_rows_without_closing(tmp_path, monkeypatch,
                                                                                       row_loads):
    import pager.session as session_mod

    monkeypatch.setattr(session_mod, "SNAPSHOT_ROWS", 40)
    _h, msgs = generate_session(12, 60)
    ends = _ends(msgs)
    live = pager.open(tmp_path / "store", session="s", **OPTS)
    written = []
    for k in ends:
        live.assemble({"messages": _fresh(msgs[:k])})
        got = _snapshots(tmp_path / "store")
        if got and got[0][2] not in written:
            written.append(got[0][2])
    assert written and written[0] >= 40  # the first once the history reached 40 rows, then at each doubling
    assert all(b >= 2 * a for a, b in zip(written, written[1:]))
    assert 2 * written[-1] > len(live.history)
    shutil.copytree(tmp_path / "store", tmp_path / "crashed")  # never closed
    row_loads[0] = 0
    a = pager.open(tmp_path / "crashed", session="s")
    assert row_loads[0] == len(a.history) - written[-1]
    _same_mirror(a.history, pager.open(_without_snapshot(tmp_path / "crashed", tmp_path / "ref"),
                                       session="s").history)
    _same_mirror(a.history, live.history, live=True)
    a.close()
    live.close()
