"""Fit the ``fitted`` heat policy's weights from recorded sessions: ``python -m pager.lab.fit``.

Theory of operation. Heat exists to predict reuse, so a policy's weights can
be learnt from the sessions themselves. Every session is fed, message by
message, into the same history mirror the facade keeps
(``pager.core.history.History``); at each call (an assistant message) every
*candidate* page -- not pinned in L1, older than the ``recent_units`` units
every round keeps -- is one sample:

- its features are ``pager.core.fitted.features`` of the page table the
  scheduler would build at that call (recency, reference count and age of the
  last reference, kind, size, staleness, relevance to the latest user message,
  task label, term overlap with the latest step);
- its label is whether the page holds a *residual need* of one of the next
  ``horizon`` calls: a need (``pager.lab.replay.needs``, as the bench counts them)
  of call j that no pinned page and no message from the current recent tail up
  to call j holds. Those are exactly the needs only an older page can cover.

A logistic regression (Newton's method, L2-regularised, numpy only) turns the
samples into weights. Since only the order matters to the planner and the
planner fills a token quota, the size feature's weight is lowered by
``size_cost`` (ln 2 per doubling: the score becomes the log of the odds *per
token*, which is what a quota should be filled by).

Validation is by session, never by call: ``--folds K`` splits the sessions
into K groups; each group is scored with weights fitted on the others, and
the table compares, on held-out sessions only, the fitted policy with the
shipped ones on AUC and on *quota coverage* (the share of residual needs held
by the pages that fit a token quota filled hottest first, the way a round
fills the low watermark).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np
import orjson

from pager.core.fitted import FEATURES, features
from pager.core.heat import PageTable, get_policy
from pager.core.history import History, hash_messages
from pager.core.messages import classify, tool_calls
from pager.core.tokens import TokenCounter, default_counter
from pager.errors import ConfigError

__all__ = ["Samples", "collect", "fit", "main", "quota_coverage"]

SIZE_COST = float(np.log(2.0))


@attrs.frozen
class Samples:
    """Candidate pages at calls: features, labels, and the call and session each belongs to."""

    x: np.ndarray  # (n, len(FEATURES))
    y: np.ndarray  # (n,) bool: holds a residual need of the next calls
    tokens: np.ndarray  # (n,) int64
    call: np.ndarray  # (n,) int64: a global call number
    session: np.ndarray  # (n,) int64: the session's index
    reference: np.ndarray  # (n,) the shipped reference policy's score, for comparison
    decay: np.ndarray
    fifo: np.ndarray
    needs: np.ndarray  # per call: residual needs of the horizon (index = call number)
    held: tuple[frozenset[str], ...] = ()  # per sample: the residual needs the page holds
    unique: tuple[frozenset[str], ...] = ()  # ... of which no newer candidate holds
    names: tuple[str, ...] = ()

    @property
    def count(self) -> np.ndarray:
        """Return the residual needs each sample's page holds."""
        return np.fromiter((len(x) for x in self.unique), dtype=np.float64, count=len(self.unique))


def _need_terms(msg: dict[str, Any]) -> frozenset[str]:
    from pager.lab.replay.needs import extract_needs, message_text

    return frozenset(extract_needs(message_text(msg)))


def _facts_terms(msg: dict[str, Any]) -> frozenset[str]:
    from pager.lab.replay.needs import message_text, terms

    return terms(message_text(msg))


