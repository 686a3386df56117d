"""Evidence tiers across windows: an inference is never promoted to a requirement. Pure.

A handoff's requirements are what a spec or the user confirmed, each with its
source; its inferences are the agent's own hypotheses (``pager.core.handoff``).
Summaries and memos fail when a guess of one window is restated as a fact in
the next, and every window after builds on it. ``check_promotion`` refuses a
handoff that does so, in the disguises such a promotion takes: a source that
is the agent or an earlier handoff, or the text of an earlier inference,
relabelled, recased, reworded by order. The rollover controller keeps every
committed handoff's inferences and runs the check on each ``new_context``.
"""

from __future__ import annotations

import re
from typing import Sequence

from pager.core.handoff import Handoff
from pager.errors import ToolError

__all__ = ["check_promotion"]

# A source that names the agent's own reasoning or an earlier window is no source: what it
# "confirms" is an inference, however it is labelled (seed 000: inferences are never promoted).
_AGENT_SOURCE_RE = re.compile(
    r"infer|hypothes|assum|guess|speculat|believ|suspect|\bagent\b|assistant|\bmodel\b|\bllm\b|"
    r"hand-?\s?off|new_context|memo\b|previous\s+(?:window|context|session|generation|analysis|notes?)|"
    r"(?:earlier|prior|last|old)\s+(?:window|context|generation)|context\s+window|\bwindow\s*\d|"
    r"\bgen(?:eration)?\s*\d|my\s+(?:own\s+)?(?:analysis|investigation|notes?|reading|understanding)|"
    r"\bself\b|\bme\b|\bi\b|\bwe\b|(?:^|\W)(?:pg:|msg_)",
    re.IGNORECASE,
)
_LABEL_RE = re.compile(
    r"^\s*(?:\W*\s*)?(?:confirmed|verified|fact|requirement|spec|note|established|known|"
    r"it\s+is\s+confirmed\s+that|as\s+confirmed)\s*[:\-—]?\s*",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[a-z0-9_]+")


def _words(text: str) -> frozenset[str]:
    """Return the words of ``text``, lowercased, a leading 'confirmed:'-style label dropped."""
    prev = None
    while prev != text:  # labels may be stacked: "Confirmed: FACT: ..."
        prev, text = text, _LABEL_RE.sub("", text, count=1)
    return frozenset(_WORD_RE.findall(text.lower()))


def _same_claim(a: frozenset[str], b: frozenset[str]) -> bool:
    if not a or not b:
        return False
    return len(a & b) / len(a | b) >= 0.75


def check_promotion(
    handoff: Handoff, prior_inferences: Sequence[str] = (), prior_triggers: Sequence[str] = ()
) -> None:
    """Refuse a handoff that promotes an inference to a spec-confirmed requirement; raise ``ToolError``.

    Refused: a requirement whose source names the agent, an inference, a
    handoff or an earlier window (``"previous handoff inference"``, ``"agent
    analysis, window 2"``, the ``message_uuid`` of an earlier handoff), and a
    requirement that restates an inference of an earlier handoff, whatever
    its source says and however it is relabelled (case, punctuation, a
    ``Confirmed:`` prefix, reordered words). A fact the user really
    confirmed reaches L1 through the harness (``pin``), not through the
    agent's memo.
    """
    priors = [(text, _words(text)) for text in prior_inferences]
    for i, req in enumerate(handoff.requirements):
        source = req.source
        if _AGENT_SOURCE_RE.search(source) or any(t and t in source for t in prior_triggers):
            raise ToolError(
                f"new_context: handoff.requirements[{i}] ({req.text[:60]!r}) cites {source!r}, which is the "
                "agent's own reasoning or an earlier handoff, not a spec or the user; move it to inferences"
            )
        words = _words(req.text)
        for text, prior in priors:
            if _same_claim(words, prior):
                raise ToolError(
                    f"new_context: handoff.requirements[{i}] ({req.text[:60]!r}) restates an inference of "
                    f"an earlier handoff ({text[:60]!r}); inferences are never promoted to requirements "
                    "across windows. Keep it under inferences; if the user confirmed it, the harness pins it"
                )
        for j, inference in enumerate(handoff.inferences):
            if _same_claim(words, _words(inference)):
                raise ToolError(
                    f"new_context: handoff.requirements[{i}] and inferences[{j}] state the same claim; "
                    "it is one or the other"
                )
