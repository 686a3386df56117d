"""Validate ``new_context`` arguments into a ``Handoff``; hold related-file paths inside the workspace.

``parse_handoff`` is the one entry point: the four sections are required, a
requirement needs its source, each related file a role and a path that
``validate_path`` keeps inside the workspace (``..`` escapes, absolute paths
elsewhere and symlinks pointing out are refused). Every error is a
``ToolError`` written for the model: it says what to fix.

Pure except ``resolve_in_filesystem``, the one place that asks the
filesystem where a symlink points.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from pager.core.handoff_schema import ROLES, SECTIONS, Handoff, RelatedFile, Requirement
from pager.errors import ToolError

__all__ = ["parse_handoff", "resolve_in_filesystem", "validate_path"]


def resolve_in_filesystem(path: Path) -> Path:
    """Resolve ``path`` through the filesystem (symlinks followed, missing tails kept).

    The only I/O in this module; tests and callers without a workspace never
    reach it.
    """
    return path.resolve(strict=False)


def validate_path(path: str, workspace: Path | None) -> str:
    """Return ``path`` normalised to a workspace-relative POSIX path, or raise ``ToolError``.

    Refused: an empty path, ``..`` that climbs out of the workspace, an
    absolute path outside ``workspace``, a path whose symlinks resolve
    outside it. The file need not exist (a next step may create it). With
    ``workspace`` None only the lexical checks run and absolute paths are
    refused, since there is no root to hold them against.
    """
    if not isinstance(path, str) or not path.strip():
        raise ToolError("related_files: a path is empty")
    if "\x00" in path:
        raise ToolError(f"related_files: path {path!r} contains a NUL byte")
    raw = path.strip().replace("\\", "/") if os.sep == "\\" else path.strip()
    if workspace is None:
        if posixpath.isabs(raw):
            raise ToolError(
                f"related_files: {path!r} is absolute and no workspace root is set; "
                "give a path relative to the workspace"
            )
        rel = posixpath.normpath(raw)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"related_files: {path!r} escapes the workspace through '..'")
        return rel
    root = resolve_in_filesystem(Path(workspace))
    if posixpath.isabs(raw) or os.path.isabs(raw):
        # Absolute: compare lexically against the root as given and resolved,
        # so /work/ws/x is accepted whether or not /work/ws is itself a symlink.
        lexical = Path(os.path.normpath(raw))
        for base in (Path(os.path.normpath(workspace)), root):
            if lexical == base or base in lexical.parents:
                rel = lexical.relative_to(base).as_posix()
                break
        else:
            raise ToolError(
                f"related_files: {path!r} is an absolute path outside the workspace {str(root)!r}"
            )
    else:
        rel = posixpath.normpath(raw)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"related_files: {path!r} escapes the workspace through '..'")
    if rel in (".", ""):
        raise ToolError(f"related_files: {path!r} names the workspace root, not a file")
    resolved = resolve_in_filesystem(root / rel)
    if resolved != root and root not in resolved.parents:
        raise ToolError(
            f"related_files: {path!r} resolves through a symlink to {str(resolved)!r}, "
            "outside the workspace"
        )
    return rel


def _load(arguments: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(arguments, (str, bytes)):
        try:
            value = orjson.loads(arguments) if arguments else {}
        except orjson.JSONDecodeError as exc:
            raise ToolError(f"new_context: arguments are not valid JSON ({exc})") from None
    else:
        value = arguments
    if not isinstance(value, Mapping):
        raise ToolError("new_context: arguments must be a JSON object with handoff and related_files")
    return value


def _strings(section: str, value: Any) -> tuple[str, ...]:
    # A lone string is one item: models under budget pressure sometimes drop the list.
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ToolError(f"new_context: handoff.{section} must be a list of strings")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ToolError(f"new_context: handoff.{section}[{i}] must be a string")
        if item.strip():
            out.append(item.strip())
    return tuple(out)


def _requirements(value: Any) -> tuple[Requirement, ...]:
    if not isinstance(value, (list, tuple)):
        raise ToolError("new_context: handoff.requirements must be a list of {text, source}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolError(
                f"new_context: handoff.requirements[{i}] must be an object {{text, source}}; "
                "a requirement without a source belongs in inferences"
            )
        text, source = item.get("text"), item.get("source")
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"new_context: handoff.requirements[{i}] has no text")
        if not isinstance(source, str) or not source.strip():
            raise ToolError(
                f"new_context: handoff.requirements[{i}] ({text.strip()[:60]!r}) has no source; "
                "name where it was confirmed (user turn, spec file) or move it to inferences"
            )
        out.append(Requirement(text.strip(), source.strip()))
    return tuple(out)


def _related(value: Any, workspace: Path | None) -> tuple[RelatedFile, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ToolError("new_context: related_files must be a list of {path, role}")
    out: list[RelatedFile] = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolError(f"new_context: related_files[{i}] must be an object {{path, role}}")
        role = item.get("role")
        if role not in ROLES:
            raise ToolError(
                f"new_context: related_files[{i}] has role {role!r}; "
                f"use one of {', '.join(ROLES)}"
            )
        note = item.get("note") or ""
        if not isinstance(note, str):
            raise ToolError(f"new_context: related_files[{i}].note must be a string")
        path = validate_path(item.get("path"), workspace)  # type: ignore[arg-type]
        entry = RelatedFile(path, role, " ".join(note.split()))
        if entry not in out:  # exact repeats carry nothing
            out.append(entry)
    return tuple(out)


def parse_handoff(
    arguments: str | bytes | Mapping[str, Any], workspace: Path | None = None
) -> Handoff:
    """Validate ``new_context`` arguments into a ``Handoff``, or raise ``ToolError``.

    ``arguments`` is the tool call's JSON string or its decoded object. The
    four sections are required (an empty list is fine, all four empty is
    not); a flat object with the sections at top level is accepted too.
    Related-file paths come back workspace-relative (see ``validate_path``).
    The error message is written for the model: it says what to fix.
    """
    args = _load(arguments)
    memo = args.get("handoff")
    if memo is None and any(k in args for k in SECTIONS):
        memo = args  # sections given at top level
    if not isinstance(memo, Mapping):
        raise ToolError(
            "new_context: 'handoff' is missing; give an object with "
            + ", ".join(SECTIONS)
        )
    missing = [k for k in SECTIONS if k not in memo]
    if missing:
        raise ToolError(
            f"new_context: handoff is missing {', '.join(missing)}; "
            "every section must be present (use [] when it is empty)"
        )
    handoff = Handoff(
        requirements=_requirements(memo["requirements"]),
        inferences=_strings("inferences", memo["inferences"]),
        conflicts=_strings("conflicts", memo["conflicts"]),
        next_steps=_strings("next_steps", memo["next_steps"]),
        related_files=_related(args.get("related_files"), workspace),
    )
    if not (handoff.requirements or handoff.inferences or handoff.conflicts or handoff.next_steps):
        raise ToolError(
            "new_context: all four handoff sections are empty; the next window would start "
            "with nothing but the original request. Write at least the next steps"
        )
    return handoff

