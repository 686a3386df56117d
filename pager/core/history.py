"""The in-memory mirror of one session's head branch, and ingest into it.

The facade keeps this mirror so an ``assemble`` costs work proportional to
what is new, not to the whole history: hashes to match the caller's history
against the recorded branch, the columns the planner and heat policies read,
and the reference tracker (which old pages later messages refer back to).
It is rebuilt from the store on open. No I/O here: the facade reads and
writes the store.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import orjson

import attrs

from pager.core import terms as terms_mod
from pager.core.canonical import canonical_bytes
from pager.core.columns import Columns
from pager.core.compact import compact_line
from pager.core.describe import ENVELOPE_LEVELS, encode_problem, envelope
from pager.core.fileread import RANGE_MARK, base_path
from pager.core.tasks import detect_task, task_of
from pager.core.termload import LoadedTermIndex, TermColumn
from pager.core.messages import Classified, message_text, tool_calls
from pager.core.pages import TOOL_KINDS, NewPage, PageColumns, PageRecord, StatUpdate, handle_for, hash_bytes
from pager.core.render import stub_text
from pager.core.tokens import MESSAGE_OVERHEAD, TokenCounter, content_text, message_tokens
from pager.errors import MessageError

__all__ = ["History", "Prepared", "hash_message", "hash_messages"]

# Roles whose words count as the agent (or user) referring back to a page.
REFERRING_ROLES = ("assistant", "user")

# Per kind, for a first load (``History._link_loaded``): 1 a result, 2 a file read, -1 a user message, 0 other.
_TOOL_CODE = {"system": 0, "assistant": 0, "user": -1, "tool": 1, "file": 2}

# The per-row columns: what ``truncate`` keeps and ``prefix`` copies (maps derive from them).
_ROW_COLUMNS = (
    "page", "hash", "kind", "role", "tokens", "stub_tokens", "compact_tokens", "unit", "step", "path", "handle",
    "stale", "last_ref", "ref_count", "terms", "answers", "labels", "tool_name", "edits", "call_ids", "task_num",
)

def hash_messages(
    messages: Sequence[Mapping[str, Any]], offset: int = 0
) -> tuple[list[str], list[bytes | None]]:
    """Return each message's content hash and its orjson bytes.

    The hash is of the message's canonical form (``pager.core.canonical``: no
    cache marks, no Responses item ids), so a client moving a mark between
    calls resends the same history; the bytes are the message as sent. A lone
    surrogate, or nesting too deep for the request that carries it, makes
    orjson refuse a message; that is reported as a ``MessageError`` naming it (``offset`` is added to the index).
    """
    hashes: list[str] = []
    raws: list[bytes | None] = []
    for i, msg in enumerate(messages):
        h, raw = hash_message(msg, i + offset)
        hashes.append(h)
        raws.append(raw)
    return hashes, raws


def hash_message(msg: Mapping[str, Any], index: int) -> tuple[str, bytes]:
    """Return one message's content hash and its orjson bytes (``hash_messages``; ``index`` names it in errors)."""
    try:  # inside a request's envelope: a message that passes is one whose request still encodes
        raw = orjson.dumps(envelope(msg), option=orjson.OPT_SORT_KEYS)[ENVELOPE_LEVELS:-ENVELOPE_LEVELS]
    except orjson.JSONEncodeError as exc:
        raise MessageError(index, f"cannot be encoded: {encode_problem(exc)}") from None
    return hash_bytes(canonical_bytes(msg, raw)), raw


def _page_terms(text: str, path: str | None, limit: int) -> frozenset[str]:
    """Return a page's referable terms; a file page also answers to its path and file name.

    A file read's content rarely names its own path (the call that read it
    does), yet "edit src/x.py" refers to that content more than to anything.
    """
    terms = terms_mod.extract_terms(text, limit=limit)
    if path:
        path = base_path(path)  # a partial read answers to its file
        extra = {path, path.rsplit("/", 1)[-1]}
        if path.startswith("./"):
            extra.add(path[2:])
        terms = terms | frozenset(extra)
    return terms


