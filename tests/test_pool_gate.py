"""Promotion is a one-way gate; retiring a promoted page is a separate, recorded act (seed 002).

On SQLite, in memory and on a real PostgreSQL: a page promoted to a pool is
not demoted back into a session (``PromotionGateError``, which names
``retire``); ``retire`` is ACL-checked like ``promote``, needs a reason, is
recorded with who and when, takes the page out of every other session's
search, recall and expand, and deletes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import call, system, user

import pager
from pager.errors import ConfigError, HandleError, PromotionGateError

WORD = "5eed4242gate"


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def where(request, tmp_path) -> Any:
    """What ``pager.open`` opens: a folder, one MemoryStore shared by every open, or a PostgreSQL DSN."""
    if request.param == "sqlite":
        yield tmp_path / "ctx"
    elif request.param == "memory":
        from pager.storage.memory import MemoryStore

        store = MemoryStore()
        yield store
        store.close()
    else:
        yield request.getfixturevalue("pg_dsn")


def _open(where: Any, session: str, owner: str) -> Any:
    return pager.open(where, session=session, owner=owner, log_reports=False)


def _finds(where: Any, session: str, owner: str, handle: str) -> tuple[bool, bool, bool]:
    """Whether ``session`` finds ``handle`` by search, by the recall tool and by expand."""
    with _open(where, session, owner) as r:
        found = any(h.handle == handle for h in r.search(WORD, cross_session=True))
        recalled = handle in r.call_tool(call("c1", "recall", query=WORD))["content"]
        try:
            r.expand(handle)
            expanded = True
        except HandleError:
            expanded = False
    return found, recalled, expanded


def _written(where: Any, session: str = "s1", owner: str = "alice", **opts: Any) -> str:
    with pager.open(where, session=session, owner=owner, log_reports=False, **opts) as a:
        a.assemble({"messages": [system("agent"), user(f"the deploy runbook: {WORD} then restart")]})
        return a.history.handle[1]


def test_a_promoted_page_is_not_demoted_and_retiring_it_is_recorded(where):
    handle = _written(where)
    with _open(where, "s1", "alice") as a:
        a.grant("repo", readers=["*"], writers=["alice", "carol"])
        a.promote(handle, "project", pool="repo")
    assert _finds(where, "s3", "bob", handle) == (True, True, True)
    with _open(where, "s1", "alice") as a:
        for to in ("session", "private"):
            with pytest.raises(PromotionGateError, match=r"promotion is one-way.*Pager\.retire") as exc:
                a.demote(handle, to)
            assert isinstance(exc.value, ConfigError) and isinstance(exc.value, ValueError)
        a.promote(handle, "shared")
        with pytest.raises(PromotionGateError):
            a.demote(handle, "project", pool="repo")  # narrowing within the pools is a demotion too
    assert _finds(where, "s3", "bob", handle) == (True, True, True)  # refused: nothing moved
    with _open(where, "s3", "bob") as b, pytest.raises(HandleError, match="may not retire"):
        b.retire(handle, reason="looks stale to me")  # bob reads the pool; the page is alice's
    with _open(where, "s1", "alice") as a:
        with pytest.raises(ConfigError, match="needs reason"):
            a.retire(handle, reason="  ")
        pages = a.store.count_pages()
        retired = a.retire(handle, reason="superseded by the v2 runbook")
        assert (retired.scope, retired.pool) == ("session", None)  # where it was before its first promotion
        event = [e for e in a.store.events("s1") if e.kind == "retire"][-1].payload
        assert (event["by"], event["from"], event["to"], event["reason"], event["handle"]) == (
            "alice", "shared", "session", "superseded by the v2 runbook", handle)
        assert event["at"] > 0
        assert a.store.count_pages() == pages  # never deleted
        assert WORD in a.expand(handle)  # its own session keeps it as history
        with pytest.raises(ConfigError, match="in no pool"):
            a.retire(handle, reason="again")
    assert _finds(where, "s3", "bob", handle) == (False, False, False)  # out of the pool's audience
    assert _finds(where, "s1", "alice", handle)[2]


def test_a_pool_writer_may_retire_a_project_page_and_a_private_page_goes_back_to_private(where):
    handle = _written(where, scope="project", pool="team")  # written straight into a pool
    with _open(where, "s1", "alice") as a:
        a.grant("team", readers=["*"], writers=["alice", "carol"])
    with _open(where, "s9", "carol") as c:
        assert c.retire(handle, reason="moved to the wiki").scope == "session"
        assert [e.payload["by"] for e in c.store.events("s1", "retire")] == ["carol"]
    assert _finds(where, "s3", "bob", handle) == (False, False, False)
    private = _written(where, session="s2", scope="private")
    with _open(where, "s2", "alice") as a:
        a.promote(private, "shared")
    assert _finds(where, "s3", "bob", private)[0]
    with _open(where, "s2", "alice") as a:
        assert a.retire(private, reason="it was a draft").scope == "private"
    assert _finds(where, "s3", "bob", private) == (False, False, False)
    assert _finds(where, "s7", "alice", private)[2]  # private: its owner, in any of her sessions


def test_a_session_page_still_demotes_to_private_and_is_not_retired(where):
    handle = _written(where)
    with _open(where, "s1", "alice") as a:
        with pytest.raises(ConfigError, match="in no pool"):
            a.retire(handle, reason="nothing to retire")
        assert a.demote(handle).scope == "private"
        assert [e.kind for e in a.store.events("s1") if e.kind in ("demote", "retire")] == ["demote"]


def test_a_reader_already_open_stops_finding_a_retired_page_at_once(where):
    """Its index may not have seen the retire yet: a hit is checked against the stored page again."""
    handle = _written(where)
    with _open(where, "s1", "alice") as a:
        a.promote(handle, "shared")
        with _open(where, "s3", "bob") as b:
            assert [h.handle for h in b.search(WORD, cross_session=True)] == [handle]
            a.retire(handle, reason="a draft, not a decision")
            assert b.search(WORD, cross_session=True) == []
            assert handle not in b.call_tool(call("c1", "recall", query=WORD))["content"]
            with pytest.raises(HandleError):
                b.expand(handle)
