"""File operations for checkpoint directories that never follow a symlink.

A state directory sits in a workspace an agent (or anyone with write access)
can plant files in. Every operation here goes through a file descriptor of the
directory and opens its files with ``O_NOFOLLOW``:

- reads and appends refuse a symlink (``StateFileError``) instead of reading
  or writing wherever it points (a ``.wal`` or ``10_invariants.md`` symlink);
- a replacement is written to a fresh temporary file in the same directory,
  created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name (a
  planted ``.99_next.md.tmp-<pid>`` is never opened), fsynced, and renamed
  over the target with ``os.replace`` relative to the directory descriptor (a
  rename replaces a symlink, it never writes through it), then the directory
  is fsynced so the rename survives a crash.

Platforms without ``O_NOFOLLOW`` or ``dir_fd`` support (Windows) fall back to
an ``lstat`` check before each open, which narrows the window but cannot close
it; pager's checkpoint files are meant for POSIX hosts.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Iterator

from pager.errors import StateFileError

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "StateDirFd", "open_private", "refuse_symlinks"]

# What a store holds (every message the agent saw: source, secrets in tool outputs) is its owner's
# alone: folders are created 0700 and files 0600, whatever the umask.
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_HAVE_DIR_FD = os.open in os.supports_dir_fd and bool(_NOFOLLOW)


def refuse_symlinks(folder: Path, names: Iterator[str] | tuple[str, ...]) -> str | None:
    """Return the first of ``names`` in ``folder`` that is a symlink (None when none is)."""
    for name in names:
        if os.path.islink(folder / name):
            return name
    return None


def open_private(path: Path, flags: int) -> int:
    """Open ``path`` never through a symlink (``OSError`` ELOOP), creating it 0600 with ``O_CREAT``."""
    return os.open(path, flags | _NOFOLLOW | _CLOEXEC, PRIVATE_FILE)


class StateDirFd:
    """An open checkpoint directory: read, append and replace files in it, never through a symlink.

    ``path`` is created (with parents) when missing. Raises ``StateFileError``
    if it exists and is not a directory. Use as a context manager, or call
    ``close``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise StateFileError(f"{self.path} exists and is not a directory")
        try:
            self.path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDONLY | _DIRECTORY | _CLOEXEC) if _HAVE_DIR_FD else -1
        except OSError as exc:
            raise StateFileError(f"cannot open state directory {self.path}: {exc.strerror or exc}") from exc

    def __enter__(self) -> "StateDirFd":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- low level ------------------------------------------------------------------------

    def _open(self, name: str, flags: int, mode: int = PRIVATE_FILE) -> int:
        if "/" in name or name in ("", ".", ".."):
            raise StateFileError(f"{name!r} is not a file name inside the state directory")
        try:
            if _HAVE_DIR_FD:
                return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)
            target = self.path / name
            if target.is_symlink():
                raise OSError(errno.ELOOP, "is a symlink")
            return os.open(target, flags | _CLOEXEC, mode)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise StateFileError(
                    f"{self.path / name} is a symlink; pager never reads or writes state files through one"
                ) from None
            raise

    def is_symlink(self, name: str) -> bool:
        try:
            st = os.lstat(name, dir_fd=self.fd) if _HAVE_DIR_FD else os.lstat(self.path / name)
        except FileNotFoundError:
            return False
        return stat.S_ISLNK(st.st_mode)

    # -- reads ------------------------------------------------------------------------------

    def read_bytes(self, name: str) -> bytes | None:
        """Return a file's bytes, or None if it does not exist; a symlink is a ``StateFileError``."""
        try:
            fd = self._open(name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateFileError(f"cannot read {self.path / name}: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def read_text(self, name: str) -> str | None:
        data = self.read_bytes(name)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StateFileError(f"{self.path / name} is not UTF-8: {exc}") from exc

    def size(self, name: str) -> int:
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False) if _HAVE_DIR_FD else os.lstat(self.path / name)
        except FileNotFoundError:
            return 0
        return st.st_size

    def names(self) -> Iterator[str]:
        yield from sorted(os.listdir(self.fd if _HAVE_DIR_FD else self.path))

    # -- writes -----------------------------------------------------------------------------

    def append(self, name: str, text: str) -> None:
        """Append ``text`` to a file (created if missing) and fsync it."""
        try:
            fd = self._open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise StateFileError(f"cannot append to {self.path / name}: {exc.strerror or exc}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StateFileError(f"{self.path / name} is not a regular file")
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, name: str, text: str) -> None:
        """Write ``text`` to a fresh temporary file beside ``name`` and rename it over ``name``."""
        data = text.encode("utf-8")
        for _ in range(8):
            tmp = f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                break
            except FileExistsError:
                continue  # a planted or stale name: pick another, never open it
            except OSError as exc:
                raise StateFileError(f"cannot write {self.path / name}: {exc.strerror or exc}") from exc
        else:  # pragma: no cover - eight random collisions
            raise StateFileError(f"cannot create a temporary file in {self.path}")
        try:
            try:
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if _HAVE_DIR_FD:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                os.replace(self.path / tmp, self.path / name)
            tmp = ""
            self.sync()
        except OSError as exc:
            raise StateFileError(f"cannot write {self.path / name}: {exc.strerror or exc}") from exc
        finally:
            if tmp:
                try:
                    os.unlink(tmp, dir_fd=self.fd) if _HAVE_DIR_FD else os.unlink(self.path / tmp)
                except OSError:
                    pass

    def rename(self, old: str, new: str) -> None:
        """Rename a file inside the directory (the WAL's rotation); ``new`` must not exist."""
        if self.is_symlink(old):
            raise StateFileError(f"{self.path / old} is a symlink; pager never rotates through one")
        try:
            if _HAVE_DIR_FD:
                os.rename(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                os.rename(self.path / old, self.path / new)
        except OSError as exc:
            raise StateFileError(f"cannot rename {self.path / old}: {exc.strerror or exc}") from exc
        self.sync()

    def sync(self) -> None:
        """fsync the directory, so renames and new files survive a crash."""
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            except OSError:  # pragma: no cover - some filesystems refuse a directory fsync
                pass
