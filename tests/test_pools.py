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

SECRET = "zebracorn_{}"  # a word only one page holds


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


def _expected(scope: str, acl: tuple | None, writer: tuple[str, str], reader: tuple[str, str | None]) -> bool:
    rec = PageRecord(id=1, session=writer[0], hash="h", kind="user", role="user", seq=0, step=0, tokens=1,
                     stub_tokens=1, chars=1, call_id=None, call_ids=(), tool_name=None, path=None, stale=False,
                     labels=(), last_ref=0, ref_count=0, scope=scope, handle="pg:0-a", owner=writer[1],
                     pool="repo" if scope == "project" else None)
    acls = {} if acl is None else {"repo": PoolAcl(*acl)}
    return can_read(rec, Reader(reader[0], reader[1]), acls)


@pytest.mark.parametrize("scope,acl_name", list(itertools.product(
    ["private", "session", "project", "shared"], list(ACLS))))
def test_the_visible_set_is_exactly_the_specified_one(store_factory, scope, acl_name):
    store = store_factory
    acl = ACLS[acl_name]
    writer = ("s1", "alice")
    opts = {"scope": scope, "owner": writer[1]}
    if scope == "project":
        opts["pool"] = "repo"
    word = SECRET.format("x")
    with pager.open(store, session=writer[0], **opts) as w:
        w.assemble({"messages": [system("agent"), user(f"remember {word}")]})
        handle = w.history.handle[1]
        if acl is not None:
            w.grant("repo", readers=acl[0], writers=acl[1])
    for reader in READERS:
        want = _expected(scope, acl, writer, reader) or reader[0] == writer[0] and scope != "private"
        with pager.open(store, session=reader[0], owner=reader[1]) as r:
            found = any(h.handle == handle for h in r.search(word, k=10, cross_session=True))
            tool_text = r.call_tool(call("c1", "recall", query=word))["content"]
            try:
                r.expand(handle)
                expanded = True
            except pager.HandleError as exc:
                expanded = False
                assert "unknown handle" in str(exc)  # no existence leak
            assert found == want, (scope, acl_name, reader, "search")
            assert (handle in tool_text) == want, (scope, acl_name, reader, "recall tool")
            assert expanded == want, (scope, acl_name, reader, "expand")


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