def _session_samples(
    messages: Sequence[dict[str, Any]], counter: TokenCounter, horizon: int, recent_units: int,
    session_no: int, call0: int, out: dict[str, list[Any]], stride: int = 1,
) -> int:
    """Append one session's samples to ``out``; return the number of calls sampled."""
    from pager.schedulers.paging import recall_query

    h = History(f"fit-{session_no}", counter)
    msgs = list(messages)
    mterms = [_facts_terms(m) for m in msgs]
    seen: set[str] = set()
    needs: list[frozenset[str]] = []
    for m, t in zip(msgs, mterms):
        needs.append(frozenset(_need_terms(m) & seen) if m.get("role") == "assistant" else frozenset())
        seen |= t
    assistant = [i for i, m in enumerate(msgs) if m.get("role") == "assistant" and i > 0]
    reference, decay, fifo = get_policy("reference"), get_policy("decay"), get_policy("fifo")
    hashes, raws = hash_messages(msgs)
    calls = 0
    fed = 0
    for k, i in enumerate(assistant):
        # feed the mirror up to message i (the call sees msgs[:i])
        if i > fed:
            classified = classify(msgs[:i], fed, h.calls)
            for m in msgs[fed:i]:
                for call in tool_calls(m):
                    h.calls[call.id] = (call.name, call.arguments)
            prepared = h.prepare(msgs[:i], fed, classified, hashes, raws)
            h.append(prepared, list(range(fed, i)))
            fed = i
        if k % stride:
            continue
        n = len(h)
        units = np.asarray(h.unit, dtype=np.int64)
        uniq = np.unique(units)
        tail_unit = uniq[-recent_units] if uniq.size >= recent_units else uniq[0]
        tail_row = int(np.flatnonzero(units >= tail_unit)[0])
        pinned = h.pinned_count()
        cand = np.arange(pinned, tail_row)
        if not cand.size:
            continue
        covered: set[str] = set().union(*mterms[:pinned], *mterms[tail_row:i])
        residual: set[str] = set()
        upto = i
        for j in assistant[k : k + horizon]:
            covered.update(*mterms[upto:j])
            upto = j
            residual |= needs[j] - covered
        cols = h.columns()
        latest = h.latest_user
        focus = h.terms[latest] if latest is not None and latest != h.first_user else frozenset()
        table = PageTable(
            page_id=cols["page"], created=cols["created"], last_ref=cols["last_ref"], ref_count=cols["ref_count"],
            tokens=cols["tokens"], kind=cols["kind"], stale=cols["stale"],
            relevance=h.term_index.relevance(cols["page"], focus) if focus else np.zeros(n),
            task=h.task_column(), overlap=h.term_index.relevance(cols["page"], recall_query(h)),
        ).take(cand)
        clock = h.clock
        out["x"].append(features(table, clock))
        held = [mterms[r] & residual for r in cand]
        # a need counts for the newest candidate holding it: an older copy adds
        # nothing to a quota that already holds the newer one
        unique: list[frozenset[str]] = []
        left = set(residual)
        for x in reversed(held):
            unique.append(frozenset(x & left))
            left -= x
        out["held"].extend(held)
        out["unique"].extend(reversed(unique))
        out["y"].append(np.fromiter((bool(x) for x in held), dtype=bool, count=cand.size))
        out["tokens"].append(cols["tokens"][cand])
        out["call"].append(np.full(cand.size, call0 + calls, dtype=np.int64))
        out["session"].append(np.full(cand.size, session_no, dtype=np.int64))
        out["reference"].append(reference.score(table, clock))
        out["decay"].append(decay.score(table, clock))
        out["fifo"].append(fifo.score(table, clock))
        out["needs"].append(len(residual))
        calls += 1
    return calls


def collect(
    sessions: Sequence[Any], *, horizon: int = 8, recent_units: int = 3, counter: TokenCounter | None = None,
    stride: int = 1,
) -> Samples:
    """Return the samples of ``sessions`` (``pager.lab.replay.session.Session`` values)."""
    counter = counter if counter is not None else default_counter()
    out: dict[str, list[Any]] = {k: [] for k in (
        "x", "y", "tokens", "call", "session", "reference", "decay", "fifo", "needs", "held", "unique")}
    call0 = 0
    for no, s in enumerate(sessions):
        call0 += _session_samples(s.messages, counter, horizon, recent_units, no, call0, out, stride)
    if not out["x"]:
        raise ConfigError("no samples: the sessions have no call with a page older than the recent units")
    cat = {k: np.concatenate(v) for k, v in out.items() if k not in ("needs", "held", "unique")}
    return Samples(needs=np.asarray(out["needs"], dtype=np.int64), names=tuple(s.id for s in sessions),
                   held=tuple(out["held"]), unique=tuple(out["unique"]), **cat)


