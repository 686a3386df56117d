import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TMPFS = Path("/dev/shm")
TMPFS_MIN_FREE = 1 << 30  # bytes free on /dev/shm to use it (a whole run peaked at ~125 MB there)


def _temp_in_memory() -> None:
    """Put this run's temporary files (tmp_path, tempfile, the test PostgreSQL) on tmpfs, if there is one.

    Every store under test commits with fsync (SQLite's commits, each tantivy commit): on a
    disk each waits for the device, and a worker waiting is a core idle; the trace replay
    alone spent ~16 s of its wall time in fsync. On tmpfs fsync returns at once. What the
    tests check does not depend on it: a SIGKILLed process loses nothing it acknowledged
    either way (the page cache survives a process), and the PostgreSQL test server already
    runs with fsync off. A TMPDIR the user set is kept; set in the environment here, it
    reaches the subprocesses the tests start too.
    """
    if os.environ.get("TMPDIR") or not (TMPFS.is_dir() and os.access(TMPFS, os.W_OK)):
        return
    # a container's /dev/shm is often 64 MB: the run's stores and PostgreSQL data folders would fill it
    if shutil.disk_usage(TMPFS).free < TMPFS_MIN_FREE:
        return
    os.environ["TMPDIR"] = str(TMPFS)
    tempfile.tempdir = None  # computed again from TMPDIR at its next use


_temp_in_memory()


def _keep_bytecode() -> None:
    """Let this run cache the bytecode of the checkout's modules, even under PYTHONDONTWRITEBYTECODE.

    Many containers set PYTHONDONTWRITEBYTECODE=1. With it, each worker compiled every
    pager module, and pytest rewrote and compiled every test module, again at every run:
    ~8 of a worker's ~20 s of CPU at collection. Installed packages are not concerned (pip
    compiled them when it installed them). The files go where Python puts them by default
    (``__pycache__``, ignored by git); the subprocesses the tests start read them too.
    """
    sys.dont_write_bytecode = False


_keep_bytecode()


