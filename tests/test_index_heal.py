"""A damaged recall index heals: bit flips, a Tantivy panic, a file in its place, phantom documents.

The small version of ``bench/chaos/chaos_bitflip.py`` (issue 20): the index is
derived data, so any damage is set aside and rebuilt from the store, with a
warning, and no caller ever sees an untyped error.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import attrs
import pytest
import tantivy

import pager
from pager.storage.index_files import is_damage, verify
from pager.storage.index_schema import _KEY_ANALYZER, _SCHEMA, _TEXT_ANALYZER
from pager.storage.indexing import index_doc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "chaos"))

import chaos_bitflip as cb  # noqa: E402

MESSAGES = 40


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("bitflip") / "base"
    cb.build_base(where, MESSAGES)
    return where


@pytest.fixture
def store(base, tmp_path) -> Path:
    where = tmp_path / "ctx"
    shutil.copytree(base, where)
    return where


def test_a_dozen_flips_over_every_index_file_type_leave_no_untyped_error_and_heal(tmp_path):
    got = cb.campaign(per_type=1, seed=3, messages=MESSAGES, workdir=tmp_path)
    counts = got["counts"]
    assert counts["flips"] >= 12 and counts.get("skipped", 0) == 0, counts
    assert counts.get("untyped_errors", 0) == 0, got["failures"]
    assert counts.get("not_healed", 0) == 0, got["failures"]
    assert counts["healed"] == counts["flips"]


def _raw_probe(index: Path) -> None:
    """Read the index with Tantivy alone (no checksum check): what a search does."""
    ix = tantivy.Index(_SCHEMA, str(index), reuse=True)
    ix.register_tokenizer("pg_text", _TEXT_ANALYZER)
    ix.register_tokenizer("pg_key", _KEY_ANALYZER)
    ix.reload()
    s = ix.searcher()
    s.fast_field_values("page_id", [a for _, a in s.search(tantivy.Query.all_query(), 10_000).hits])


def _flip(path: Path, at: int, bit: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << bit)]))


def _panicking_flip(index: Path, only: str | None = None) -> tuple[Path, int, int]:
    """Return a bit of a ``.fast`` file whose flip makes Tantivy panic (``PanicException``)."""
    for f in sorted(index.glob("*.fast")):
        if only is not None and f.name != only:
            continue
        for at in range(f.stat().st_size - 100):  # the body, not the footer
            _flip(f, at, 7)
            try:
                _raw_probe(index)
            except BaseException as exc:  # noqa: BLE001 - PanicException is a BaseException
                if type(exc).__name__ == "PanicException":
                    assert not isinstance(exc, Exception) and is_damage(exc)
                    return (f.name if only else f), at, 7
            finally:
                _flip(f, at, 7)
    pytest.skip("no flip of this index's fast fields makes this Tantivy panic")


def _healthy(where: Path) -> None:
    with pager.open(where, session="alpha", log_reports=False) as p:
        assert p._feeder.index.page_ids() == {r.id for r, _ in p.store.iter_pages(0)}
        for i in range(MESSAGES):
            assert any(cb.word("alpha", i) in h.snippet for h in p.search(cb.word("alpha", i), k=3))
    verify(where / "index", set())


def test_a_flip_that_makes_tantivy_panic_is_healed_at_open(store, caplog):
    f, at, bit = _panicking_flip(store / "index")
    _flip(f, at, bit)
    with caplog.at_level("WARNING", logger="pager.index"):
        with pager.open(store, session="alpha", log_reports=False) as p:  # was: PanicException, every open
            assert p.search(cb.word("alpha", 7))
    assert any("damaged" in r.message and "moved aside" in r.message for r in caplog.records)
    assert list(store.glob("index.damaged-*"))  # kept for a post-mortem; the store is untouched
    _healthy(store)


_WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
import chaos_bitflip as cb, pager
with pager.open(sys.argv[1], session="beta", log_reports=False) as q:
    q.assemble({"messages": cb.history("beta", int(sys.argv[3]))})
"""


def test_a_segment_damaged_after_another_writer_committed_it_is_healed_at_the_next_search(store):
    """No open checks it: the reader meets the flipped segment when it reloads, at its next search."""
    import subprocess

    with pager.open(store, session="alpha", log_reports=False) as p:
        index = p._feeder.index
        assert index.search(cb.word("beta", MESSAGES + 5), session="beta") == []
        before = {f.name for f in (store / "index").iterdir()}
        subprocess.run([sys.executable, "-c", _WRITER, str(store), str(ROOT / "bench" / "chaos"),
                        str(MESSAGES + 12)], check=True, timeout=120)
        fresh = {f.name for f in (store / "index").iterdir()} - before
        assert any(n.endswith(".fast") for n in fresh)
        probe = store / "probe"  # look for a bit of the new segment that makes Tantivy panic, on a copy
        shutil.copytree(store / "index", probe)
        name, at, bit = _panicking_flip(probe, only=next(n for n in sorted(fresh) if n.endswith(".fast")))
        _flip(store / "index" / name, at, bit)
        for i in range(MESSAGES, MESSAGES + 12):  # was: PanicException
            hits = index.search(cb.word("beta", i), session="beta")
            assert any(cb.word("beta", i) in h.snippet for h in hits)
        assert index.set_aside == 1
        out = p.assemble({"messages": cb.history("alpha", MESSAGES) + [{"role": "user", "content": "next"}]})
        assert out["messages"]
    _healthy(store)


def test_an_index_path_that_is_a_plain_file_is_moved_aside(store):
    shutil.rmtree(store / "index")
    (store / "index").write_text("not a folder")
    _healthy(store)  # was: FileExistsError, and the store would not open
    assert [p.read_text() for p in store.glob("index.damaged-*")] == ["not a folder"]


def test_phantom_documents_are_never_hits_and_are_removed_on_the_next_open(store):
    word = cb.word("alpha", 4)
    with pager.open(store, session="alpha", log_reports=False) as p:
        index = p._feeder.index
        rec, msg = next((r, m) for r, m in p.store.iter_pages(0) if word in str(m))
        top = p.store.max_page_id()
        # what a writer killed between the index's commit and the store's leaves: documents, no pages
        index.add([attrs.evolve(index_doc(rec, msg), page_id=top + k) for k in range(1, 9)])
        index.commit()
        assert len(index.page_ids() - {r.id for r, _ in p.store.iter_pages(0)}) == 8
        hits = p.search(word, k=10)
        assert [h.page_id for h in hits] == [rec.id]  # was: the 8 phantoms too
        p.expand(hits[0].handle)
    _healthy(store)  # the reopen removed them