@attrs.frozen(slots=True)
class Prepared:
    """A page about to be recorded: the store's value plus what the mirror derives from its text."""

    page: NewPage
    text: str
    terms: frozenset[str]
    compact_tokens: int = -1  # tokens of the page's compact line (``pager.core.compact``; -1: not counted yet)
    edits: tuple[str, ...] = ()  # the files the call this result answers edited (their reads go stale)


class History:
    """Columns of the head branch, one row per history message."""

    def __init__(self, session: str, counter: TokenCounter, max_df: int = 50) -> None:
        self.session = session
        self.counter = counter
        self.branch = 0
        self.page: list[int] = []
        self.hash: list[str] = []
        self.kind: list[str] = []
        self.role: list[str] = []
        self.tokens: list[int] = []
        self.stub_tokens: list[int] = []
        self.compact_tokens: list[int] = []
        self.unit: list[int] = []
        self.step: list[int] = []
        self.path: list[str | None] = []
        self.handle: list[str] = []
        self.stale: list[bool] = []
        self.last_ref: list[int] = []
        self.ref_count: list[int] = []
        self.terms: TermColumn = TermColumn()  # per row: read as a frozenset (loaded rows keep the store's tuple)
        self.call_rows: dict[str, int] = {}  # call id -> row of the assistant message
        self.answers: list[str | None] = []  # tool rows: the call id they answer
        self.tool_name: list[str | None] = []  # tool rows: the tool that produced them
        self.edits: list[tuple[str, ...]] = []  # tool rows: files edited (unknown, so empty, for loaded rows)
        self.base_keys: dict[str, set[str]] = {}  # file path -> the page keys of its reads (whole and ranges)
        self.labels: list[tuple[str, ...]] = []
        self.calls: dict[str, tuple[str, str]] = {}  # call id -> (tool name, arguments)
        self.path_rows: dict[str, int] = {}  # path -> row of its newest read
        self.first_user: int | None = None
        self.task_terms: dict[int, frozenset[str]] = {}  # task -> terms of its user messages
        self.term_index = terms_mod.TermIndex(max_df=max_df)
        self.row_of: dict[int, int] = {}
        self.call_ids: list[tuple[str, ...]] = []  # assistant rows: the ids of the calls they make
        self.task_num: list[int] = []  # each row's task number (-1: no task label)
        self.user_rows: list[int] = []  # rows of user messages, in order
        # derived, kept between calls so a call costs work in proportion to what is new
        self._columns = Columns()
        self._task_col: tuple[int, int, np.ndarray] | None = None  # (active task, rows, column)
        self._query: frozenset[str] | None = None
        self._compact_missing = 0  # rows whose compact line is not counted yet
        self._compact_from = 0  # no row before this one is missing its compact line's count
        # the newest stored running digest of the branch as loaded: (rows it covers, hex), or None
        self.digest: tuple[int, str] | None = None

    def __len__(self) -> int:
        return len(self.page)

    @property
    def clock(self) -> int:
        """The logical clock: assistant messages so far (O(1): the last row's step)."""
        if not self.step:
            return 0
        return self.step[-1] + (1 if self.kind[-1] == "assistant" else 0)

    @property
    def task(self) -> int:
        """The active task: the label number of the newest page (the row of the task's first user message)."""
        for lab in reversed(self.labels):
            t = task_of(lab)
            if t is not None:
                return t
        return 0

    @property
    def latest_user(self) -> int | None:
        """The row of the latest user message, or None."""
        return self.user_rows[-1] if self.user_rows else None

    def task_column(self) -> np.ndarray:
        """Return, per row, whether the page belongs to the active task (unlabelled pages do).

        Kept between calls and extended by the new rows while the active task
        stays the same; rebuilt when it changes. Read-only.
        """
        active = self.task
        n = len(self.task_num)
        cached = self._task_col
        if cached is not None and cached[0] == active and cached[1] <= n:
            m, col = cached[1], cached[2]
        else:
            m, col = 0, np.zeros(0, dtype=bool)
        if n > len(col):
            grown = np.zeros(max(n, 2 * len(col), 64), dtype=bool)
            grown[:m] = col[:m]
            col = grown
        if n > m:
            nums = np.asarray(self.task_num[m:n], dtype=np.int64)
            col[m:n] = (nums == active) | (nums < 0)
        self._task_col = (active, n, col)
        view = col[:n]
        view.flags.writeable = False
        return view

    def query_terms(self) -> frozenset[str]:
        """Return the terms of the latest assistant message and of any user message after it (recall's query).

        Computed once per change of the history, however many times a call asks.
        """
        if self._query is None:
            query: set[str] = set()
            for i in range(len(self) - 1, -1, -1):
                if self.role[i] in ("assistant", "user"):
                    query |= self.terms[i]
                    if self.role[i] == "assistant":
                        break
            self._query = frozenset(query)
        return self._query

    def task_resumed(self) -> int | None:
        """Return the step at which the active task was last taken up after another one (None: never).

        Walks the user rows only (``PagingScheduler``'s objective asks each call).
        """
        first = None
        active = self.task
        for i in reversed(self.user_rows):
            if i == self.first_user:
                continue
            if self.task_num[i] not in (-1, active):
                return first
            first = self.step[i]
        return None

    def _add_task_terms(self, row: int) -> None:
        task = task_of(self.labels[row])
        if task is not None and self.kind[row] == "user":
            self.task_terms[task] = self.task_terms.get(task, frozenset()) | self.terms[row]

    def pinned_count(self) -> int:
        """Rows up to and including the first user message are L1."""
        if self.first_user is not None:
            return self.first_user + 1
        # no user message yet: leading system messages only
        n = 0
        for k in self.kind:
            if k != "system":
                break
            n += 1
        return n

    def truncate(self, n: int) -> None:
        """Forget rows from ``n`` on (the caller's history diverged there)."""
        if n >= len(self.page):
            return
        # rebuilding derived maps is simpler and safer than undoing them
        saved = {name: getattr(self, name)[:n] for name in _ROW_COLUMNS}
        calls = self.calls
        call_rows = {cid: r for cid, r in self.call_rows.items() if r < n}
        self.__init__(self.session, self.counter, self.term_index.max_df)  # type: ignore[misc]
        for name, value in saved.items():
            setattr(self, name, value)
        self.calls = calls
        self._reindex_maps()
        # the calls made by the kept rows stay open or answered as they were (validation reads them)
        self.call_rows = call_rows

    def prefix(self, n: int) -> "History":
        """Return a new mirror of the first ``n`` rows; this one is left as it is.

        A request behind the recorded branch (a strict prefix of it) is planned
        on this copy and recorded nowhere. Reference counts are kept as
        recorded, later references included. Costs work in proportion to ``n``.
        """
        view = History(self.session, self.counter, self.term_index.max_df)
        view.branch = self.branch
        for name in _ROW_COLUMNS:
            col = getattr(self, name)
            setattr(view, name, col[:n])  # a list, or a TermColumn on the same table (a prefix keeps it)
        view.calls = dict(self.calls)
        view._reindex_maps()
        view.call_rows = {cid: r for cid, r in self.call_rows.items() if r < n}
        return view

    def _reindex_maps(self) -> None:
        self.row_of = {p: i for i, p in enumerate(self.page)}
        self.path_rows = {}
        self.call_rows = {}
        self.base_keys = {}
        self.first_user = None
        self.user_rows = [i for i, kind in enumerate(self.kind) if kind == "user"]
        self._compact_missing = sum(1 for n in self.compact_tokens if n < 0)
        self._compact_from = next((r for r, n in enumerate(self.compact_tokens) if n < 0), len(self.compact_tokens))
        for i, kind in enumerate(self.kind):
            if kind == "user" and self.first_user is None:
                self.first_user = i
            if kind == "file" and self.path[i]:
                self.path_rows[self.path[i]] = i
                self.base_keys.setdefault(base_path(self.path[i]), set()).add(self.path[i])
            self._add_task_terms(i)
            self.term_index.add_page(self.page[i], self.terms[i])
        # stale flags derive from the order of reads and edits; recompute so a truncated newer one un-stales
        later_keys: set[str] = set()
        later_files: set[str] = set()  # read whole, or edited, after this row
        for i in range(len(self.kind) - 1, -1, -1):
            path = self.path[i]
            if self.kind[i] == "file" and path:
                self.stale[i] = path in later_keys or base_path(path) in later_files
                later_keys.add(path)
                if RANGE_MARK not in path:
                    later_files.add(path)
            later_files.update(self.edits[i])

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        start: int,
        classified: Sequence[Classified],
        hashes: Sequence[str],
        raws: Sequence[bytes | None],
        extract_limit: int = 2000,
        scope: str = "session",
        owner: str | None = None,
        pool: str | None = None,
        digest: str | None = None,
    ) -> list[Prepared]:
        """Return the pages of ``messages[start:]``, ready to record (nothing stored yet).

        ``digest``: the branch's running digest after these messages, kept with the last page.
        """
        records = []
        last = start + len(classified) - 1
        step = self.clock
        task: int | None = self.task if self.first_user is not None else None
        tasks = dict(self.task_terms)
        for offset, cls in enumerate(classified):
            seq = start + offset
            msg = messages[seq]
            h = hashes[seq]
            handle = handle_for(self.session, seq, h)
            tokens = message_tokens(msg, self.counter)
            text = message_text(msg)
            if cls.kind in TOOL_KINDS:
                body = content_text(msg.get("content"))
                stub = stub_text(body, tokens, handle, path=cls.path)
                stub_tokens = min(MESSAGE_OVERHEAD + self.counter.count(stub), tokens)
            else:
                stub_tokens = tokens
            terms = _page_terms(text, cls.path, extract_limit)
            if cls.kind == "user":
                task = detect_task(terms, task, tasks, seq)
                tasks[task] = tasks.get(task, frozenset()) | terms
            page = NewPage(
                hash=h, kind=cls.kind, role=cls.role, step=step, tokens=tokens, stub_tokens=stub_tokens,
                chars=len(text), handle=handle,
                message=raws[seq] if raws[seq] is not None else orjson.dumps(msg, option=orjson.OPT_SORT_KEYS),
                call_id=cls.call_id, call_ids=cls.call_ids, tool_name=cls.tool_name, path=cls.path,
                labels=(f"task:{task if task is not None else 0}",), scope=scope, owner=owner, pool=pool,
                terms=tuple(terms), digest=digest if seq == last else None,
            )
            # the compact line is counted when a round first needs it (``fill_compact_tokens``): most calls
            # run no round, and its count is a pure function of the row, whenever it is taken (issue 23)
            records.append(Prepared(page, text, terms, -1, cls.edits))
            if cls.kind == "assistant":
                step += 1
        return records

    def append(self, records: Sequence[Prepared], ids: Sequence[int]) -> list[StatUpdate]:
        """Add recorded pages as rows; return what they changed of earlier pages."""
        updates: dict[int, StatUpdate] = {}
        for prep, pid in zip(records, ids):
            rec = prep.page
            row = len(self.page)
            self._add_row(pid, rec.hash, rec.kind, rec.role, rec.tokens, rec.stub_tokens, rec.step, rec.path,
                          rec.handle, False, rec.step, 0, prep.terms, rec.call_id, rec.labels, rec.tool_name,
                          rec.call_ids)
            self.edits[-1] = prep.edits
            self.compact_tokens.append(prep.compact_tokens)
            if prep.compact_tokens < 0:
                self._compact_missing += 1
            if rec.kind == "assistant":
                for cid in rec.call_ids:
                    self.call_rows[cid] = row
            self._link(row, rec.kind, rec.call_id)
            self._add_task_terms(row)
            if rec.kind == "file" and rec.path:
                # a newer read of the same range, or of the whole file, makes older reads stale
                whole = RANGE_MARK not in rec.path
                keys = self.base_keys.setdefault(base_path(rec.path), set())
                for key in [k for k in (keys if whole else (rec.path,)) if k in self.path_rows]:
                    self._make_stale(self.path_rows[key], updates)
                keys.add(rec.path)
                self.path_rows[rec.path] = row
            for edited in prep.edits:  # an edit makes every earlier read of the file stale
                for key in self.base_keys.get(edited, ()):
                    self._make_stale(self.path_rows[key], updates)
            if rec.role in REFERRING_ROLES and prep.terms:
                clock = rec.step
                refs = self.term_index.references(prep.terms, exclude=(pid,), before=pid)
                for ref_page, strength in refs.items():
                    r = self.row_of.get(ref_page)
                    if r is None or strength < terms_mod.MIN_STRENGTH:
                        continue
                    self.last_ref[r] = max(self.last_ref[r], clock)
                    self.ref_count[r] += 1
                    self._columns.dirty.add(r)
                    updates[ref_page] = StatUpdate(ref_page, self.last_ref[r], self.ref_count[r], self.stale[r])
            self.term_index.add_page(pid, prep.terms)
        return list(updates.values())

    def _make_stale(self, row: int, updates: dict[int, StatUpdate]) -> None:
        if self.stale[row]:
            return
        self.stale[row] = True
        self._columns.dirty.add(row)
        pid = self.page[row]
        updates[pid] = StatUpdate(pid, self.last_ref[row], self.ref_count[row], True)

    def _add_row(
        self, pid: int, hash: str, kind: str, role: str, tokens: int, stub_tokens: int, step: int,
        path: str | None, handle: str, stale: bool, last_ref: int, ref_count: int, terms: frozenset[str],
        answers: str | None, labels: Sequence[str], tool_name: str | None = None,
        call_ids: Sequence[str] = (),
    ) -> None:
        row = len(self.page)
        self.row_of[pid] = row
        self._query = None
        self.call_ids.append(tuple(call_ids))
        task = task_of(labels)
        self.task_num.append(-1 if task is None else task)
        if kind == "user":
            self.user_rows.append(row)
        self.page.append(pid)
        self.hash.append(hash)
        self.kind.append(kind)
        self.role.append(role)
        self.tokens.append(tokens)
        self.stub_tokens.append(stub_tokens)
        self.step.append(step)
        self.path.append(path)
        self.handle.append(handle)
        self.stale.append(stale)
        self.last_ref.append(last_ref)
        self.ref_count.append(ref_count)
        self.terms.append(terms)
        self.answers.append(answers)
        self.labels.append(tuple(labels))
        self.tool_name.append(tool_name)
        self.edits.append(())

    def _link(self, row: int, kind: str, call_id: str | None) -> None:
        """Set the row's unit (a result joins its call's unit) and the first user row."""
        if kind in TOOL_KINDS and call_id in self.call_rows:
            self.unit.append(self.unit[self.call_rows[call_id]])
        else:
            self.unit.append(row)
        if kind == "user" and self.first_user is None:
            self.first_user = row

    def load(
        self,
        records: Sequence[PageRecord] | PageColumns,
        branch: int,
        message_of: Callable[[int], Mapping[str, Any]],
        extract_limit: int = 2000,
    ) -> None:
        """Append stored pages (in branch order: records, or the store's ``PageColumns``) to the mirror.

        Terms kept with each page are used as stored; ``message_of(page_id)``
        is read only for a page stored without them, and for the last
        assistant message's calls (a new result can only answer those).
        Column by column: a reopen of 50k pages runs no Python per field of
        each page, only per row that opens or answers a call, reads a file or
        is a user message (issue 23).
        """
        cols = records if isinstance(records, PageColumns) else PageColumns.of(records)
        self.branch = branch
        base, n = len(self.page), len(cols)
        ids = list(cols.id)
        table = cols.term_table if not base and len(cols.term_table or ()) == n else None
        terms: Any = None
        missing: list[int] = []
        if table is None:
            terms = list(cols.terms)  # as stored: a tuple (or frozenset) per page, read as a frozenset (TermColumn)
            missing = [i for i, t in enumerate(terms) if t is None]
            for i in missing:
                terms[i] = _page_terms(message_text(message_of(ids[i])), cols.path[i], extract_limit)
        self.page.extend(ids)
        self.hash.extend(cols.hash)
        self.kind.extend(cols.kind)
        self.role.extend(cols.role)
        self.tokens.extend(cols.tokens)
        self.stub_tokens.extend(cols.stub_tokens)
        self.step.extend(cols.step)
        self.path.extend(cols.path)
        self.handle.extend(cols.handle)
        self.stale.extend(map(bool, cols.stale))
        self.last_ref.extend(cols.last_ref)
        self.ref_count.extend(cols.ref_count)
        if table is not None:  # numbered by the store: each row read from the table when asked for
            self.terms = TermColumn([None] * n, table)
        else:
            self.terms.extend(terms)
        self.answers.extend(cols.call_id)
        self.labels.extend(map(tuple, cols.labels))
        self.tool_name.extend(cols.tool_name)
        self.call_ids.extend(map(tuple, cols.call_ids))
        self.edits.extend([()] * n)
        # computed on first use by ``fill_compact_tokens`` (loading reads no message)
        self.compact_tokens.extend([-1] * n)
        self._compact_missing += n
        self._compact_from = min(self._compact_from, base)
        self._query = None
        self.row_of.update(zip(ids, range(base, base + n)))
        task_of_labels: dict[tuple[str, ...], int] = {}
        for lab in set(self.labels[base:]):
            task = task_of(lab)
            task_of_labels[lab] = -1 if task is None else task
        self.task_num.extend(map(task_of_labels.__getitem__, self.labels[base:]))
        task_terms: dict[int, set[str]] = {}
        last_calls = self._link_loaded(cols) if not base else None
        if last_calls is None:
            last_calls = self._link_rows(base, n, cols, task_terms)
        for task, words in task_terms.items():
            self.task_terms[task] = self.task_terms.get(task, frozenset()) | words
        if last_calls >= 0:
            for call in tool_calls(message_of(self.page[last_calls])):
                self.calls[call.id] = (call.name, call.arguments)
        if not base and not len(self.term_index):
            # nothing loaded (a new session): the plain index, whose postings are a dict read in C
            if n:
                self.term_index = LoadedTermIndex(self.term_index.max_df, ids, terms, table)
        else:
            for r, pid in enumerate(ids, base):
                self.term_index.add_page(pid, self.terms[r])
        for i in range(n - 1, -1, -1):
            if cols.digest[i] is not None:
                self.digest = (base + i + 1, cols.digest[i])
                break

    def _link_rows(self, base: int, n: int, cols: PageColumns, task_terms: dict[int, set[str]]) -> int:
        """Link loaded rows ``base`` .. ``base + n`` one by one (units, calls, reads, user rows, task terms).

        Returns the last row that makes calls (-1: none).
        """
        kinds = self.kind
        # rows in order: a result joins the unit of the newest earlier row that made its call
        call_rows, unit, calls_of = self.call_rows, self.unit, cols.call_ids
        last_calls = -1
        for r in range(base, base + n):
            kind = kinds[r]
            cids = calls_of[r - base]
            if cids:
                last_calls = r
                for cid in cids:
                    call_rows[cid] = r
            if kind in TOOL_KINDS:
                cid = self.answers[r]
                unit.append(unit[call_rows[cid]] if cid in call_rows else r)
                path = self.path[r]
                if kind == "file" and path:
                    self.path_rows[path] = r
                    self.base_keys.setdefault(base_path(path), set()).add(path)
                continue
            unit.append(r)
            if kind == "user":
                self.user_rows.append(r)
                if self.first_user is None:
                    self.first_user = r
                task = task_of(self.labels[r])
                if task is not None:
                    task_terms.setdefault(task, set()).update(self.terms[r])
        return last_calls

    def _link_loaded(self, cols: PageColumns) -> int | None:
        """Link the rows of a first load as ``_link_rows`` does, column by column; None when it cannot.

        The usual history: each call id made by one row, before its results,
        and no row of a tool kind making calls. Then the final map of call
        ids to rows is the one each result saw, and every step is a C pass
        over a column (plus a loop over the distinct file paths and the user
        rows): a tenth of the loop's time at 50k rows.
        """
        n = len(self.kind)
        calls_of = cols.call_ids
        makes = np.fromiter(map(len, calls_of), dtype=np.int64, count=n)
        flat = list(itertools.chain.from_iterable(calls_of))
        made_at = np.repeat(np.arange(n, dtype=np.int64), makes)
        call_rows = dict(zip(flat, made_at.tolist()))
        if len(call_rows) != len(flat):
            return None  # a call id made twice: which row a result joins depends on where it stands
        code = np.fromiter(map(_TOOL_CODE.get, self.kind, itertools.repeat(0)), dtype=np.int8, count=n)
        tool = np.flatnonzero(code > 0)
        if len(made_at) and (code[made_at] > 0).any():
            return None  # a tool row making calls: the loop decides
        maker = np.fromiter(map(call_rows.get, map(self.answers.__getitem__, tool.tolist()), itertools.repeat(-1)),
                            dtype=np.int64, count=len(tool))
        unit = np.arange(n, dtype=np.int64)
        joined = (maker >= 0) & (maker < tool)
        unit[tool[joined]] = maker[joined]  # a maker is no tool row: its unit is itself
        self.unit.extend(unit.tolist())
        self.call_rows.update(call_rows)
        paths = self.path
        files = np.flatnonzero(code == 2).tolist()
        read = [(paths[r], r) for r in files if paths[r]]
        self.path_rows.update(read)
        for path in dict.fromkeys(p for p, _r in read):
            self.base_keys.setdefault(base_path(path), set()).add(path)
        users = np.flatnonzero(code < 0).tolist()
        self.user_rows.extend(users)
        if users and self.first_user is None:
            self.first_user = users[0]
        task_terms: dict[int, set[str]] = {}
        for r in users:
            task = self.task_num[r]
            if task >= 0:
                task_terms.setdefault(task, set()).update(self.terms[r])
        for task, words in task_terms.items():
            self.task_terms[task] = self.task_terms.get(task, frozenset()) | words
        return int(made_at[-1]) if len(made_at) else -1

    def fill_compact_tokens(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Count the compact lines not counted yet: of rows loaded from the store, and of rows recorded since
        the last count (``messages``: the request's, one per row; a row's line depends only on its message,
        kind, handle, step and path, so the count is the same whichever call takes it)."""
        if not self._compact_missing:
            return
        tokens = self.compact_tokens
        for r in range(self._compact_from, len(tokens)):
            if tokens[r] < 0:
                line = compact_line(messages[r], self.kind[r], self.handle[r], self.step[r], self.path[r])
                tokens[r] = self.counter.count(line) + 1
                self._columns.dirty.add(r)
        self._compact_missing = 0
        self._compact_from = len(tokens)

    def open_calls_at(self, k: int) -> set[str]:
        """Return the call ids still unanswered just before row ``k`` (validation state)."""
        answered: set[str] = set()
        r = k - 1
        while r >= 0 and self.kind[r] in TOOL_KINDS:
            if self.answers[r]:
                answered.add(self.answers[r])
            r -= 1
        if r < 0 or self.kind[r] != "assistant":
            return set()
        return set(self.call_ids[r]) - answered

    def columns(self) -> dict[str, np.ndarray]:
        """Return the numpy columns the planner and the heat policy read (read-only views).

        Kept between calls: a call extends them by its new rows and rewrites
        the rows whose references or staleness changed, so it costs work in
        proportion to what is new. Copy a column before changing it.
        """
        return self._columns.views(self)