def fit(
    x: np.ndarray, y: np.ndarray, *, count: np.ndarray | None = None, l2: float = 1.0,
    size_cost: float = SIZE_COST, iters: int = 30,
) -> np.ndarray:
    """Return one weight per feature, size penalised by ``size_cost``.

    With ``count`` (needs held per sample): a Poisson regression of the count,
    so ``exp(score)`` estimates the needs a page holds and ``score - ln 2 *
    log2(tokens)`` (``size_cost`` = ln 2) their density per token, which is
    what a quota filled hottest first should be ranked by. Without it: a
    logistic regression of ``y``. Newton's method on standardised features with
    an L2 penalty ``l2``; the intercept is fitted and dropped (it does not
    change an order).
    """
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    z = np.hstack([(x - mu) / sd, np.ones((x.shape[0], 1))])
    w = np.zeros(z.shape[1])
    t = (y if count is None else count).astype(np.float64)
    if count is not None:
        w[-1] = np.log(max(t.mean(), 1e-9))
    reg = np.full(z.shape[1], l2)
    reg[-1] = 0.0
    for _ in range(iters):
        eta = np.clip(z @ w, -30, 30)
        if count is None:
            p = 1.0 / (1.0 + np.exp(-eta))
            curv = p * (1 - p)
        else:
            p = np.exp(eta)
            curv = p
        grad = z.T @ (p - t) + reg * w
        hess = (z * curv[:, None]).T @ z + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = w[:-1] / sd
    weights[FEATURES.index("log_size")] -= size_cost
    return weights


def auc(score: np.ndarray, y: np.ndarray) -> float:
    """Return the area under the ROC curve (ties counted half)."""
    pos = int(y.sum())
    neg = y.size - pos
    if not pos or not neg:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(y.size)
    s = score[order]
    # average ranks over ties
    idx = np.flatnonzero(np.diff(np.r_[True, s[1:] != s[:-1], True]))
    r = np.arange(1, y.size + 1, dtype=np.float64)
    for a, b in zip(idx[:-1], idx[1:]):
        r[a:b] = r[a:b].mean()
    ranks[order] = r
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def quota_coverage(samples: Samples, score: np.ndarray, quota: int, rows: np.ndarray | None = None) -> float:
    """Return the share of residual needs held by the pages that fit a quota filled hottest first.

    Per call: rank candidates by ``score`` (ties: newer first), take each page
    that still fits in ``quota`` tokens, and count the residual needs the taken
    pages hold; pooled over calls.
    """
    sel = np.arange(samples.y.size) if rows is None else rows
    call = samples.call[sel]
    order = np.lexsort((-sel, -score[sel], call))
    sel, call = sel[order], call[order]
    starts = np.flatnonzero(np.r_[True, call[1:] != call[:-1]])
    ends = np.r_[starts[1:], sel.size]
    got = total = 0
    for a, b in zip(starts, ends):
        rows_c = sel[a:b]
        if not samples.y[rows_c].any():
            continue
        want: set[str] = set().union(*(samples.held[r] for r in rows_c[samples.y[rows_c]]))
        have: set[str] = set()
        left = quota
        for r in rows_c:
            t = int(samples.tokens[r])
            if t <= left:
                left -= t
                have |= samples.held[r]
        got += len(have)
        total += len(want)
    return got / total if total else float("nan")


