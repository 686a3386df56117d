"""The HTML report's structure, without a browser (``bench/check_report.py`` opens it in one).

Parsed with the standard library: offline and script-free, a table of contents
whose links all land, a legend in every card, one colour per strategy across
every chart, values on hover, per-session links, the effective-cost and fault
figures.
"""

from __future__ import annotations

import re
from collections import defaultdict
from html.parser import HTMLParser
from typing import Any

import pytest

from pager.lab.replay import html as report
from pager.lab.replay.cost import pricing
from pager.lab.replay.runner import run
from pager.lab.replay.session import Session
from pager.lab.replay.strategies import FullResend, ObservationMasking, PagerStrategy, SlidingWindow
from pager.lab.synth import generate_session

LONG = "a-very-long-session-name-" * 6 + "<b>&amp;"


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.text = ""

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag: str, cls: str | None = None) -> list["Node"]:
        return [n for n in self.walk() if n.tag == tag
                and (cls is None or cls in n.attrs.get("class", "").split())]

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


VOID = {"meta", "br", "img", "input", "link", "hr"}


class Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag: str) -> None:
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"stray </{tag}>"
        self.cur = node.parent

    def handle_data(self, data: str) -> None:
        self.cur.text += data


def _title(node: Node) -> str:
    t = next((c for c in node.children if c.tag == "title"), None)
    return t.all_text() if t is not None else ""


@pytest.fixture(scope="module")
def page() -> tuple[str, Node, Any]:
    sessions = []
    for sid, seed, steps in (("one", 3, 12), (LONG, 4, 9)):
        header, messages = generate_session(seed, steps)
        sessions.append(Session(id=sid, header={**header, "id": sid}, messages=tuple(messages),
                                path=f"{seed}.jsonl"))
    strategies = [FullResend(), SlidingWindow(3000), ObservationMasking(2),
                  PagerStrategy("pager", high_watermark=4000, low_watermark=1000)]
    result = run(sessions, strategies, pricing=pricing("anthropic"), progress=False,
                 skipped=[("notes.jsonl", "not a session")])
    text = report.render(result)
    parser = Tree()
    parser.feed(text)
    parser.close()
    return text, parser.root, result


def test_offline_and_without_scripts(page):
    text, root, _ = page
    assert text.startswith("<!DOCTYPE html>")
    assert not root.find_all("script") and not root.find_all("link") and not root.find_all("img")
    metas = {m.attrs.get("http-equiv", m.attrs.get("name")): m.attrs.get("content")
             for m in root.find_all("meta")}
    assert metas["Content-Security-Policy"].startswith("default-src 'none'")
    assert "script-src" not in metas["Content-Security-Policy"]
    assert metas["viewport"] == "width=device-width, initial-scale=1"
    for node in root.walk():
        for attr in ("href", "src"):
            value = node.attrs.get(attr)
            if value is not None and node.tag != "svg":
                assert value.startswith("#"), (node.tag, attr, value)
    assert "<b>" not in text and "&lt;b&gt;&amp;amp;" in text  # data is escaped


def test_contents_and_every_link_land(page):
    _, root, result = page
    ids = [n.attrs["id"] for n in root.walk() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), "ids are unique"
    nav = root.find_all("nav")[0]
    targets = [a.attrs["href"][1:] for a in nav.find_all("a")]
    assert {"summary", "charts", "glossary", "sessions", "skipped"} <= set(targets)
    for a in root.find_all("a"):
        assert a.attrs["href"][1:] in ids, a.attrs["href"]
    # every session: a card, linked from the contents and from the sessions table
    cards = {c.attrs["id"]: c for c in root.find_all("div", "card") if c.attrs.get("id", "").startswith("s-")}
    assert len(cards) == len(result.runs)
    table = next(s for s in root.find_all("section") if s.attrs.get("id") == "sessions")
    linked = {a.attrs["href"][1:] for a in table.find_all("a")}
    assert set(cards) <= linked and set(cards) <= set(targets)


