"""Automatic recall costs one index query per call and answers as a fresh search would (issue 23).

The facade's side of ``tests/test_index_memo.py``: whole sessions assembled
with the index's memo on and off give the same prompts, through rounds (index
commits), a reindex and retried requests; a request retried after another
process committed a page shows that page; and PostgreSQL's indexes answer
``search_ids`` as their ``search_terms``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from helpers import assistant, call, system, tool, user

import pager
from pager.storage import index_search
from pager.storage.index import PageIndex


def session_steps(n: int) -> list[list[dict[str, Any]]]:
    """Return ``n`` steps of a session whose tool outputs and messages keep naming a few files and errors."""
    files = ["src/app/config.py", "src/app/net.py", "src/app/retry.py", "tests/test_net.py"]
    errors = ["TimeoutError", "KeyError", "ConfigMissing"]
    steps = []
    for i in range(n):
        f, e = files[i % len(files)], errors[i % len(errors)]
        text = f"{e} again in {f}: retry_budget and backoff_{i % 5} (step {i})"
        cid = f"c{i}"
        lines = 600 if i % 4 == 3 else 60  # now and then an output big enough to be stubbed at once
        body = "\n".join(f"{f}:{j}: {e} handling backoff_{j % 5} value_{i}_{j}" for j in range(lines))
        steps.append([assistant(text, call(cid, "read", path=f)), tool(cid, body)])
    return steps


def replay(store: Any, memo: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Assemble a session call by call (each request sent twice, as a retry, with a commit between),
    reindexing half way."""
    monkeypatch.setattr(index_search.SearchMixin, "memo_size", index_search.MEMO_SIZE if memo else 0)
    outputs = []
    history = [system("You are a coding agent."), user("make the network code survive TimeoutError")]
    # a small window: rounds demote pages (an index commit each), and recall has pages to find
    with pager.open(store, session="s", context_window=6_000, recall_min_strength=0) as p:
        for i, step in enumerate(session_steps(24)):
            history += step
            for retry in range(2):
                outputs.append(p.assemble({"messages": list(history)}))
                outputs.append(p.last_report.pages_recalled)
                if not retry:
                    # a search commits the pages added since (a stubbed output among them): the retry's
                    # query is the same, what it may find is not
                    outputs.append([h.page_id for h in p.search("backoff_1 TimeoutError", k=3)])
            if i == 12:
                p.reindex()
    return outputs


def test_prompts_are_the_same_with_the_memo_and_without(tmp_path, monkeypatch):
    with_memo = replay(tmp_path / "a", True, monkeypatch)
    without = replay(tmp_path / "b", False, monkeypatch)
    assert sum(n for n in with_memo if isinstance(n, int)) > 0  # recall did recall pages
    assert with_memo == without


def test_a_retried_call_runs_no_second_search(tmp_path, monkeypatch):
    searches = []
    real = PageIndex._candidates

    def counted(self: PageIndex, *a: Any) -> Any:
        searches.append(a[0])
        return real(self, *a)

    monkeypatch.setattr(PageIndex, "_candidates", counted)
    history = [system("agent"), user("TimeoutError in src/app/net.py")]
    with pager.open(tmp_path / "ctx", session="s", recall_min_strength=0) as p:
        for step in session_steps(6):
            history += step
            p.assemble({"messages": list(history)})
        p.assemble({"messages": list(history)})
        before = len(searches)
        out = p.assemble({"messages": list(history)})  # the same request again: nothing it depends on changed
        assert len(searches) == before
        assert out == p.assemble({"messages": list(history)})


_WRITER = """
import sys, pager
with pager.open(sys.argv[1], session="alice/a", owner="alice", scope="project", pool="repo") as w:
    w.note(sys.argv[2])
"""


def test_a_retried_call_sees_what_another_process_committed_in_between(tmp_path):
    store = tmp_path / "ctx"
    with pager.open(store, session="alice/a", owner="alice", scope="project", pool="repo") as alice:
        alice.grant("repo", readers=["*"], writers=["alice"])  # bob reads the pool from the start
    with pager.open(store, session="bob/b", owner="bob", recall_min_strength=0) as bob:
        history = [system("agent"), user("status of 5eed6666cafe?"), assistant("looking at 5eed6666cafe"),
                   user("go on")]
        for _ in range(3):  # the same request: from the second on, the same query and the same exclusions
            out = bob.assemble({"messages": history})
        assert "stays behind the feature flag" not in str(out["messages"])
        note = "decision: 5eed6666cafe stays behind the feature flag because the canary failed"
        subprocess.run([sys.executable, "-c", _WRITER, str(store), note], check=True, timeout=120)
        out = bob.assemble({"messages": history})  # the same query again, another writer's commit since
        assert note in str(out["messages"])


def test_postgres_indexes_answer_search_ids_as_their_hits(pg_dsn):
    import orjson

    from pager.storage.postgres import open_store
    from pager.testing import new_page

    for kind in ("postgres", "tantivy"):  # PgIndex, and the FeedIndex that follows the change feed
        store = open_store(pg_dsn, max_size=4, index=kind)
        try:
            session = f"s-{kind}"
            b = store.ensure_session(session)
            pages = []
            for i in range(12):
                text = f"walrus {i} retry {'jitter ' * (i % 3)}src/app/net.py"
                msg = orjson.dumps({"content": text, "role": "tool", "tool_call_id": f"c{i}"},
                                   option=orjson.OPT_SORT_KEYS)
                pages.append(new_page(i, kind="tool", message=msg, chars=len(text)))
            _, ids = store.record(session, b, None, 0, pages)
            index = store.open_index()
            for kw in ({}, {"k": 3}, {"exclude": {ids[0], ids[5]}}, {"min_score": 0.5}, {"kinds": ["user"]}):
                terms = ["walrus", "jitter", "src/app/net.py"]
                hits = index.search_terms(terms, session=session, **kw)
                assert index.search_ids(terms, session=session, **kw) == [(h.page_id, h.score) for h in hits]
                if "kinds" not in kw:
                    assert hits
        finally:
            store.close()
