"""The leak suite: for every (owner, scope, ACL) the visible set is exactly the specified one.

Visibility is checked through search, the recall tool and expand, on each store.
"""

from __future__ import annotations

import itertools

import pytest

import pager
from pager.core.pools import PoolAcl, Reader, can_read
from pager.core.pages import PageRecord

from helpers import assistant, call, system, tool, user

def secret(n: int) -> str:
    """Return a word only page ``n`` holds (one token: letters only)."""
    return "zebra" + "".join(chr(97 + int(d)) for d in f"{n:04d}")


READERS = [("s1", "alice"), ("s2", "alice"), ("s3", "bob"), ("s4", None)]
ACLS = {
    "none": None,
    "open": (["*"], ["alice"]),
    "bob-only": (["bob"], ["alice"]),
}


@pytest.fixture(params=["sqlite", "memory"])
def store_factory(request, tmp_path):
    if request.param == "sqlite":
        from pager.storage.sqlite import SQLiteStore

        store = SQLiteStore(tmp_path / "ctx")
    else:
        from pager.storage.memory import MemoryStore

        store = MemoryStore()
    yield store
    store.close()


def _expected(scope: str, acl: tuple | None, writer: tuple[str, str], reader: tuple[str, str | None],
              pool: str) -> bool:
    rec = PageRecord(id=1, session=writer[0], hash="h", kind="user", role="user", seq=0, step=0, tokens=1,
                     stub_tokens=1, chars=1, call_id=None, call_ids=(), tool_name=None, path=None, stale=False,
                     labels=(), last_ref=0, ref_count=0, scope=scope, handle="pg:0-a", owner=writer[1],
                     pool=pool if scope == "project" else None)
    acls = {} if acl is None else {pool: PoolAcl(*acl)}
    return can_read(rec, Reader(reader[0], reader[1]), acls)


COMBOS = list(itertools.product(["private", "session", "project", "shared"], list(ACLS)))


def test_the_visible_set_is_exactly_the_specified_one(store_factory):
    """Every (scope, ACL) a writer can give, against every kind of reader: search, recall tool, expand."""
    store = store_factory
    writer_owner = "alice"
    handles = {}
    for n, (scope, acl_name) in enumerate(COMBOS):
        acl = ACLS[acl_name]
        pool = f"repo{n}"
        opts = {"scope": scope, "owner": writer_owner}
        if scope == "project":
            opts["pool"] = pool
        word = secret(n)
        with pager.open(store, session=f"w{n}", **opts) as w:
            w.assemble({"messages": [system("agent"), user(f"remember {word}")]})
            handles[n] = w.history.handle[1]
            if acl is not None:
                w.grant(pool, readers=acl[0], writers=acl[1])
    readers = [(f"w{n}", writer_owner) for n in (0, 4)] + [("s2", "alice"), ("s3", "bob"), ("s4", None)]
    for reader in readers:
        with pager.open(store, session=reader[0], owner=reader[1]) as r:
            for n, (scope, acl_name) in enumerate(COMBOS):
                acl = ACLS[acl_name]
                writer = (f"w{n}", writer_owner)
                want = _expected(scope, acl, writer, reader, f"repo{n}")
                word, handle = secret(n), handles[n]
                found = any(h.handle == handle for h in r.search(word, k=10, cross_session=True))
                tool_text = r.call_tool(call("c1", "recall", query=word))["content"]
                try:
                    r.expand(handle)
                    expanded = True
                except pager.HandleError as exc:
                    expanded = False
                    assert "unknown handle" in str(exc)  # no existence leak
                case = (scope, acl_name, reader)
                assert found == want, (*case, "search")
                assert (handle in tool_text) == want, (*case, "recall tool")
                assert expanded == want, (*case, "expand")


def test_promotion_moves_a_page_up_with_who_and_when_and_is_acl_checked(tmp_path):
    store = tmp_path / "ctx"
    word = "quokkafix_deploy_recipe"
    with pager.open(store, session="s1", owner="alice") as a:
        a.assemble({"messages": [system("agent"), user(f"how to deploy: {word}")]})
        handle = a.history.handle[1]
        a.grant("repo", readers=["*"], writers=["alice"])
    with pager.open(store, session="s3", owner="bob") as b:
        assert b.search(word) == []
        with pytest.raises(pager.HandleError):
            b.promote(handle, "project", pool="repo")  # bob cannot even see it
    with pager.open(store, session="s1", owner="alice") as a:
        moved = a.promote(handle, "project", pool="repo")
        assert (moved.scope, moved.pool) == ("project", "repo")
        event = [e for e in a.store.events("s1") if e.kind == "promote"][-1]
        assert event.payload["by"] == "alice" and event.payload["to"] == "project" and event.payload["at"] > 0
    with pager.open(store, session="s3", owner="bob") as b:
        hits = b.search(word)
        assert [h.handle for h in hits] == [handle] and hits[0].session == "s1" and hits[0].pool == "repo"
        assert word in b.expand(handle)
        text = b.call_tool(call("c1", "recall", query=word))["content"]
        assert "from session s1 pool repo owner alice" in text  # labelled with its source
        with pytest.raises(pager.HandleError):
            b.demote(handle, "session")  # bob may read the pool, not write it
    with pager.open(store, session="s1", owner="alice") as a:
        a.demote(handle, "session")
    with pager.open(store, session="s3", owner="bob") as b:
        assert b.search(word) == []


def test_nothing_is_promoted_without_being_asked(tmp_path):
    with pager.open(tmp_path / "ctx", session="s1", owner="alice") as a:
        a.assemble({"messages": [system("agent"), user("plain")]})
        assert {r.scope for r, _ in a.store.iter_pages(0)} == {"session"}
    with pytest.raises(pager.ConfigError):
        pager.open(tmp_path / "ctx", session="s1", scope="project")  # a project scope needs its pool
