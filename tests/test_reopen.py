"""Reopen: the mirror loaded column by column, the resent history matched by the stored running digest.

Each test drives a reopened ``Pager`` and one never closed with the same
calls, the reopened one sent the whole history as new objects (what a
restarted harness sends), and asserts they give the same prompts; and says
how the first call after the reopen matched the history (counting the
per-message hashes it took).
"""

from __future__ import annotations

import shutil
import sqlite3
from typing import Any

import orjson
import pytest

import pager
import pager.core.history as history_mod
import pager.recording as recording_mod
from pager.lab.synth import generate_session
from pager.storage.sqlite import DB_NAME, SCHEMA_VERSION

OPTS = {"context_window": 24_000, "log_reports": False}


def _fresh(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return orjson.loads(orjson.dumps(msgs))  # new objects: nothing is known by identity


def _ends(msgs: list[dict[str, Any]]) -> list[int]:
    """Return the history lengths of the growing calls: each step boundary (before an assistant message)."""
    return [k for k in range(2, len(msgs)) if msgs[k]["role"] == "assistant"] + [len(msgs)]


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the messages hashed one by one (the path a digest match avoids)."""
    seen = [0]

    def counted(msg: Any, index: int) -> tuple[str, bytes]:
        seen[0] += 1
        return real(msg, index)

    real = history_mod.hash_message
    monkeypatch.setattr(history_mod, "hash_message", counted)
    monkeypatch.setattr(recording_mod, "hash_message", counted)
    return seen


def _closed(tmp_path: Any, msgs: list[dict[str, Any]], cut: int) -> tuple[str, str, list[int]]:
    """Record the first ``cut`` calls and close; return the store, a copy of it without digests, the call ends.

    The copy reopens as a store written before digests: matched message by
    message, the path every reopen took before. Both must give the same calls.
    """
    ends = _ends(msgs)
    p = pager.open(tmp_path / "store", session="s", **OPTS)
    for k in ends[:cut]:
        p.assemble({"messages": _fresh(msgs[:k])})
    p.close()
    shutil.copytree(tmp_path / "store", tmp_path / "ref")
    _set_digests(str(tmp_path / "ref"), None)
    return str(tmp_path / "store"), str(tmp_path / "ref"), ends


def _drop_snapshots(db: sqlite3.Connection) -> None:
    """Take a store back to the layout of schema 4 (pager before snapshots)."""
    for kind, name in db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'index', 'table') "
                                 "AND name IN ('pages_stats_moved', 'pages_changed', 'pages_deleted', "
                                 "'vocab_changed', 'vocab_deleted', 'pages_digest', 'snapshots', "
                                 "'snapshot_moved', 'vocab_snapshot')").fetchall():
        db.execute(f"DROP {kind.upper()} IF EXISTS {name}")
    db.execute("UPDATE settings SET value='4' WHERE key='schema_version'")


def _same_calls(a: pager.Pager, b: pager.Pager, msgs: list[dict[str, Any]], ends: list[int]) -> None:
    for k in ends:
        assert a.assemble({"messages": _fresh(msgs[:k])}) == b.assemble({"messages": _fresh(msgs[:k])}), k


def _set_digests(path: str, value: str | None) -> int:
    """Overwrite every stored digest (a corrupted or a missing column); return how many there were."""
    db = sqlite3.connect(f"{path}/{DB_NAME}")
    with db:
        n = db.execute("SELECT COUNT(*) FROM pages WHERE digest IS NOT NULL").fetchone()[0]
        db.execute("UPDATE pages SET digest=? WHERE digest IS NOT NULL", (value,))
    db.close()
    return int(n)


# the columns a reopen loads (edits and compact line sizes are not stored: a reopen learns them anew)
LOADED = ("page", "hash", "kind", "role", "tokens", "stub_tokens", "step", "path", "handle", "stale", "last_ref",
          "ref_count", "answers", "labels", "tool_name", "call_ids", "task_num", "unit", "user_rows", "first_user",
          "row_of", "call_rows", "path_rows", "base_keys", "task_terms")


@pytest.mark.parametrize("seed", [3, 11])
def test_the_reopened_mirror_is_the_mirror_of_a_pager_never_closed(tmp_path, seed):
    _h, msgs = generate_session(seed, 45)
    live = pager.open(tmp_path / "live", session="s", **OPTS)
    for k in _ends(msgs):
        live.assemble({"messages": _fresh(msgs[:k])})
    shutil.copytree(tmp_path / "live", tmp_path / "copy")
    reopened = pager.open(tmp_path / "copy", session="s")
    a, b = live.history, reopened.history
    for name in LOADED:
        assert getattr(a, name) == getattr(b, name), name
    assert [a.terms[i] for i in range(len(a))] == [b.terms[i] for i in range(len(b))]
    assert a.query_terms() == b.query_terms() and a.task == b.task
    words = sorted(set().union(*(a.terms[i] for i in range(len(a)))))
    assert [a.term_index.df(w) for w in words] == [b.term_index.df(w) for w in words]
    for i in range(0, len(a), 7):  # references and relevance read the same postings
        assert a.term_index.references(a.terms[i], before=a.page[i]) == b.term_index.references(
            b.terms[i], before=b.page[i])
        focus = a.terms[i]
        assert (a.term_index.relevance(a.page, focus) == b.term_index.relevance(b.page, focus)).all()
    assert len(b.term_index) == len(a.term_index) and b.term_index.terms_of(a.page[-1]) == a.terms[len(a) - 1]
    reopened.close()
    live.close()


@pytest.mark.parametrize("seed", [3, 11])
def test_a_digest_match_gives_the_calls_of_matching_message_by_message(tmp_path, hashes, seed):
    _h, msgs = generate_session(seed, 45)
    path, ref, ends = _closed(tmp_path, msgs, 20)
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    _same_calls(a, b, msgs, ends[20:])
    assert a.store.count_pages() == b.store.count_pages()
    assert len(a.store.branches("s")) == len(b.store.branches("s")) == 1
    a.close()
    b.close()


def test_the_first_call_after_a_reopen_matches_the_history_by_its_digest(tmp_path, hashes):
    _h, msgs = generate_session(5, 40)
    path, ref, ends = _closed(tmp_path, msgs, len(_ends(msgs)))
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    hashes[0] = 0
    same = _fresh(msgs)
    out = a.assemble({"messages": same})
    assert hashes[0] == 0  # no message hashed one by one: the recorded prefix was matched in one pass
    assert out == b.assemble({"messages": _fresh(msgs)})
    assert hashes[0] == len(msgs)  # the store without a digest: every message hashed and compared
    # and the next call, two new messages, hashes those two only
    more = same + [{"role": "assistant", "content": "checking the tests next"}, {"role": "user", "content": "go"}]
    hashes[0] = 0
    out = a.assemble({"messages": more})
    assert hashes[0] == 2
    assert out == b.assemble({"messages": _fresh(more)})
    a.close()
    b.close()


@pytest.mark.parametrize("value", ["0" * 64, None], ids=["corrupted", "missing"])
def test_a_corrupted_or_missing_digest_falls_back_to_matching_message_by_message(tmp_path, hashes, value):
    _h, msgs = generate_session(7, 40)
    path, ref, ends = _closed(tmp_path, msgs, len(_ends(msgs)) - 3)
    shutil.rmtree(ref)
    shutil.copytree(path, ref)  # the reference keeps its sound digest this time
    assert _set_digests(path, value) > 0
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    pages = a.store.count_pages()
    hashes[0] = 0
    k = ends[-4]  # the recorded history
    out = a.assemble({"messages": _fresh(msgs[:k])})
    assert hashes[0] == k  # every message compared with its row: nothing trusted, nothing lost
    assert out == b.assemble({"messages": _fresh(msgs[:k])})
    assert a.store.count_pages() == pages and len(a.store.branches("s")) == 1
    _same_calls(a, b, msgs, ends[-3:])  # new messages: recorded once, and a sound digest stored with them
    a.close()
    again = pager.open(path, session="s")
    hashes[0] = 0
    again.assemble({"messages": _fresh(msgs)})
    assert hashes[0] == 0
    assert again.store.count_pages() == b.store.count_pages()
    again.close()
    b.close()


def test_an_edited_history_after_a_reopen_forks_as_it_would_have(tmp_path, hashes):
    _h, msgs = generate_session(9, 40)
    path, ref, ends = _closed(tmp_path, msgs, 25)
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    k = ends[25]
    edited = _fresh(msgs[:k])
    row = next(i for i in range(k // 2, k) if edited[i]["role"] == "tool")
    edited[row]["content"] = "the same command, run again: 0 failures"
    hashes[0] = 0
    assert a.assemble({"messages": edited}) == b.assemble({"messages": _fresh(edited)})
    assert hashes[0] > 0  # the digest did not match: matched message by message up to the edit
    assert len(a.store.branches("s")) == len(b.store.branches("s")) == 2
    assert a.store.count_pages() == b.store.count_pages()
    a.close()
    b.close()


def test_a_request_behind_the_recorded_history_after_a_reopen(tmp_path):
    _h, msgs = generate_session(4, 30)
    path, ref, ends = _closed(tmp_path, msgs, len(_ends(msgs)))
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    short = ends[-4]
    assert a.assemble({"messages": _fresh(msgs[:short])}) == b.assemble({"messages": _fresh(msgs[:short])})
    assert a.last_report is not None and a.last_report.behind > 0
    _same_calls(a, b, msgs, ends[-1:])
    assert a.store.count_pages() == b.store.count_pages()
    a.close()
    b.close()


def test_a_store_written_before_digests_migrates_and_reopens_to_the_same_calls(tmp_path, hashes):
    _h, msgs = generate_session(6, 40)
    path, ref, ends = _closed(tmp_path, msgs, len(_ends(msgs)) - 2)
    # the layout of schema 3 (pager before digests): no digest, no term numbers, no vocab table, version 3
    db = sqlite3.connect(f"{ref}/{DB_NAME}")
    with db:
        _drop_snapshots(db)
        db.execute("ALTER TABLE pages DROP COLUMN digest")
        db.execute("ALTER TABLE pages DROP COLUMN term_ids")
        db.execute("DROP TABLE vocab")
        db.execute("UPDATE settings SET value='3' WHERE key='schema_version'")
    db.close()
    a, b = pager.open(path, session="s"), pager.open(ref, session="s")
    assert b.store.setting("schema_version") == str(SCHEMA_VERSION) == "6"
    db = sqlite3.connect(f"{ref}/{DB_NAME}")
    # the migration numbered every page's terms: the reopen read them as numbers, as the live store's
    assert db.execute("SELECT COUNT(*) FROM pages WHERE term_ids IS NULL").fetchone()[0] == 0
    db.close()
    for name in LOADED:
        assert getattr(a.history, name) == getattr(b.history, name), name
    hashes[0] = 0
    _same_calls(a, b, msgs, ends[-2:])
    b.close()
    again = pager.open(ref, session="s")
    hashes[0] = 0
    assert again.assemble({"messages": _fresh(msgs)}) == a.assemble({"messages": _fresh(msgs)})
    assert hashes[0] == 0  # the first call with new messages stored a digest of the whole branch
    again.close()
    a.close()


def test_term_numbers_of_a_rolled_back_transaction_are_forgotten(tmp_path):
    from pager.storage.base import branch_columns
    from pager.storage.sqlite import SQLiteStore
    from pager.testing import new_page

    store = SQLiteStore(tmp_path / "s")
    b = store.ensure_session("s")
    store.record("s", b, None, 0, [new_page(0, terms=("alpha_one", "beta_two"))])
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.record("s", b, None, 1, [new_page(1, terms=("gamma_three", "delta_four"))])
            raise RuntimeError("the call failed")
    # the numbers the rolled-back pages took are given to other terms now: the copy must not keep the old ones
    store.record("s", b, None, 1, [new_page(2, terms=("epsilon_five", "gamma_three"))])
    other = SQLiteStore(tmp_path / "s")  # another process's view
    for s in (store, other):
        got = [set(t) for t in branch_columns(s, b).terms]
        assert got == [{"alpha_one", "beta_two"}, {"epsilon_five", "gamma_three"}]
    other.close()
    store.close()


def test_a_term_only_another_session_used_indexes_after_a_reopen(tmp_path):
    # the store numbers terms for all its sessions: one that no loaded page holds starts a new list
    with pager.open(tmp_path / "s", session="a", **OPTS) as a:
        a.assemble({"messages": [{"role": "user", "content": "fix parse_config_alpha in src/only_a.py"}]})
    with pager.open(tmp_path / "s", session="b", **OPTS) as b:
        b.assemble({"messages": [{"role": "user", "content": "tidy the README"}]})
    with pager.open(tmp_path / "s", session="b") as b:
        msgs = [{"role": "user", "content": "tidy the README"},
                {"role": "assistant", "content": "looking at parse_config_alpha in src/only_a.py"}]
        b.assemble({"messages": msgs})
        assert b.history.term_index.df("parse_config_alpha") == 1
