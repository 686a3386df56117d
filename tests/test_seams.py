"""The seams: a store may be passed or named, policies are checked, formats are pluggable."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import pager
from pager.core.heat import HeatPolicy, register_policy
from pager.errors import ConfigError, InputError, StoreError
from pager.storage.memory import MemoryStore
from pager.storage.sqlite import SCHEMA_VERSION, SQLiteStore

from helpers import coding_session


def test_memory_store_by_name_keeps_nothing_on_disk(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pager.open(":memory:", session="s", context_window=200_000) as p:
        out = p.assemble({"messages": coding_session(5)})
        assert out["messages"] and p.store.count_pages() == len(coding_session(5))
        assert p.search("parse_config") and isinstance(p.store, MemoryStore)
    assert list(tmp_path.iterdir()) == []


def test_a_store_instance_is_used_as_given_and_left_open(tmp_path):
    store = SQLiteStore(tmp_path / "s")
    with pager.open(store, session="a", context_window=200_000) as p:
        p.assemble({"messages": coding_session(3)})
    # the caller owns the store: still open, and it holds the session
    assert store.sessions() == ["a"] and store.count_pages("a") == len(coding_session(3))
    with pager.open(store, session="b", context_window=200_000) as p:
        p.assemble({"messages": coding_session(2)})
    assert pager.store_sessions(store) == ["a", "b"]
    store.close()


def test_one_transaction_per_assemble(tmp_path):
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000) as p:
        begins = []
        p.store._db.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None)
        history = coding_session(4)
        p.assemble({"messages": history})
        history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "and README.md"}]
        p.assemble({"messages": history})
        p.store._db.set_trace_callback(None)
    assert len(begins) == 2


def test_a_failed_assemble_stores_nothing_and_the_session_goes_on(tmp_path):
    history = coding_session(3)
    with pager.open(tmp_path / "ctx", session="s", context_window=200_000) as p:
        p.assemble({"messages": history})
        before = p.store.count_pages()

        @register_policy
        class Exploding(HeatPolicy):
            name = "test-exploding"

            def score(self, table, clock):
                raise ConfigError("boom")

        # heat is scored when the planner runs a round (issue 23: not on calls between rounds);
        # a new first user message changes the L1 card's inputs, so this call is a round
        forked = [history[0], {"role": "user", "content": "another task"}]
        p._scheduler.policy = Exploding()
        with pytest.raises(ConfigError):
            p.assemble({"messages": forked})
        assert p.store.count_pages() == before
        p._scheduler.policy = pager.get_policy("reference")
        p.assemble({"messages": forked})
        assert p.store.count_pages() == before + 1


@pytest.mark.parametrize("bad", ["nan", "short", "text"])
def test_policy_scores_are_checked_on_the_hot_path(tmp_path, bad):
    class Bad(HeatPolicy):
        name = f"test-bad-{bad}"

        def score(self, table, clock):
            n = len(table)
            if bad == "nan":
                return np.full(n, np.nan)
            if bad == "short":
                return np.zeros(max(0, n - 1))
            return np.array(["x"] * n)

    register_policy(Bad)
    with pager.open(":memory:", session="s", context_window=200_000, policy=Bad.name) as p:
        with pytest.raises(ConfigError, match=Bad.name):
            p.assemble({"messages": coding_session(3)})


def test_a_version_1_store_is_migrated(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    db = sqlite3.connect(folder / "pager.db")
    db.executescript(
        "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO settings VALUES ('schema_version', '1');"
        "CREATE TABLE sessions (name TEXT PRIMARY KEY, head_branch INTEGER, created REAL NOT NULL, state BLOB);"
        "CREATE TABLE pages (id INTEGER PRIMARY KEY, session TEXT NOT NULL, hash TEXT NOT NULL, kind TEXT NOT NULL,"
        " role TEXT NOT NULL, seq INTEGER NOT NULL, step INTEGER NOT NULL, tokens INTEGER NOT NULL,"
        " stub_tokens INTEGER NOT NULL, chars INTEGER NOT NULL, call_id TEXT, call_ids TEXT, tool_name TEXT,"
        " path TEXT, stale INTEGER NOT NULL DEFAULT 0, labels TEXT, last_ref INTEGER NOT NULL,"
        " ref_count INTEGER NOT NULL DEFAULT 0, scope TEXT NOT NULL DEFAULT 'session', handle TEXT NOT NULL,"
        " message BLOB NOT NULL);"
    )
    db.close()
    store = SQLiteStore(folder)
    assert store.setting("schema_version") == str(SCHEMA_VERSION)
    store.close()
    with pager.open(folder, session="s", context_window=200_000) as p:
        p.assemble({"messages": coding_session(2)})
        assert p.store.count_pages() == len(coding_session(2))


def test_store_errors_are_typed(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("not a folder")
    with pytest.raises(StoreError):
        pager.open(bad, session="s")
    with pytest.raises(ConfigError):
        pager.open("x\x00y", session="s")
    with pytest.raises(ConfigError):
        pager.open(12345, session="s")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        pager.open(":memory:", session="bad\ud800")


def test_a_request_in_no_known_format_is_refused():
    with pager.open(":memory:", session="s") as p:
        with pytest.raises(InputError, match="no known format"):
            p.assemble({"model": "m", "prompt": "hello"})
        with pytest.raises(InputError):
            p.assemble(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_the_report_log_rotates_by_size(tmp_path):
    from pager.report import ReportLog

    log = ReportLog(tmp_path, max_bytes=200, keep=2)
    for i in range(40):
        log.append({"i": i, "pad": "x" * 20})
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["reports.jsonl", "reports.jsonl.1", "reports.jsonl.2"]
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())
    assert log.read()[-1]["i"] == 39  # the newest line is in the live file


def test_sqlite_errors_never_escape_the_store(tmp_path):
    store = SQLiteStore(tmp_path / "s")
    store.ensure_session("s")
    store._db.close()  # a closed (or vanished) database: every call is a StoreError, not sqlite3's
    with pytest.raises(StoreError):
        store.sessions()
    with pytest.raises(StoreError):
        store.count_pages()
