import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything imported so far out of the cyclic garbage collector's sight.

    ``PageIndex.close`` calls ``gc.collect()`` (so that tantivy's reader thread is
    gone before a caller removes the folder). In a worker that has imported every
    test module (openai, anthropic, litellm, langchain, hypothesis, ...) a full
    collection walks ~700k objects, about half a second, and the suite closes a
    few hundred indexes: that was over half of the suite's time. Frozen objects are
    the live module-level ones that survived a full collection before any test
    ran; everything a test creates is still collected as before.
    """
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return TRACES


# -- PostgreSQL: one real server per test run, one fresh schema per test -----------------


@pytest.fixture(scope="session")
def pg_server():
    """Start a PostgreSQL server on 127.0.0.1 in a temporary directory; stop it at the end."""
    from pager.testing_pg import start_server

    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server):
    """Return a DSN whose tables land in a schema of this test's own (dropped afterwards)."""
    import uuid

    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{pg_server.dsn}?options=-csearch_path%3D{schema}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
