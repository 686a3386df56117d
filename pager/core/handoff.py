"""The rollover handoff: the ``new_context`` tool, its validation and the new window's first message.

Theory of operation
-------------------
In rollover mode the model ends a window by calling ``new_context`` with a
four-section handoff, tiered by evidence (what a source confirms outranks
what the agent inferred):

1. spec-confirmed requirements, each with its source (user turn, spec file);
2. agent inferences: hypotheses, never promoted to facts, not even when a
   later window repeats them;
3. unresolved conflicts;
4. unverified acceptance criteria and next steps;

plus ``related_files``, a list of ``{path, role, note}`` with role one of
``spec`` / ``test`` / ``implementation`` / ``other``, each path checked to
stay inside the workspace (``..`` escapes, absolute paths elsewhere and
symlinks pointing out are refused).

The tool call is the *intent*: ``parse_handoff`` validates it and the host
answers with ``confirmation_text``. The *switch* happens at the next
``assemble``, at a step boundary: the new window is L1 followed by
``render_new_window_message``. A window the model never handed off is
replaced with ``render_checkpoint(forced_checkpoint(...))``, built from the
objective, the notes and the last human request with no model call.

The parts live beside this module, which hands their names on:
``pager.core.handoff_schema`` (the values and the tool schema),
``pager.core.handoff_parse`` (validation, the workspace path checks) and
``pager.core.handoff_render`` (the messages a rollover writes). Everything
is pure except ``resolve_in_filesystem``, the one place that asks the
filesystem where a symlink points.
"""

from __future__ import annotations

from pager.core import handoff_parse, handoff_render, handoff_schema
from pager.core.handoff_parse import parse_handoff, resolve_in_filesystem, validate_path
from pager.core.handoff_render import (
    confirmation_text,
    forced_checkpoint,
    open_items,
    render_checkpoint,
    render_handoff,
    render_new_window_message,
)
from pager.core.handoff_schema import (
    NEW_CONTEXT_TOOL,
    ROLES,
    SECTIONS,
    TOOL_NAME,
    Checkpoint,
    Handoff,
    RelatedFile,
    Requirement,
)

# every name of the three parts, sorted
__all__ = sorted([*handoff_schema.__all__, *handoff_parse.__all__, *handoff_render.__all__])
