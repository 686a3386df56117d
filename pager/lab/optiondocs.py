"""What each option of ``pager.options.Options`` does: the one source of the settings tables.

``settings_table(names)`` renders a Markdown table of options, defaults read
from ``Options``. docs/api.md holds ``options_tables()``: the options a user
sets first, then the rest by owner (facade, paging, rollover, checkpoints),
then the tuner-only ones (``metadata["tuner"]``) apart; docs/tuning.md holds
the tuning knobs. ``tests/test_settings_table.py`` fails when a table in the
docs differs from what it renders, so defaults and descriptions cannot drift.
Rewrite the tables with ``python -m pager.lab.optiondocs --write``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Sequence

import attrs

from pager.options import Options

__all__ = ["OPTION_DOCS", "TUNING_KNOBS", "options_tables", "settings_table"]

# option -> (what it does, the trade-off)
OPTION_DOCS: dict[str, tuple[str, str]] = {
    'context_window': (
        "The model's window in tokens (positive integer).",
        'Set it to the real window; the budget derives from it.',
    ),
    'output_reserve': (
        'Tokens kept free for the reply; `None` means 10 % of the window, at most 8,192. Must be in `[0, context_window)`.',
        'More reserve: room for long answers, less for history.',
    ),
    'policy': (
        'Name of the [heat policy](policies.md) that orders older pages for L2 after a demotion round.',
        'See [docs/policies.md](policies.md).',
    ),
    'policy_params': (
        'Constructor keyword arguments of the policy (e.g. `{"half_life": 24}`); bad names are a `ConfigError`.',
        'Policy-specific.',
    ),
    'high_watermark': (
        'Tokens beyond L1 (history in full, stubs, recalled pages) past which the next `assemble` runs a demotion round. Capped at the budget.',
        'Higher: fewer rounds and longer cache runs, but bigger prompts.',
    ),
    'low_watermark': (
        'Tokens beyond L1 a round rebuilds down to; must not exceed `high_watermark`. Capped at the budget.',
        'Lower: cheaper prompts after a round, but more dropped pages and more frequent rounds.',
    ),
    'recent_units': (
        'The most recent units (a user message; an assistant message with its tool results) a round always keeps verbatim (shrunk only if the budget itself forces it).',
        'More: safer continuity; if these units alone exceed `low_watermark`, nearly every call becomes a round.',
    ),
    'old_share': (
        'A *minor* round keeps the previous old generation byte for byte while it holds at most this share of the low watermark (beyond L1); past it the round is *major* and rebuilds everything after L1.',
        'Higher: more prompt-cache reuse, but older content stays longer and leaves less room for newer pages.',
    ),
    'stub_threshold': (
        'In a round, an older tool output over this many tokens is shown as a stub (its head and a handle) instead of in full. In rollover mode, tool outputs over it are stubbed on arrival.',
        'Lower: smaller prompts, more `expand` calls by the model.',
    ),
    'inline_max': (
        'A tool output over this many tokens is shown in full only while it belongs to the newest step (the model reads what it asked for once); from the next call on it is a stub. It sits at the tail then, so the change re-bills almost nothing. `0` means a quarter of the budget; an output over a quarter of the budget is always a stub.',
        'Lower: smaller prompts and better long-range coverage; higher: the model keeps big outputs in view longer.',
    ),
    'recall_pages': (
        'At most this many pages recalled (L3) into one call; `0` turns automatic recall off.',
        'More: better long-range coverage, more tokens per call (with `recall_leaves` a block is written for its call, then leaves).',
    ),
    'recall_tokens': (
        'Token cap of the recall block of one call (also limited by the room left under the high watermark).',
        'As above.',
    ),
    'recall_page_tokens': (
        'Cap per recalled page: an excerpt of about `4 ×` this many characters, starting two lines above the first line that matches the query (a short page is shown whole).',
        'Lower: more pages fit the block, each less complete.',
    ),
    'recall_min_score': (
        'Minimum BM25 score of an automatic recall hit.',
        'Higher: fewer, more precise recalls.',
    ),
    'recall_min_strength': (
        'Minimum reference strength between the query and a page for an automatic recall (paths, file names, handles and error names count 2, identifiers and numbers 1; see [docs/policies.md](policies.md)); `0` accepts any BM25 hit.',
        'Higher: fewer, more precise recalls.',
    ),
    'recall_pools': (
        "Automatic recall also searches other sessions' pages this session may read: its owner's private pages, project pools whose ACL lets it read, shared pages (see [docs/scale-out.md](scale-out.md)). Each such page is labelled with its session, pool, owner and date, and is checked against the ACL again before it is shown.",
        'Off: automatic recall stays within the session; the `recall` tool and `search` still read the pools.',
    ),
    'max_notes': (
        'Notes shown in the task-state card (the newest); older ones stay in the store.',
        'More: more kept state, a bigger L1.',
    ),
    'expose_tools': (
        "Append pager's agent tools (`recall`, `expand`, `note`; `new_context` in rollover mode) to the request's `tools`. `assemble(..., expose_tools=)` overrides it per call.",
        'The tools cost prompt tokens on every call.',
    ),
    'mode': (
        '`"paging"` (demotion rounds, stubs, recall) or `"rollover"` (whole windows ending in a handoff; see [docs/rollover.md](rollover.md)).',
        '',
    ),
    'workspace': (
        "Rollover mode: the root `new_context`'s `related_files` must stay inside. With `None` only relative paths without `..` escapes are accepted.",
        '',
    ),
    'fallback_reserve': (
        'Rollover mode: tokens below the hard limit (`budget`) where the fallback step starts (only `new_context` callable); `0` disables the fallback step.',
        'Larger: earlier, safer handoffs; shorter windows.',
    ),
    'reminder_threshold': (
        'Rollover mode: the one-time reminder is appended when the prompt is within this many tokens of the fallback limit; `0` disables it.',
        '',
    ),
    'log_reports': (
        'Append every report (and every `observe`) to `reports.jsonl` in the store folder.',
        'Off: no log file growth; `pager inspect` then shows no last prompt.',
    ),
    'scope': (
        'Who may read the pages this session records: `"private"` (its owner only, in any of the owner\'s sessions), `"session"` (this session), `"project"` (this session and the readers of the pool named by `pool`, by the pool\'s ACL), `"shared"` (every session: found by `search(..., cross_session=True)` and the `recall` tool, each hit naming its session). See [Shared pools](#shared-pools).',
        'Share only what others may read.',
    ),
    'owner': (
        "The user or agent identity of the pages this session records (default: the session's name); `private` pages and pool ACLs are by identity.",
        'One identity per person or agent.',
    ),
    'pool': (
        'The project pool of the pages when `scope="project"` (e.g. a repository\'s name).',
        'Required with `scope="project"`.',
    ),
    'cache_marks': (
        'Anthropic Messages only: where `cache_control` breakpoints come from. `"pager"` places its own (end of tools+system, of the old generation, of the previous prompt, of this prompt; at most 4) and drops the caller\'s; `"merge"` keeps the caller\'s and fills the free slots; `"caller"` keeps the caller\'s and adds none.',
        'Leave `"pager"`: it knows where its stable prefix ends.',
    ),
    'state_dir': (
        "A directory kept live as the session's checkpoint files (`00_goal.md`, `10_invariants.md`, `99_next.md`, `.wal`; see [docs/checkpoints.md](checkpoints.md)): every state transition appends a WAL line and rewrites what changed. A reopened session, and every new rollover window, starts with these files in L1. `None`: no files.",
        'Put it in the workspace the agent works in; one writer per directory.',
    ),
    'wal_max_bytes': (
        'The checkpoint `.wal` is rotated to `.wal.000001`, `.wal.000002`, ... (all kept) once it reaches this size; `0` never rotates.',
        'Smaller: a shorter log to read on recovery; more segments.',
    ),
    'l1_cap': (
        'L1 guard: when the system messages, turn 1 and the task-state card pass this many tokens, the oldest notes, then the oldest pins, leave the card for a one-line pointer each (`expand("note:3")` returns the text); a system prompt or turn 1 that alone passes the cap keeps its head in place and its tail behind its own handle (`expand(handle, start_line=N)` returns it, `recall` finds it), the same bytes every call. The report\'s `notices` say what moved (`l1-moved:`) and what was cut (`l1-cut:`). `0` disables the guard.',
        'Higher: more pins and notes in every prompt, a bigger prefix on every call.',
    ),
    'notice_percents': (
        "Rollover mode: a usage notice is appended once per window when the window's use crosses each of these percentages; `[]` disables them.",
        'More thresholds: the model paces itself better; each notice costs a few dozen tokens.',
    ),
    'window_notice': (
        'Rollover mode: a notice naming the window (number and id) and the tokens left is appended when a window opens.',
        '',
    ),
    'effective_window_percent': (
        'Rollover mode: the share of `context_window` treated as usable; the hard limit is at most this share minus `output_reserve`.',
        'Lower: a margin for token-count error (the counter underestimates some text).',
    ),
    'auto_compact_ratio': (
        'Rollover mode: the host rolls over by itself once the prompt reaches this share of the effective window, if that comes before the output reserve.',
        'Lower: earlier, cheaper windows; higher: longer windows.',
    ),
    'body_after_prefix': (
        "Rollover mode: usage notices count the window's body after its fixed prefix (L1, the first message, tool schemas) against the room after that prefix (the budget's body-after-prefix view); `False` counts the whole prompt against the hard limit.",
        '',
    ),
    'max_steps': (
        "Rollover mode: the host rolls over (reason `max-steps`) after this many assistant messages in one window, at a step boundary, whatever the token count; `0` disables it.",
        'Lower: shorter, fresher windows; more rollovers to pay for.',
    ),
    'task_focus': ("Paging: relevance also counts the latest user message, and the heat policy's task column (`PageTable.task`) marks the active task's pages; `False` reads only the pinned goals and treats every page as the active task's (no task rounds).", 'Off: the working set ignores which task the user is on.'),
    'minor_rounds': ("Paging: a round keeps the old generation byte for byte while it fits `old_share` (a *minor* round); `False` makes every round *major*, rebuilding everything after L1.", 'Off: fresher rounds, more cache rewrites (effective cost +0.002 on the development sessions, docs/tuning.md).'),
    'task_rounds': ("Paging: a detected task switch, or a return to an earlier task (see docs/policies.md, Task clustering), runs a major round at once, so the old task's units leave and a returned-to task's come back in one batch. Needs `task_focus`.", 'On: follows a user who switches tasks; on the development sessions it lowered long-range coverage (0.713 against 0.752), so it ships off.'),
    'compact_tokens': ('Paging: a round may spend this many tokens on an index block of compact lines, one per page of the units it drops (the agent\'s call with cut arguments, a one-line head of each result, every handle); `0` writes none.', 'Higher: a trace of more dropped steps, less room for pages in full; measured cost-neutral and coverage-neutral at 600-1,500 (docs/tuning.md).'),
    'objective': ("Paging (issue 24): demote a page only when it pays: its tokens at the read price over the calls it would ride until the next round, against its chance of being needed again (`heat.NEEDS`, measured by kind, size and age) times a re-read (the whole page at the write price plus one more call). A short session keeps what it read; the agent's own words outlive bulky outputs; a page reached for again stays. `False`: the heat order under the low watermark, big outputs stubbed one step after they arrive.", 'Off: re-read cost 0.799 against 0.805 on the development sessions, but coverage 0.947 against 0.960 and 5 sessions under 0.90 coverage against 1 (docs/tuning.md).'),
    'need_scale': ('Paging, under `objective`: the measured need rates (`heat.NEEDS`) times this; the shipped 2.0 was chosen on the training half of the development sessions (an open-loop replay misses a demoted page on every call that needs it, so the one-call rates understate it).', 'Higher: keeps more, fewer faults, more tokens per call.'),
    'keep_room': ('Paging, under `objective`: tokens past `low_watermark` a round may give to pages that pay (never more than half the way to `high_watermark`).', 'Higher: more kept, sooner rounds; 16,000 cost more than it saved on the training half (docs/tuning.md).'),
    'recall_leaves': ('Paging: a recall block serves the call it was placed for and is removed at the next call, while it is still the tail of the previous prompt (so its removal re-bills nothing); it stays when the next call would recall the same pages.', 'Off: recalled excerpts ride the prompt until the next round.'),
}

# The knobs `pager tune` trades against each other (docs/tuning.md's table).
TUNING_KNOBS: tuple[str, ...] = (
    "high_watermark", "low_watermark", "recent_units", "old_share", "stub_threshold", "inline_max",
    "recall_pages", "recall_tokens", "recall_page_tokens", "recall_min_score", "recall_min_strength",
    "policy", "policy_params",
)

START = "<!-- settings table: generated by `python -m pager.lab.optiondocs --write` from pager.options.Options -->"
END = "<!-- end of settings table -->"


# The parts' headings in docs/api.md: (heading, what the part is)
PART_TITLES: dict[str, tuple[str, str]] = {
    "facade": ("Facade options", "`Options.facade` (`FacadeOptions`), read by `Pager` in every mode. Its first five "
               "(`context_window`, `output_reserve`, `stub_threshold`, `max_notes`, `l1_cap`: `SharedOptions`) are "
               "read by both schedulers too, so `Options.paging` and `Options.rollover` carry them as well."),
    "paging": ("Paging options", '`Options.paging` (`PagingOptions`): the paging scheduler, `mode="paging"`. '
               "Given explicitly in rollover mode, each is a `ConfigError`."),
    "rollover": ("Rollover options", '`Options.rollover` (`RolloverOptions`): the window controller, '
                 '`mode="rollover"` ([rollover.md](rollover.md)). Given explicitly in paging mode, each is a '
                 "`ConfigError`."),
    "checkpoints": ("Checkpoint options", "`Options.checkpoints` (`CheckpointOptions`): the live checkpoint files "
                    "([checkpoints.md](checkpoints.md)), in either mode."),
}


def _default(value: Any) -> str:
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return f"`{list(value)}`"
    return f"`{value!r}`"


def settings_table(names: Sequence[str] | None = None, *, parts: bool = False) -> str:
    """Return the Markdown settings table for ``names`` (default: every option, in ``Options`` order).

    ``parts=True`` adds a column naming the part that owns each option.
    """
    fields = {f.name: f for f in Options.fields()}
    head = ["option", "part", "default", "meaning", "trade-off"] if parts else ["option", "default", "meaning",
                                                                               "trade-off"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names or tuple(fields):
        f = fields[name]
        default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[arg-type]
        meaning, trade = OPTION_DOCS[name]
        part = f" {Options.part_of(name)} |" if parts else ""
        rows.append(f"| `{name}` |{part} {_default(default)} | {meaning} | {trade} |".replace("|  |", "| |"))
    return "\n".join(rows) + "\n"


def options_tables() -> str:
    """Return docs/api.md's option tables: the first ones, the rest by part, the tuner-only ones."""
    fields = Options.fields()
    first = [f.name for f in fields if f.metadata.get("first")]
    tuner = list(Options.tuner_only())
    out = ["### The options to set first", "",
           "Most sessions set some of these and leave the rest at their defaults.", "",
           settings_table(first, parts=True)]
    for part, (title, what) in PART_TITLES.items():
        names = [f.name for f in fields if Options.part_of(f.name) == part and f.name not in first
                 and f.name not in tuner]
        if names:
            out += [f"### {title}", "", what, "", settings_table(names, parts=True)]
    out += ["### Tuner-only options", "",
            "These exist for `pager tune` and the ablations (`bench/ablations.py`, [tuning.md](tuning.md)): each "
            "default is the shipped, measured behaviour; leave them unless you are measuring. "
            "`Options.tuner_only()` names them (`metadata[\"tuner\"]` on the field).", "",
            settings_table(tuner, parts=True)]
    return "\n".join(out)


def docs_tables(root: Path) -> dict[Path, str]:
    """Return {doc file: the table it must hold}."""
    return {root / "docs" / "api.md": options_tables(), root / "docs" / "tuning.md": settings_table(TUNING_KNOBS)}


_BLOCK = re.compile(re.escape(START) + r"\n(.*?)" + re.escape(END), re.S)


def table_in(text: str) -> str | None:
    """Return the generated table a doc holds between the markers, or None."""
    m = _BLOCK.search(text)
    return m.group(1) if m else None


def write(root: Path) -> None:
    """Rewrite the generated tables in the docs."""
    for path, table in docs_tables(root).items():
        text = path.read_text(encoding="utf-8")
        if table_in(text) is None:
            raise SystemExit(f"{path}: no settings-table markers")
        block = f"{START}\n{table}{END}"
        path.write_text(_BLOCK.sub(lambda _m, block=block: block, text), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--write"]:
        write(Path(__file__).resolve().parents[2])
    else:
        sys.stdout.write(options_tables())
