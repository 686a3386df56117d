"""The recall index's folder on disk: what counts as damage, checking it, moving it aside.

The Tantivy index is derived data (``pager.storage.index``): when it is
damaged, pager moves the folder aside (``index.damaged-<when>``, the newest
``KEEP_ASIDE`` kept for a post-mortem), starts an empty one and rebuilds it
from the store. Never the store itself.

Damage is found two ways:

- on open, every file the committed ``meta.json`` names is checked against the
  CRC-32 in its Tantivy footer (``verify``). A flipped bit anywhere in a
  segment file (``.idx``, ``.pos``, ``.term``, ``.store``, ``.fast``,
  ``.fieldnorm``, ``.del``) is caught here, before Tantivy reads it: Tantivy
  itself checks no checksum when it reads, and a flip it trips over surfaces
  as a Rust panic (pyo3's ``PanicException``, a ``BaseException`` that
  ``except Exception`` does not catch), a ``TypeError`` from a fast field, or
  no error at all (a silently wrong posting or stored value). Files are
  immutable once committed, so each is checked once per process.
- at any call, an exception ``is_damage`` recognises: Tantivy's ``ValueError``,
  ``OSError``, ``RuntimeError``, a ``TypeError`` and ``PanicException``.

Only committed files are read: a segment another process is writing is in no
``meta.json`` yet, so it is never mistaken for damage.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
import zlib
from pathlib import Path

import orjson

__all__ = ["KEEP_ASIDE", "IndexDamage", "is_damage", "move_aside", "tighten", "verify"]

log = logging.getLogger("pager.index")

KEEP_ASIDE = 2  # damaged folders kept beside the index for a post-mortem; older ones are removed
_FOOTER_MAGIC = 1337  # tantivy's FOOTER_MAGIC_NUMBER
_MAX_FOOTER = 4096
_CHUNK = 1 << 20
_UNTOUCHABLE = (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError, RecursionError)


class IndexDamage(Exception):
    """The index folder is damaged (internal: the index translates it into ``RecallIndexError``)."""


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a Tantivy call, means the index on disk is damaged or unreadable."""
    if isinstance(exc, _UNTOUCHABLE):
        return False
    if isinstance(exc, (ValueError, OSError, RuntimeError, TypeError, IndexDamage)):
        return True
    # pyo3 turns a Rust panic into pyo3_runtime.PanicException, which no module exports
    return type(exc).__name__ == "PanicException"


def _segment_files(meta: dict) -> list[str]:
    names = []
    exts = (".idx", ".pos", ".term", ".store", ".fast", ".fieldnorm")
    for seg in meta.get("segments") or ():
        sid = str(seg["segment_id"]).replace("-", "")
        names += [sid + e for e in exts]
        deletes = seg.get("deletes")
        if deletes:
            names.append(f"{sid}.{int(deletes['opstamp'])}.del")
    return names


def _check_file(path: Path) -> None:
    """Raise ``IndexDamage`` unless ``path``'s body matches the CRC-32 of its Tantivy footer."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise IndexDamage(f"{path.name}: {size} bytes, shorter than a footer")
        f.seek(size - 8)
        footer_len, magic = struct.unpack("<II", f.read(8))
        if magic != _FOOTER_MAGIC or footer_len > min(_MAX_FOOTER, size - 8):
            raise IndexDamage(f"{path.name}: no Tantivy footer")
        body = size - 8 - footer_len
        f.seek(body)
        try:
            want = int(orjson.loads(f.read(footer_len))["crc"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise IndexDamage(f"{path.name}: unreadable footer ({exc})") from None
        f.seek(0)
        crc, left = 0, body
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                raise IndexDamage(f"{path.name}: cut short")
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
    if crc != want:
        raise IndexDamage(f"{path.name}: checksum mismatch")


def verify(path: Path, checked: set[tuple[str, int]]) -> None:
    """Check every committed file of the index at ``path``; raise ``IndexDamage`` on the first bad one.

    ``checked`` holds ``(name, size)`` of files already found good (they never
    change once committed); it grows. A missing folder or ``meta.json`` is
    fine (a new index).
    """
    for attempt in range(3):
        try:
            raw = (path / "meta.json").read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise IndexDamage(f"meta.json: {exc}") from None
        try:
            names = _segment_files(orjson.loads(raw))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IndexDamage(f"meta.json: {exc}") from None
        try:
            for name in names:
                size = os.stat(path / name).st_size
                if (name, size) in checked:
                    continue
                _check_file(path / name)
                checked.add((name, size))
            return
        except FileNotFoundError as exc:
            # another process's commit (and its garbage collection) may have replaced them: look again
            if attempt == 2 or (path / "meta.json").read_bytes() == raw:
                raise IndexDamage(f"{Path(exc.filename or '?').name}: missing") from None
        except OSError as exc:
            raise IndexDamage(f"{exc.filename}: {exc.strerror}") from None


def move_aside(path: Path) -> Path | None:
    """Move a damaged index (a folder, or anything else at ``path``) aside; return where it went."""
    if not os.path.lexists(path):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.damaged-{stamp}-{os.getpid()}-{time.monotonic_ns() % 10**6:06d}")
    try:
        os.replace(path, target)
    except OSError as exc:
        log.warning("recall index: cannot move %s aside (%s); removing it", path, exc)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        return None
    old = sorted(p for p in path.parent.glob(f"{path.name}.damaged-*"))
    for stale in old[:-KEEP_ASIDE]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return target


def tighten(path: Path) -> None:
    """Make the index's files 0600 (Tantivy creates its segments under the umask, 0644 by default).

    The folder itself is created 0700, which already keeps others out; this
    keeps a copied or re-permissioned folder from exposing what the agent saw.
    A scan of one folder (tens of files) after a commit that costs tens of ms.
    """
    try:
        with os.scandir(path) as entries:
            for e in entries:
                try:
                    if e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mode & 0o077:
                        os.chmod(e.path, 0o600)  # a regular file, just seen: not a symlink
                except FileNotFoundError:
                    pass  # removed meanwhile (a merge, Tantivy's temporary files): nothing left to tighten
    except OSError as exc:
        log.warning("recall index at %s: cannot tighten file modes: %s", path, exc)
