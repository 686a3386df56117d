"""Micro-benchmarks of the recall index: query latency at 10k / 100k pages, indexing rate.

Run: ``python3 -m pytest bench/test_bench_recall.py --benchmark-only -q``.
Page texts are synthetic but shaped like agent history: code, logs, shell
output, paths, identifiers and prose, spread over 20 sessions.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any, Iterator

import attrs
import pytest

from pager.storage.index import IndexDoc, PageIndex

_SYLLABLES = "ka lo mi nu re sa ti vo xe zu bar cor dex fin gal hup jin kel mor nix".split()
# Pseudo-words so the vocabulary is thousands of terms drawn Zipf-like, as
# in real histories: a few words everywhere, most words rare.
_VOCAB = [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in ("", "er", "ing")][:1200]
_COMMON = (
    "the build failed because test fixture was missing so we rerun pytest with verbose output "
    "and check the traceback then patch the handler update config retry request parse token "
    "budget window page recall heat demote expand handle note goal task state next step"
).split()
_WORDS = _COMMON + _VOCAB
_WORD_WEIGHTS = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(_WORDS))))
_VERBS = "load save parse render fetch apply build check merge split read write sync emit".split()
_NOUNS = _VOCAB[::7][:120] + "config page index token request session plan store cache heat".split()
_IDENTS = [f"{v}_{n}" for v in _VERBS for n in _NOUNS]
_CLASSES = [f"{n.title()}{s}" for n in _NOUNS for s in ("Error", "Manager", "Builder", "Reader")]
_DIRS = ["src", "pager", "tests", "lib", "app", "cmd", "internal", "docs"] + _VOCAB[::40]
_EXTS = ["py", "rs", "ts", "go", "md", "json", "toml"]


def _words(r: random.Random, k: int) -> list[str]:
    return r.choices(_WORDS, cum_weights=_WORD_WEIGHTS, k=k)


def _path(r: random.Random) -> str:
    parts = [r.choice(_DIRS) for _ in range(r.randint(1, 3))]
    return "/".join(parts) + f"/{r.choice(_IDENTS)}.{r.choice(_EXTS)}"


def _code(r: random.Random) -> str:
    lines = []
    for _ in range(r.randint(5, 30)):
        fn, cls = r.choice(_IDENTS), r.choice(_CLASSES)
        lines.append(
            r.choice(
                [
                    f"def {fn}(self, {r.choice(_IDENTS)}: int) -> {cls}:",
                    f"    raise {cls}(f'bad {{value!r}} at line {r.randint(1, 999)}')",
                    f"    return {fn}({r.choice(_IDENTS)}, retries={r.randint(0, 9)})",
                    f"from {r.choice(_DIRS)}.{r.choice(_IDENTS)} import {cls}",
                    f"    # {' '.join(_words(r, 8))}",
                ]
            )
        )
    return "\n".join(lines)


def _log(r: random.Random) -> str:
    lines = []
    for _ in range(r.randint(5, 40)):
        lines.append(
            f"2024-05-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00 "
            f"{r.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} {_path(r)}:{r.randint(1, 900)} "
            f"{r.choice(_CLASSES)} {' '.join(_words(r, 6))} id=0x{r.getrandbits(32):08x}"
        )
    return "\n".join(lines)


def _prose(r: random.Random) -> str:
    return " ".join(_words(r, r.randint(15, 80)) + r.choices(_IDENTS, k=3))


def make_docs(n: int, seed: int = 7) -> Iterator[IndexDoc]:
    """Yield ``n`` synthetic pages, deterministic for a seed.

    Half the pages belong to one long session ("main"); the rest are spread
    over 50 sessions. Every tenth page is shared.
    """
    r = random.Random(seed)
    for pid in range(1, n + 1):
        kind = r.choice(["tool", "tool", "file", "assistant", "user"])
        path = _path(r) if kind == "file" else None
        if kind == "file":
            text = _code(r)
        elif kind == "tool":
            text = _log(r) if r.random() < 0.6 else _code(r)
        else:
            text = _prose(r)
        yield IndexDoc(
            page_id=pid,
            session="main" if pid % 2 else f"s{pid // 2 % 50}",
            step=pid // 2,
            kind=kind,
            text=text,
            path=path,
            handle=f"pg:{pid}",
            labels=(f"goal:{pid % 7}",),
            scope="shared" if pid % 10 == 0 else "session",
        )


def _queries(seed: int = 11) -> list[str]:
    r = random.Random(seed)
    out = []
    for _ in range(200):
        out.append(
            f"{r.choice(_CLASSES)} in {_path(r)} {r.choice(_IDENTS)} "
            f"{' '.join(_words(r, 4))}"
        )
    return out


def _build(tmp_path_factory: pytest.TempPathFactory, n: int) -> PageIndex:
    ix = PageIndex(tmp_path_factory.mktemp(f"ix{n}"))
    ix.memo_size = 0  # measure the query, not the memo of a repeated one
    t0 = time.perf_counter()
    ix.add(make_docs(n))
    ix.commit(n)
    print(f"\nbuilt {n} pages in {time.perf_counter() - t0:.1f}s")
    return ix


@pytest.fixture(scope="module")
def index_10k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageIndex]:
    ix = _build(tmp_path_factory, 10_000)
    yield ix
    ix.close()


@pytest.fixture(scope="module")
def index_100k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageIndex]:
    ix = _build(tmp_path_factory, 100_000)
    yield ix
    ix.close()


def _bench_query(benchmark: Any, ix: PageIndex, session: str, **kw: Any) -> None:
    queries = _queries()
    exclude = set(range(1, 400, 3))  # what the prompt already holds
    state = {"i": 0}

    def one() -> int:
        state["i"] += 1
        q = queries[state["i"] % len(queries)]
        return len(ix.search(q, session=session, k=5, exclude=exclude, **kw))

    assert sum(one() for _ in range(20)) > 0
    benchmark(one)


def test_recall_query_10k_main(benchmark: Any, index_10k: PageIndex) -> None:
    _bench_query(benchmark, index_10k, "main")  # 5k pages in the session


def test_recall_query_100k_main(benchmark: Any, index_100k: PageIndex) -> None:
    _bench_query(benchmark, index_100k, "main")  # 50k pages in the session


def test_recall_query_100k_small_session(benchmark: Any, index_100k: PageIndex) -> None:
    _bench_query(benchmark, index_100k, "s3")  # 1k pages in the session


def test_recall_query_100k_cross_session(benchmark: Any, index_100k: PageIndex) -> None:
    _bench_query(benchmark, index_100k, "s3", cross_session=True)  # + 10k shared pages


def test_recall_terms_100k_main(benchmark: Any, index_100k: PageIndex) -> None:
    terms = ["ReadingError", "pager/index.py", "load_config", "traceback", "0x1234abcd"]
    benchmark(lambda: index_100k.search_terms(terms, session="main"))


def test_indexing_throughput(benchmark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    n = 5_000
    docs = list(make_docs(n, seed=3))
    rounds = {"i": 0}

    def build() -> None:
        rounds["i"] += 1
        ix = PageIndex(tmp_path_factory.mktemp(f"tp{rounds['i']}"))
        ix.add(docs)
        ix.commit(n)
        ix.close()

    benchmark.pedantic(build, rounds=3, iterations=1)
    rate = n / benchmark.stats.stats.median
    benchmark.extra_info["pages_per_s"] = rate
    print(f"\nindexing: {rate:,.0f} pages/s")


def test_incremental_commit(benchmark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Add one turn's pages (5) and commit, on a 10k-page on-disk index."""
    ix = PageIndex(tmp_path_factory.mktemp("inc"))
    ix.add(make_docs(10_000))
    ix.commit()
    fresh = make_docs(100_000, seed=9)
    state = {"pid": 10_000}

    def turn() -> None:
        batch = []
        for d in itertools.islice(fresh, 5):
            state["pid"] += 1
            batch.append(attrs.evolve(d, page_id=state["pid"]))
        ix.add(batch)
        ix.commit(state["pid"])

    benchmark.pedantic(turn, rounds=50, iterations=1)
    ix.close()
