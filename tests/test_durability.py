"""A process killed mid-write leaves a store that reopens; the index is derived and catches up."""

from __future__ import annotations

import shutil
import sys
import textwrap

import pager
import zygote

from helpers import coding_session

SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {tests!r})
    import pager
    from pager.storage.sqlite import SQLiteStore
    from helpers import coding_session

    history = coding_session(12)
    p = pager.open({path!r}, session="s", context_window=200_000)
    p.assemble({{"messages": history[:10]}})
    real = SQLiteStore.record

    def dying(self, *args, **kwargs):
        # start the transaction, write part of it, then die without committing
        with self.transaction() as db:
            db.execute("INSERT INTO pins (session, text, created) VALUES ('s', 'half-written', 0)")
            os._exit(9)

    SQLiteStore.record = dying
    p.assemble({{"messages": history}})
    """
)


def test_killed_mid_write_leaves_a_store_that_reopens(tmp_path):
    path = tmp_path / "ctx"
    tests_dir = str(__import__("pathlib").Path(__file__).parent)
    proc = zygote.run([sys.executable, "-c", SCRIPT.format(path=str(path), tests=tests_dir)])
    assert proc.returncode == 9
    history = coding_session(12)
    with pager.open(path, session="s", context_window=200_000) as p:
        assert p.store.count_pages("s") == 10  # the committed call survived, the torn one left nothing
        assert p.pins() == []
        out = p.assemble({"messages": history})
        assert p.last_report.new_pages == len(history) - 10
        assert out["messages"][:2] == history[:2]


def test_index_deleted_or_behind_is_rebuilt_on_open(tmp_path):
    path = tmp_path / "ctx"
    history = coding_session(30)
    with pager.open(path, session="s", context_window=200_000) as p:
        p.assemble({"messages": history})
        n = p.store.count_pages()
    shutil.rmtree(path / "index")
    with pager.open(path, session="s", context_window=200_000) as p:
        assert len(p._feeder.index) == n
        assert p._feeder.index.indexed_upto() == p.store.max_page_id()
        hits = p.search("compute_out7")
        assert hits and hits[0].session == "s"


def test_reindex_rebuilds_outright(tmp_path):
    path = tmp_path / "ctx"
    with pager.open(path, session="s", context_window=200_000) as p:
        p.assemble({"messages": coding_session(10)})
        assert p.reindex() == p.store.count_pages()
