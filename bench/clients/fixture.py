"""The fixture repository every client works on, made fresh in a temp dir for each run.

A small Python package ``inv`` with one bug (``total`` is off by one) and a test
runner that fails until it is fixed. Its files are big on purpose (3-8 K
tokens each), so pager stubs them once they leave the working set. Each big
file holds one SENTINEL line deep inside it (past the ~200 characters a stub
keeps): the scripted model's final report quotes the sentinels it can see in
its prompt, so a file whose content was lost shows in the outcome.
"""

from __future__ import annotations

import random
from pathlib import Path

__all__ = ["BIG_FILES", "SENTINELS", "make_repo"]

# path -> (sentinel, approximate number of filler functions)
BIG_FILES: dict[str, tuple[str, int]] = {
    "src/inv/core.py": ("LEDGER_SALT = 'SENT-core-4471'", 55),
    "src/inv/storage.py": ("SHARD_KEY = 'SENT-storage-0928'", 45),
    "src/inv/report.py": ("REPORT_BANNER = 'SENT-report-5310'", 36),
    "src/inv/util.py": ("CLOCK_SKEW = 'SENT-util-7702'", 27),
    "docs/DESIGN.md": ("Design token: SENT-design-3145", 70),
    "src/inv/pricing.py": ("PRICE_TABLE_ID = 'SENT-pricing-8263'", 32),
}
SENTINELS: dict[str, str] = {p: s.split("'")[1] if "'" in s else s.split(": ")[1] for p, (s, _) in BIG_FILES.items()}

_WORDS = ("ledger item quantity warehouse shard batch invoice rebate margin audit cursor snapshot "
          "checksum tariff region supplier backlog forecast threshold rounding currency").split()

TOTAL_BUGGY = "    return sum(item.qty for item in items) - 1\n"
TOTAL_FIXED = "    return sum(item.qty for item in items)\n"


def _py_filler(rng: random.Random, stem: str, n: int, sentinel: str) -> str:
    out = [f'"""The {stem} module of the inv package (fixture for the client test bed)."""\n', "\n"]
    middle = n // 2
    for i in range(n):
        if i == middle:
            out.append(f"\n{sentinel}\n\n")
        a, b, c = rng.sample(_WORDS, 3)
        out.append(
            f"\ndef {stem}_{a}_{b}_{i}(records, limit={rng.randint(2, 99)}):\n"
            f'    """Return the {a} {b} of each record, capped at ``limit``.\n\n'
            f"    The {c} is computed per {a}; records without a {b} are skipped, and the\n"
            f"    result keeps the input order so callers can zip it with their {c} list.\n"
            f'    """\n'
            f"    out = []\n"
            f"    for record in records:\n"
            f"        value = getattr(record, {b!r}, None)\n"
            f"        if value is None:\n"
            f"            continue\n"
            f"        out.append(min(value * {rng.randint(2, 9)}, limit))\n"
            f"    return out\n"
        )
    return "".join(out)


def _md_filler(rng: random.Random, n: int, sentinel: str) -> str:
    out = ["# inv design notes\n\n"]
    for i in range(n):
        if i == n // 2:
            out.append(f"{sentinel}\n\n")
        a, b, c, d = rng.sample(_WORDS, 4)
        out.append(
            f"## {i + 1}. The {a} {b}\n\n"
            f"Every {a} carries a {b}; the {c} is derived from it at read time, never stored, so a\n"
            f"{d} rebuild cannot leave the two out of step. When the {b} is missing the {a} is\n"
            f"skipped and counted in the audit log, and the {c} of the batch is recomputed.\n\n"
        )
    return "".join(out)


CORE_HEAD = '''"""The core of the inv package: items and their totals."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    qty: int


def total(items):
    """Return the total quantity of ``items``."""
''' + TOTAL_BUGGY

RUN_TESTS = '''"""Run the inv tests without pytest: exit 1 on the first failure."""
import sys
sys.path.insert(0, "src")
from inv.core import Item, total

items = [Item("a", 2), Item("b", 3)]
got = total(items)
if got != 5:
    print(f"FAIL test_total: total(...) == {got}, expected 5")
    sys.exit(1)
print("PASS test_total (1 test)")
'''


def make_repo(root: Path, seed: int = 21) -> Path:
    """Write the fixture repository under ``root`` (created) and return it."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for rel, (sentinel, n) in BIG_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = path.stem
        if rel.endswith(".md"):
            text = _md_filler(rng, n, sentinel)
        else:
            text = _py_filler(rng, stem, n, sentinel)
            if stem == "core":
                text = CORE_HEAD + text.split("\n", 2)[2]
        path.write_text(text)
    (root / "src/inv/__init__.py").write_text('"""inv: a fixture package."""\n')
    (root / "run_tests.py").write_text(RUN_TESTS)
    (root / "README.md").write_text("# inv\n\nRun `python run_tests.py`.\n")
    (root / "NOTES.txt").write_text("todo: fix total\n")
    return root
