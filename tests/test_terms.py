"""Reference tracking: term extraction, the term index, relevance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sizes import examples

from helpers import python_lines
from pager.core import terms
from pager.core.terms import (
    MAX_SCAN_CHARS,
    MAX_TERM_CHARS,
    MIN_STRENGTH,
    TermIndex,
    extract_terms,
    relevance,
    term_weight,
)

# ---------------------------------------------------------------------------
# extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("edit src/app/models.py now", {"src/app/models.py", "models.py"}),
        ("run ./scripts/build.sh", {"scripts/build.sh", "build.sh"}),
        ("cd /testbed and ls /usr/lib/python3", {"/testbed", "/usr/lib/python3"}),
        ("config in ~/.config/pager", {"~/.config/pager"}),
        ("see ../docs/index.md.", {"../docs/index.md", "index.md"}),
        ("open setup.cfg and README.md", {"setup.cfg", "README.md"}),
        ("the tests/ directory", {"tests/"}),
        ("File \"src/x.py\", line 42", {"src/x.py", "x.py", "line 42"}),
        ("src/app.py:123: error", {"src/app.py", "app.py", "123"}),
    ],
)
def test_paths(text: str, expected: set[str]) -> None:
    assert expected <= extract_terms(text)


def test_paths_keep_case() -> None:
    terms = extract_terms("Read Docs/Guide.MD and src/Pager/Heat.py")
    assert {"Docs/Guide.MD", "src/Pager/Heat.py", "Heat.py"} <= terms


@pytest.mark.parametrize("prose", ["and/or", "I/O", "yes/no", "2024/01/02", "10/20", "w/o", "</output>", "<br/>"])
def test_prose_slashes_are_not_paths(prose: str) -> None:
    assert not any("/" in t for t in extract_terms(f"this {prose} that"))


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("call parse_config first", "parse_config"),
        ("set MAX_RETRIES to 3", "max_retries"),
        ("getUserName returns", "getusername"),
        ("the HttpClient class", "httpclient"),
        ("use os.path.join here", "os.path.join"),
        ("use os.path.join here", "join"),
        ("base64 and sha256", "sha256"),
        ("the `serialize` method", "serialize"),
        ("then serialize(obj) again", "serialize"),
        ("private _cache and dunder __init__", "_cache"),
        ("private _cache and dunder __init__", "__init__"),
        ("task spotter-4te.3 is done", "spotter-4te"),
        ("README exists", "readme"),
    ],
)
def test_identifiers(text: str, term: str) -> None:
    assert term in extract_terms(text)


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("raise ValueError here", "valueerror"),
        ("got json.decoder.JSONDecodeError", "jsondecodeerror"),
        ("a KeyboardInterrupt", "keyboardinterrupt"),
        ("DeprecationWarning shown", "deprecationwarning"),
        ("at line 1234 of it", "line 1234"),
    ],
)
def test_error_strings(text: str, term: str) -> None:
    assert term in extract_terms(text)


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("exit code 137", "137"),
        ("took 3.14 s", "3.14"),
        ("version 2.20.0.", "2.20.0"),
        ("address 0x7FFE", "0x7ffe"),
        ("commit a1b2c3d4e5", "a1b2c3d4e5"),
        ("commit 9f8e7d6c", "9f8e7d6c"),
    ],
)
def test_numbers(text: str, term: str) -> None:
    assert term in extract_terms(text)


def test_short_numbers_skipped() -> None:
    assert not extract_terms("1 2 42 7x")


def test_handles() -> None:
    h = "pg:123-a1b2c3"
    assert h in extract_terms(f"expand({h}) please")
    assert h in extract_terms(f"[{h}]: head...")
    assert "pg:7" in extract_terms("see pg:7.")


def test_stopwords_and_prose_excluded() -> None:
    text = (
        "The quick brown fox jumps over the lazy dog. However, THIS IS IMPORTANT: "
        "always return the value, never print(). `True` `None` `self` NOTE TODO "
        "well-known state-of-the-art Looking Again"
    )
    assert extract_terms(text) == frozenset()


def test_language_keywords_excluded_when_called() -> None:
    assert extract_terms("while (x) { return(y); print(z); isinstance(a, b) }") == frozenset()


def test_output_is_frozenset_of_str() -> None:
    terms = extract_terms("foo_bar baz_qux")
    assert isinstance(terms, frozenset) and all(isinstance(t, str) for t in terms)


def test_limit_respected_and_deterministic() -> None:
    text = " ".join(f"name_{i}" for i in range(5000))
    terms = extract_terms(text, limit=100)
    assert len(terms) == 100
    assert terms == {f"name_{i}" for i in range(100)}  # the first ones, in text order
    assert extract_terms(text, limit=100) == terms
    assert len(extract_terms(text)) == 2000
    assert extract_terms(text, limit=0) == frozenset()


def test_odd_input_does_not_raise() -> None:
    assert isinstance(extract_terms("\ud800 lone_surrogate \udfff src/\ud83d.py"), frozenset)
    assert "lone_surrogate" in extract_terms("\ud800 lone_surrogate \udfff")
    assert extract_terms("") == frozenset()
    assert isinstance(extract_terms("\x00\x01\xff" * 1000 + "中文 文件 main_loop"), frozenset)
    assert "main_loop" in extract_terms("中文 main_loop 文件")


def test_blobs_dropped() -> None:
    assert extract_terms("x_" + "a" * 5000) == frozenset()
    assert all(len(t) <= MAX_TERM_CHARS for t in extract_terms("a/" * 10_000 + " ok_name"))


@pytest.mark.parametrize("pattern", ["-", "+", "/", "a/", "1.", "a.", "_", "a-", "~/", "a", "9", "ab_c ", "x/y.py ",
                                     "to be "])
def test_huge_text_is_linear(pattern: str) -> None:
    """Work is counted in Python lines run, not timed: twice the text, at most about twice the work."""
    small = python_lines(extract_terms, pattern * (50_000 // len(pattern)), limit=10**9)
    large = python_lines(extract_terms, pattern * (100_000 // len(pattern)), limit=10**9)
    assert large <= 2.1 * small + 200, (small, large)


def test_a_huge_text_is_scanned_only_in_its_head_and_tail(monkeypatch) -> None:
    """A 50 MB body of short words cost 96 s of term scanning (issue 20): now the scan is bounded."""
    scanned: list[int] = []
    real = terms._scan
    monkeypatch.setattr(terms, "_scan", lambda text: (scanned.append(len(text)), real(text))[1])
    def body(n: int) -> str:
        return ("fix parse_config now " + "to be or not " * (MAX_SCAN_CHARS // 13) + "middle_identifier_xyz "
                + "a b c " * n + "FAILED tests/test_tail.py::test_end")

    text = body(9_000_000)  # about 54 MB
    found = extract_terms(text)
    assert len(scanned) == 1 and scanned[0] <= MAX_SCAN_CHARS + 1
    assert "parse_config" in found and "tests/test_tail.py" in found  # the head and the tail
    assert "middle_identifier_xyz" not in found  # the middle is not scanned
    # bounded work: 54 MB cost what 1 MB of the same kind does
    assert abs(python_lines(extract_terms, text) - python_lines(extract_terms, body(150_000))) <= 50


def test_a_text_under_the_scan_bound_is_scanned_whole() -> None:
    text = "x " * (MAX_SCAN_CHARS // 2 - 20) + "last_name_here"
    assert len(text) <= MAX_SCAN_CHARS and "last_name_here" in extract_terms(text, limit=10**9)


@settings(max_examples=examples(80, 200), deadline=None)
@given(text=st.text(max_size=400), limit=st.integers(0, 50))
def test_prop_never_raises_and_respects_limit(text: str, limit: int) -> None:
    terms = extract_terms(text, limit=limit)
    assert len(terms) <= limit
    assert all(isinstance(t, str) and 0 < len(t) <= MAX_TERM_CHARS for t in terms)
    assert extract_terms(text, limit=limit) == terms


# ---------------------------------------------------------------------------
# weights


@pytest.mark.parametrize(
    ("term", "weight"),
    [
        ("pg:12-a1b2c3", 2),
        ("src/app.py", 2),
        ("app.py", 2),
        ("README.md", 2),
        ("valueerror", 2),
        ("json.decoder.jsondecodeerror", 2),
        ("a1b2c3d4", 2),
        ("parse_config", 1),
        ("os.path.join", 1),
        ("1234", 1),
        ("line 12", 1),
        ("sys.exit", 1),
    ],
)
def test_term_weight(term: str, weight: int) -> None:
    assert term_weight(term) == weight


def test_extracted_weights_match_kind() -> None:
    terms = extract_terms("ValueError in src/app.py near parse_config 4096")
    weights = {t: term_weight(t) for t in terms}
    assert weights == {"valueerror": 2, "src/app.py": 2, "app.py": 2, "parse_config": 1, "4096": 1}


# ---------------------------------------------------------------------------
# the index


def build(*pages: str, max_df: int = 50) -> TermIndex:
    index = TermIndex(max_df=max_df)
    for pid, text in enumerate(pages, start=1):
        index.add_page(pid, extract_terms(text))
    return index


def test_references_by_path_and_identifiers() -> None:
    index = build(
        "cat src/app.py\ndef parse_config(path): ...",  # 1
        "Traceback: KeyError at line 40 in load_settings",  # 2
        "nothing to see here",  # 3
    )
    assert len(index) == 3
    refs = index.references(extract_terms("the bug is in app.py"))
    assert refs == {1: 2}
    refs = index.references(extract_terms("why does load_settings raise KeyError?"))
    assert refs == {2: 3}
    assert index.references(extract_terms("parse_config looks fine")) == {1: 1}  # below MIN_STRENGTH
    assert max(index.references(extract_terms("parse_config looks fine")).values()) < MIN_STRENGTH


def test_references_exclude_and_before() -> None:
    index = build("edit foo_bar.py", "again foo_bar.py", "and foo_bar.py")
    terms = extract_terms("foo_bar.py")
    assert set(index.references(terms)) == {1, 2, 3}
    assert set(index.references(terms, exclude={3})) == {1, 2}
    assert set(index.references(terms, exclude=[1, 2])) == {3}
    assert set(index.references(terms, before=3)) == {1, 2}
    assert set(index.references(terms, before=1)) == set()
    assert index.references(terms, before=0) == {}


def test_references_skip_common_terms() -> None:
    index = build(*(f"common_name plus unique_{i}" for i in range(5)), max_df=3)
    assert index.df("common_name") == 5
    assert index.references({"common_name"}) == {}
    assert index.references({"common_name", "unique_2"}) == {3: 1}
    at_limit = build(*(f"shared_name {i}" for i in range(3)), max_df=3)
    assert set(at_limit.references({"shared_name"})) == {1, 2, 3}


def test_references_unknown_terms_and_duplicates() -> None:
    index = build("alpha_one")
    assert index.references([]) == {}
    assert index.references(["nope_nope"]) == {}
    assert index.references(["alpha_one", "alpha_one"]) == {1: 1}


def test_add_page_out_of_order_and_again() -> None:
    index = TermIndex()
    index.add_page(5, {"x_term"})
    index.add_page(2, {"x_term"})
    index.add_page(9, {"x_term"})
    index.add_page(5, {"x_term", "y_term"})  # re-adding adds only new terms
    assert index.mapping()["x_term"] == [2, 5, 9]
    assert index.terms_of(5) == {"x_term", "y_term"}
    assert index.terms_of(77) == frozenset()
    assert len(index) == 3 and 5 in index and 77 not in index
    assert set(index.references({"x_term"}, before=6)) == {2, 5}


def test_max_df_validated() -> None:
    with pytest.raises(ValueError):
        TermIndex(max_df=0)


def test_handles_reference_their_page() -> None:
    h = "pg:1-0f9e8d"
    index = TermIndex()
    index.add_page(1, extract_terms(f"[{h}] tool output head ..."))
    refs = index.references(extract_terms(f"expand {h} lines 10-20"))
    assert refs[1] >= MIN_STRENGTH


# ---------------------------------------------------------------------------
# relevance


def test_relevance_bounds_and_cases() -> None:
    page = frozenset({"a_1", "b_2", "c_3"})
    assert relevance(page, frozenset()) == 0.0
    assert relevance(frozenset(), frozenset({"a_1"})) == 0.0
    assert relevance(page, frozenset({"a_1"})) == 1.0
    assert relevance(page, frozenset({"a_1", "z_9"})) == 0.5
    big_focus = frozenset(f"t_{i}" for i in range(20))
    assert relevance(frozenset({"t_1", "t_2"}), big_focus, k=8) == 0.25
    assert relevance(big_focus, big_focus) == 1.0


@settings(max_examples=examples(80, 200), deadline=None)
@given(
    page=st.frozensets(st.sampled_from("abcdefghijkl")),
    focus=st.frozensets(st.sampled_from("abcdefghijkl")),
    k=st.integers(-3, 20),
)
def test_prop_relevance_in_unit_interval(page: frozenset[str], focus: frozenset[str], k: int) -> None:
    r = relevance(page, focus, k=k)
    assert 0.0 <= r <= 1.0
    if page & focus:
        assert r > 0
    else:
        assert r == 0


def test_index_relevance_column_matches_function() -> None:
    texts = ["alpha_one beta_two", "beta_two gamma_three", "delta_four", "alpha_one gamma_three beta_two"]
    index = build(*texts)
    focus = extract_terms("now alpha_one and beta_two")
    col = index.relevance([4, 3, 2, 1, 99], focus)
    expected = [relevance(index.terms_of(p), focus) for p in (4, 3, 2, 1, 99)]
    assert col.dtype == np.float64
    assert col.tolist() == expected == [1.0, 0.0, 0.5, 1.0, 0.0]
    assert index.relevance(np.array([], dtype=np.int64), focus).shape == (0,)
    assert index.relevance([1, 2], frozenset()).tolist() == [0.0, 0.0]


def test_index_relevance_drops_common_focus_terms() -> None:
    index = build(*(f"common_name own_{i}" for i in range(6)), max_df=3)
    col = index.relevance([1, 2, 3], {"common_name", "own_1"})
    # common_name is in 6 pages > max_df: it would make everything relevant.
    assert col.tolist() == [0.0, 1.0, 0.0]


def test_end_to_end_reference_flow() -> None:
    """The flow the facade runs at ingest, on a small session."""
    msgs = [
        "please fix the crash in src/loader.py",  # 1 user
        "cat src/loader.py\ndef load_settings(path):\n    return CONFIG[path]",  # 2 file read
        "pytest output: KeyError in load_settings at line 3",  # 3 tool
        "unrelated: update docs/changelog.md",  # 4
        "The KeyError comes from load_settings in src/loader.py",  # 5 assistant refers back
    ]
    index = TermIndex()
    last_ref = {}
    ref_count = {}
    for step, text in enumerate(msgs, start=1):
        terms = extract_terms(text)
        refs = index.references(terms, exclude={step})
        for pid, strength in refs.items():
            if strength >= MIN_STRENGTH:
                last_ref[pid] = step
                ref_count[pid] = ref_count.get(pid, 0) + 1
        index.add_page(step, terms)
    assert last_ref == {1: 5, 2: 5, 3: 5}
    # Step 3 shares only the identifier load_settings with the file read:
    # one ordinary term is not a reference.
    assert ref_count == {1: 2, 2: 1, 3: 1}
    assert 4 not in last_ref


def test_a_long_path_keeps_its_short_file_name_and_drops_itself() -> None:
    # a token over MAX_TERM_CHARS: its own term is dropped, a part of it short enough is kept
    long_path = "src/" + "deep/" * 50 + "module_x.py"
    assert len(long_path) > MAX_TERM_CHARS
    terms = extract_terms(f"see {long_path} and {'https://example.com/' + 'q' * 300}")
    assert "module_x.py" in terms
    assert long_path not in terms and not any(t.startswith("https://") for t in terms)
    # at the bound itself the token is a term
    edge = "src/" + "a" * (MAX_TERM_CHARS - 7) + ".py"
    assert len(edge) == MAX_TERM_CHARS and edge in extract_terms(f"open {edge} now")