def test_every_chart_has_a_size_a_title_and_every_card_a_legend(page):
    _, root, _ = page
    svgs = root.find_all("svg")
    assert len(svgs) == 3 + 2 * 2  # three summary charts; per session prompts and layers
    for svg in svgs:
        w, h = float(svg.attrs["width"]), float(svg.attrs["height"])
        # (the parser lowercases attribute names: viewBox)
        assert w > 0 and h > 0 and svg.attrs["viewbox"] == f"0 0 {svg.attrs['width']} {svg.attrs['height']}"
        assert _title(svg)
    for card in root.find_all("div", "card"):
        assert card.find_all("div", "legend"), card.attrs
        assert card.find_all("svg")


def test_one_colour_per_strategy_across_the_page(page):
    _, root, result = page
    color = report.colors(result.strategies)
    assert len(set(color.values())) == len(color)
    assert not set(color.values()) & set(report.LAYER_COLORS.values())
    seen: dict[str, set[str]] = defaultdict(set)
    for line in root.find_all("polyline"):
        seen[_title(line)].add(line.attrs["stroke"])
    for bar in root.find_all("rect"):
        name = _title(bar).split(":")[0]
        if name in color:
            seen[name].add(bar.attrs["fill"])
    rows = root.find_all("tbody")[0].find_all("tr")
    for row in rows:
        swatch = row.find_all("span", "sw")[0]
        name = row.find_all("td")[0].all_text().split(" (")[0]
        seen[name].add(re.search(r"background:(#[0-9a-f]+)", swatch.attrs["style"]).group(1))
    for legend in root.find_all("div", "legend"):
        for item in legend.children:
            sw = item.find_all("span", "sw")[0]
            name = item.all_text()
            if name in color:
                seen[name].add(re.search(r"(#[0-9a-f]+)", sw.attrs["style"]).group(1))
    assert set(seen) >= set(color)
    for name in color:
        assert seen[name] == {color[name]}, (name, seen[name])


def test_values_on_hover(page):
    _, root, result = page
    for svg in root.find_all("svg"):
        bands = svg.find_all("rect", "hover")
        bars = [r for r in svg.find_all("rect") if "hover" not in r.attrs.get("class", "")]
        if bands:  # a chart over calls: one band per call, titled with every value there
            assert all(re.search(r"call \d+: .*\d", _title(b)) for b in bands)
        else:  # a bar chart: every bar titled with its value
            assert bars and all(re.search(r": .+ \d+\.\d+$", _title(b)) for b in bars)
    card = next(c for c in root.find_all("div", "card") if c.attrs.get("id") == "s-one")
    first = card.find_all("svg")[0].find_all("rect", "hover")[0]
    assert _title(first).startswith("call 1: full ") and " pager " in _title(first)


def test_effective_cost_and_faults_are_shown(page):
    text, root, result = page
    head = [th.all_text() for th in root.find_all("thead")[0].find_all("th")]
    assert head[:10] == ["strategy", "cost / full (re-read)", "effective cost / full (excerpt)",
                         "cost / full", "fault rate", "coverage", "names coverage",
                         "worst session", "sessions < 0.90", "long-range coverage"]
    pager_row = next(r for r in root.find_all("tbody")[0].find_all("tr")
                     if r.find_all("td")[0].all_text() == "pager")
    s = {x.strategy: x for x in result.summary}["pager"]
    cells = [td.all_text() for td in pager_row.find_all("td")]
    assert cells[1] == f"{s.reread_vs_full:.3f}" and cells[2] == f"{s.effective_vs_full:.3f}"
    assert cells[4] == f"{s.fault_rate:.3f}" and cells[6] == f"{s.names_coverage:.3f}"
    assert cells[7] == f"{s.worst_coverage:.3f}"
    assert cells[8] == f"{s.sessions_below} of {s.sessions_measured}"
    assert 'id="chart-faults"' in text and "a fault costs 0.1 × prompt + 1.25 × (each page" in text
    assert "as an excerpt: 1.25 × 340" in text


def test_narrow_screens_and_long_names(page):
    text, root, _ = page
    css = root.find_all("style")[0].all_text()
    assert "@media (max-width:600px)" in css
    assert "svg{display:block;max-width:100%;height:auto}" in css
    assert ".scroll{overflow-x:auto" in css
    assert re.search(r"\.card h3\{[^}]*overflow-wrap:anywhere", css)
    for table in root.find_all("table"):
        assert table.parent.attrs.get("class") == "scroll"  # wide tables scroll in their box