def _one_blas_thread() -> None:
    """Start every interpreter of the run (workers, the subprocesses they start) with one OpenBLAS thread.

    ``import pager`` imports numpy, whose OpenBLAS starts a thread per extra core at load, and that
    thread spins before it sleeps: 135 ms of CPU per interpreter start (median of 20 paired starts of
    ``python -c "import pager"``: 490 ms against 352 ms), on a core the other workers need. Nothing pager
    runs calls BLAS but the tuner's small fits. A value the user set is kept.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


_one_blas_thread()


def _keep_freed_memory() -> None:
    """Let the run's interpreters keep the memory they free for their next allocations (glibc).

    Each Tantivy commit (~2,000 a run) builds a new segment: a 512 Ki-slot term hash table and a
    registry per field, megabytes that glibc maps fresh from the kernel and gives back at once, so
    every commit faulted them in zeroed again (949-1,478 page faults a commit of 3 pages). With these
    thresholds: 289-313 faults, 1.9-2.4 ms of system CPU a commit instead of 3.8-4.9; six store-heavy
    test files in one process, 4.7% less CPU (docs/testing.md). Read by glibc when a process starts:
    the workers and what they start (under ``-n 0`` the tests' own process started before this ran).
    Values the user set are kept.
    """
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(64 << 20))
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(256 << 20))


_keep_freed_memory()


def _share_tls_contexts() -> None:
    """Build the default TLS context once per worker for every HTTP client built in it.

    Every httpx client (the openai and anthropic SDKs' through httpx2, the proxy's upstream
    client through httpx) builds a default ``ssl.SSLContext`` when it is made, loading the CA
    bundle: ~60 ms of CPU each, ~150 times a run (the proxies the tests start and the SDK
    clients that talk to them). Every test talks plain http to 127.0.0.1, so no context is
    ever used; one built once serves them all. Only the default (``verify=True``, no client
    certificate) is shared, keyed by the variables that choose the bundle; any other ``verify``
    builds its own context as before. The product's own code is not changed: a real
    ``pager proxy`` builds its one client's context at its start, as before.
    """
    import importlib
    import importlib.util

    for name in ("httpx", "httpx2"):
        if importlib.util.find_spec(name) is None:
            continue
        transports = importlib.import_module(f"{name}._transports.default")
        build = transports.create_ssl_context
        built: dict[tuple, object] = {}

        def shared(verify=True, cert=None, trust_env=True, _build=build, _built=built):
            if verify is not True or cert:
                return _build(verify=verify, cert=cert, trust_env=trust_env)
            key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
            if key not in _built:
                _built[key] = _build(verify=verify, cert=cert, trust_env=trust_env)
            return _built[key]

        transports.create_ssl_context = shared


_share_tls_contexts()


def _hypothesis_profile() -> None:
    """No deadline for any property test: a loaded machine makes an example slow, never wrong.

    Hypothesis fails an example that runs over 200 ms by default, a wall-clock check; each
    test keeps its own max_examples (their reasons are beside them).
    """
    from hypothesis import settings

    settings.register_profile("pager-suite", deadline=None)
    settings.load_profile("pager-suite")


_hypothesis_profile()


def _freeze_heap() -> None:
    """Move every object alive now out of the cyclic garbage collector's sight.

    ``PageIndex.close`` calls ``gc.collect()`` (so that tantivy's reader thread is
    gone before a caller removes the folder). In a worker that has imported every
    test module (openai, anthropic, litellm, langchain, hypothesis, ...) a full
    collection walks ~700k objects, about half a second, and the suite closes a
    few hundred indexes: that was over half of the suite's time. Only objects that
    survive a full collection are frozen (module-level state, caches); whatever a
    test creates is still collected as before. Frozen objects are still freed by
    reference counting.
    """
    import gc

    gc.collect()
    gc.freeze()


# The longest tests, run first: pytest-xdist hands out tests in collection order, so a long
# test collected last (test_traces.py sorts near the end) can leave one worker running it
# alone while the other has finished. Started first, they overlap with everything else.
LONGEST_FIRST = (  # by their duration on a clean clone (--durations), the longest first
    "tests/test_traces.py::test_replay_representative_traces_without_error_or_violation",
    "tests/test_reuse.py::test_reuse_holds_under_random_edits",
    "tests/test_pools_proxy.py::test_through_the_proxy_the_visible_set_is_exactly_the_specified_one[postgres]",
    "tests/test_invariants.py::test_invariants_hold_on_every_prefix",
    "tests/test_hostile_boundary.py::test_a_hostile_value_at_any_string_position_of_any_format_is_typed",
    "tests/test_pools_proxy.py::test_through_the_proxy_the_visible_set_is_exactly_the_specified_one[sqlite]",
    "tests/test_chaos_fast.py::test_sigkills_lose_nothing_duplicate_nothing_and_leave_a_store_that_opens",
    "tests/test_hostile_boundary.py::test_brief_is_bounded_and_never_fails",
    "tests/test_reuse.py::test_normalize_after_equals_normalize",
    "tests/test_reuse.py::test_a_reusing_session_emits_what_a_from_scratch_one_does[opts3]",
    "tests/test_reuse.py::test_a_reusing_session_emits_what_a_from_scratch_one_does[opts2]",
    "tests/test_reuse.py::test_switching_the_wire_format_between_calls",
    "tests/test_bench_jobs.py::test_tune_points_do_not_depend_on_jobs",
    "tests/test_reuse.py::test_a_reusing_session_emits_what_a_from_scratch_one_does[opts0]",
    "tests/test_replay_cli.py::test_bundled_sessions_run",
    "tests/test_chaos_fast.py::test_processes_and_threads_on_mixed_sessions_keep_exact_counts",
    "tests/test_bench_jobs.py::test_tune_interrupted_then_resumed_gives_the_same_points",
    "tests/test_api.py::test_budget_never_exceeded_and_l1_always_present",
    "tests/test_docs.py::test_doc_code_blocks_run[tuning.md]",
    "tests/test_bench_jobs.py::test_bench_figures_do_not_depend_on_jobs",
    "tests/test_bench_jobs.py::test_tune_cli_log_resume_and_ctrl_c",
)


# Modules whose tests run on one worker (``--dist loadgroup``; every other test is scheduled
# on its own). Each imports an SDK that costs seconds of CPU to import (anthropic ~3.5 s,
# litellm ~5 s, langchain.agents ~1.7 s, mcp ~1.3 s, the Agents SDK ~1 s) and does so at its
# first use (tests/lazy.py), not at collection: grouped, only one worker pays, where each
# used to pay for all of them while it collected. docs/integrations.md's recipes share a
# module-scoped `pager proxy` subprocess that each worker started for itself. The group,
# ~32 s of CPU, is scheduled first (pytest_collection_modifyitems) so that the other worker meanwhile
# takes the longest tests.
_SDK = "sdk"
GROUPS = {f"tests/{name}.py": _SDK for name in (
    "test_adapter_litellm", "test_integrations_doc", "test_adapter_openai_agents", "test_adapter_langchain",
    "test_mcp_server", "test_facade", "test_format_anthropic", "test_format_usage", "test_proxy",
    "test_proxy_latency", "test_proxy_limits", "test_proxy_observe",
)}
# Modules whose module-scoped fixture is costly to build, each kept on one worker of its own choosing
# (--dist loadgroup spreads other modules' tests over every worker, and each worker that runs one of
# them builds the fixture again): test_pools_proxy's populated stores (~0.5 s of CPU each, and a
# PostgreSQL schema), test_index_heal's base store, test_report_html's replay.
GROUPS.update({f"tests/{name}.py": name for name in ("test_pools_proxy", "test_index_heal", "test_report_html")})
# Single tests of other modules that import anthropic (~2.8 s of CPU): by node id prefix. Without
# them in the group, three workers paid for the import (2026-12: test_l1_cut's and
# test_format_roundtrip's anthropic cases each on a worker of its own).
GROUP_TESTS = {
    "tests/test_l1_cut.py::test_a_40k_token_system_prompt_or_turn_1_is_cut_to_the_cap[anthropic-": _SDK,
    "tests/test_format_roundtrip.py::test_facade_speaks_anthropic_end_to_end": _SDK,
    "tests/test_lazy_reopen.py::test_a_history_holding_an_sdk_object_is_not_digested_again_every_call": _SDK,
}


def group_of(nodeid: str) -> str | None:
    """Return the xdist group ``nodeid`` belongs to (GROUPS by module, GROUP_TESTS by prefix), or None."""
    group = GROUPS.get(nodeid.split("::")[0])
    if group:
        return group
    return next((g for prefix, g in GROUP_TESTS.items() if nodeid.startswith(prefix)), None)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before pytest-xdist's own; absent with -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than this process may use cores.

    About a tenth of two workers' time is spent waiting with a core idle: on a PostgreSQL
    server, a proxy or ``pager mcp`` subprocess, the children a chaos test kills, an
    upstream's reply. A third worker fills those waits: on the 2-core machine, side by side,
    124.7 and 123.5 s against 134.8 and 128.2 s for two workers (idle CPU 7.6-9.8 s
    against 28.8-30.3 s). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set, and
    ``-n N`` is taken as given.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    return _cores() + 1


def _cores() -> int:
    """Return how many processors this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's hook reads the xdist_group marks
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    rank = {nodeid: i + 1 for i, nodeid in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        if group_of(item.nodeid):
            return 0  # the group is one unit of work: on one worker, from the start
        return rank.get(item.nodeid, len(rank) + 1)

    items.sort(key=order)  # stable: the rest keep their order
    for item in items:
        group = group_of(item.nodeid)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


class _GroupsApplied:
    """Refuse a run in which ``--dist loadgroup`` ignores GROUPS (it does so silently on pytest 9.2)."""

    @pytest.hookimpl(trylast=True)  # after pytest-xdist's hook has (or has not) put the group in the node id
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on the workers of a loadgroup run
            return
        lost = [item.nodeid for item in items if group_of(item.nodeid) and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(
                f"pytest-xdist ignored the xdist_group of {len(lost)} tests (e.g. {lost[0]}): with pytest "
                f"{pytest.__version__}, --dist loadgroup does not group (pytest-xdist issue 1386); "
                "install the test extra's pytest (pip install '.[test]')")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze_heap()  # every test module and what it imports


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        _freeze_heap()  # a module's tests are done (and torn down): what they imported lazily


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is not present")
    return TRACES


# -- PostgreSQL: one real server per test run (shared by the workers), one fresh schema per test --


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupsApplied(), "pager-groups-applied")
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        config._pager_pg_run_dir = Path(tempfile.mkdtemp(prefix="pager-pg-run-"))  # type: ignore[attr-defined]
        _precompile(config)


def _precompile(config: pytest.Config) -> None:
    """Before the workers start, write the bytecode they would each compile at once (tests/precompile.py)."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 2 or sys.dont_write_bytecode:
        return
    if config.getoption("assertmode", "rewrite") != "rewrite" or config.getini("enable_assertion_pass_hook"):
        return  # the test modules are compiled otherwise: leave them to the workers
    import importlib.util

    from precompile import precompile

    root = Path(__file__).resolve().parents[1]
    roots = [root / "tests", root / "bench"]
    spec = importlib.util.find_spec("pager")
    if spec is not None and spec.origin and Path(spec.origin).resolve().is_relative_to(root):
        roots.append(root / "pager")  # imported from the checkout, not an installed (compiled) copy
    precompile(roots, config.getini("python_files"), _cores())


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent with -p no:xdist
def pytest_configure_node(node) -> None:  # in the controller, once per worker
    from shared_pg import RUN_DIR_KEY

    node.workerinput[RUN_DIR_KEY] = str(node.config._pager_pg_run_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    run_dir = getattr(config, "_pager_pg_run_dir", None)
    if run_dir is not None:
        if (run_dir / "pg.json").exists():
            from shared_pg import stop_leftover

            stop_leftover(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest):
    """A PostgreSQL server on 127.0.0.1 in a temporary directory, one for the whole run (tests/shared_pg.py)."""
    from shared_pg import RUN_DIR_KEY, attach

    workerinput = getattr(request.config, "workerinput", {})
    run_dir = Path(workerinput.get(RUN_DIR_KEY) or request.config._pager_pg_run_dir)
    with attach(run_dir) as server:
        yield server


@contextlib.contextmanager
def _pg_schema(server: Any) -> Iterator[str]:
    """Yield a DSN whose tables land in a new schema of its own (dropped afterwards)."""
    import uuid

    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{server.dsn}?options=-csearch_path%3D{schema}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_dsn(pg_server):
    """Return a DSN whose tables land in a schema of this test's own (dropped afterwards)."""
    with _pg_schema(pg_server) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def pg_module_schema(pg_server):
    """Return a DSN whose tables land in a schema shared by one module's tests (dropped afterwards)."""
    with _pg_schema(pg_server) as dsn:
        yield dsn
