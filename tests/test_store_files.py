"""The store's files are its owner's alone, and never opened through a symlink (issue 20).

A store holds everything the agent saw (source, secrets in tool outputs): its
folder is created 0700 and its files 0600 whatever the umask; a ``pager.db``
or ``reports.jsonl`` that is a symlink is refused with ``StoreError``, as the
checkpoint files already refuse theirs.
"""

from __future__ import annotations

import os
import stat

import pytest
from helpers import system, user

import pager


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the usual default, under which files were created 0644
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_new_store_is_created_0700_and_its_files_0600(tmp_path, umask_022):
    where = tmp_path / "ctx"
    with pager.open(where, session="s") as p:
        for i in range(3):
            p.assemble({"messages": [system("agent"), user(f"remember the token sk-{i}")]})
        p.note("a note")
        # a background index commit may still be writing its segment (inside the 0700 folder), and
        # adding a page does not wait for it: its files are 0600 once it landed
        p._feeder.index.wait()
        names = {n for n in os.listdir(where)}
        assert {"pager.db", "pager.db-wal", "pager.db-shm", "reports.jsonl", "index"} <= names
        assert _mode(where) == 0o700
        for name in ("pager.db", "pager.db-wal", "pager.db-shm", "reports.jsonl"):
            assert _mode(where / name) == 0o600, name
        assert _mode(where / "index") == 0o700
        index_files = [f for f in (where / "index").iterdir() if not f.name.startswith(".tantivy")]
        assert index_files and {f.name: _mode(f) for f in index_files} == {f.name: 0o600 for f in index_files}


@pytest.mark.parametrize("name", ["pager.db", "reports.jsonl", "pager.db-wal"])
def test_a_symlinked_store_file_is_refused(tmp_path, name):
    where = tmp_path / "ctx"
    with pager.open(where, session="s") as p:
        p.assemble({"messages": [system("agent"), user("hello")]})
    victim = tmp_path / "elsewhere" / name  # where the link points: pager must not create it
    victim.parent.mkdir()
    if (where / name).exists():
        os.replace(where / name, tmp_path / (name + ".real"))
    (where / name).symlink_to(victim)
    with pytest.raises(pager.StoreError, match="is a symlink"):
        with pager.open(where, session="s") as p:
            p.assemble({"messages": [system("agent"), user("hello"), {"role": "assistant", "content": "hi"},
                                     user("the secret is sk-123")]})
    assert not victim.exists()


def test_a_reports_symlink_planted_while_open_is_never_written_through(tmp_path, caplog):
    where = tmp_path / "ctx"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    with pager.open(where, session="s") as p:
        p.assemble({"messages": [system("agent"), user("hello")]})
        (where / "reports.jsonl").unlink()
        (where / "reports.jsonl").symlink_to(victim)
        with caplog.at_level("WARNING", logger="pager.report"):
            p.assemble({"messages": [system("agent"), user("hello"), {"role": "assistant", "content": "hi"},
                                     user("again")]})
    assert victim.read_bytes() == b"precious\n"
    assert any("symlink" in r.message for r in caplog.records)


def test_checkpoint_files_are_created_0600_in_a_0700_folder(tmp_path, umask_022):
    state = tmp_path / "state"
    with pager.open(tmp_path / "ctx", session="s", state_dir=str(state)) as p:
        p.assemble({"messages": [system("agent"), user("goal: ship it")]})
        p.note("decided: keep the flag")
    assert _mode(state) == 0o700
    files = [f for f in state.iterdir() if f.is_file()]
    assert files and {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}


def test_a_file_removed_while_the_index_folder_is_tightened_is_skipped_without_a_warning(tmp_path, monkeypatch, caplog):
    from pager.storage import index_files

    folder = tmp_path / "index"
    folder.mkdir()
    for name in ("gone.tmp", "kept.idx"):
        (folder / name).write_bytes(b"x")
        os.chmod(folder / name, 0o644)
    listed = list(os.scandir(folder))  # what a scan saw ...
    (folder / "gone.tmp").unlink()  # ... before Tantivy removed its temporary file

    class _Listing:
        def __enter__(self):
            return iter(listed)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(index_files.os, "scandir", lambda _path: _Listing())
    with caplog.at_level("WARNING", logger="pager.index"):
        index_files.tighten(folder)
    assert (folder / "kept.idx").stat().st_mode & 0o777 == 0o600  # the scan went on past the vanished file
    assert "cannot tighten" not in caplog.text