def cross_validate(samples: Samples, folds: int, quota: int, **fit_args: Any) -> dict[str, dict[str, float]]:
    """Return held-out AUC and quota coverage per policy, pooled over the folds."""
    sessions = np.unique(samples.session)
    fold_of = {int(s): i % folds for i, s in enumerate(sessions)}
    fold = np.fromiter((fold_of[int(s)] for s in samples.session), dtype=np.int64, count=samples.session.size)
    fitted = np.zeros(samples.y.size)
    for f in range(folds):
        train, test = fold != f, fold == f
        w = fit(samples.x[train], samples.y[train], count=samples.count[train], **fit_args)
        fitted[test] = samples.x[test] @ w
    out = {}
    for name, score in (("fitted", fitted), ("reference", samples.reference), ("decay", samples.decay),
                        ("fifo", samples.fifo)):
        out[name] = {"auc": auc(score, samples.y), "quota_coverage": quota_coverage(samples, score, quota)}
    return out


def _default_paths() -> list[Path]:
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        traces = base / ".." / "shared" / "traces"
        if traces.is_dir():
            return [traces.resolve()]
    return [Path(__file__).resolve().parents[1] / "data"]


def main(argv: Sequence[str] | None = None) -> int:
    """Fit the weights, print the cross-validation table; ``--write`` saves a pager config."""
    ap = argparse.ArgumentParser(prog="pager tune --fit", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="session files or directories (default ../shared/traces)")
    ap.add_argument("--min-assistant", type=int, default=10)
    ap.add_argument("--horizon", type=int, default=8, help="calls ahead a need counts (default 8)")
    ap.add_argument("--recent-units", type=int, default=3)
    ap.add_argument("--folds", type=int, default=5, help="cross-validation folds, by session (default 5)")
    ap.add_argument("--quota", type=int, default=6000, help="tokens of the quota coverage figure (default 6000)")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--size-cost", type=float, default=SIZE_COST,
                    help="subtracted from the size weight (default ln 2: odds per token)")
    ap.add_argument("--stride", type=int, default=1, help="sample every Nth call (default 1)")
    ap.add_argument("--leave-out", type=int, default=None, metavar="F",
                    help="fit without fold F of --folds (sessions sorted by id, every K-th), to replay fold F "
                    "with bench/ablations.py --folds K --fold F")
    ap.add_argument("--write", metavar="FILE.json", help="write {policy, policy_params} for pager.open(config=...)")
    args = ap.parse_args(argv)

    from pager.lab.replay.session import load_sessions

    sessions = [s for s in load_sessions(args.paths or _default_paths()) if s.n_assistant >= args.min_assistant]
    sessions.sort(key=lambda s: s.id)
    if args.leave_out is not None:
        sessions = [s for i, s in enumerate(sessions) if i % args.folds != args.leave_out]
    if not sessions:
        print("pager fit: no sessions", file=sys.stderr)
        return 1
    samples = collect(sessions, horizon=args.horizon, recent_units=args.recent_units, stride=args.stride)
    fit_args = {"l2": args.l2, "size_cost": args.size_cost}
    folds = min(args.folds, len(sessions))
    print(f"{len(sessions)} sessions, {samples.needs.size} calls, {samples.y.size} samples, "
          f"{samples.y.mean():.3f} positive; {folds}-fold cross-validation by session")
    if folds >= 2:
        cv = cross_validate(samples, folds, args.quota, **fit_args)
        print(f"{'policy':<10} {'AUC':>6} {'quota cov':>10}")
        for name, row in cv.items():
            print(f"{name:<10} {row['auc']:6.3f} {row['quota_coverage']:10.3f}")
    w = fit(samples.x, samples.y, count=samples.count, **fit_args)
    weights = {name: round(float(v), 4) for name, v in zip(FEATURES, w)}
    print("weights (all sessions):", orjson.dumps(weights).decode())
    if args.write:
        Path(args.write).write_bytes(orjson.dumps(
            {"policy": "fitted", "policy_params": {"weights": weights}}, option=orjson.OPT_INDENT_2))
        print(f"pager fit: wrote {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
