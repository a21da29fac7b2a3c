"""Files a run writes: atomically, so a crash or kill never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

# metrics.csv columns that measure time: everything else must repeat exactly for the same config and seed
TIMING_COLUMNS = ("round_seconds", "seconds", "aggregate_seconds")


class WriteError(OSError):
    """A run file that could not be written (a full disk, a read-only directory): names the file and its folder.

    Raised by :func:`atomic_write` after removing its temp file; ``errno`` is the cause's (ENOSPC, EACCES...).
    """

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"cannot write {self.path.name} in {self.path.parent}: {self.strerror}"

    @property
    def advice(self) -> str:
        """What to do about it, by its errno (:func:`write_advice`)."""
        return write_advice(self.errno)


# what to do when a write fails with an errno: only a full disk is "free some space"
WRITE_ADVICE = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (the disk quota is reached)",
    errno.EFBIG: "raise the file size limit (ulimit -f) or write to a file system that allows larger files",
    errno.EISDIR: "a directory is in the way of the file; move it away",
    errno.ENOTDIR: "a file is in the way of a folder on the path; move it away",
    errno.EACCES: "valid: a run directory you can write to (check its permissions)",
    errno.EPERM: "valid: a run directory you can write to (check its permissions)",
    errno.EROFS: "valid: a run directory on a writable file system (this one is read-only)",
    errno.ELOOP: "valid: a run directory without a symlink in the way",
}


def write_advice(code: int | None) -> str:
    """The advice for a write that failed with errno ``code`` (an I/O error: check the disk)."""
    return WRITE_ADVICE.get(code or 0, "check the disk (an I/O error)")


# .<name>.<pid>.tmp[.ext]: fedrun's temp files of atomic writes, and the only files its clean-ups ever delete
TEMP_SUFFIX = re.compile(r"\.(\d+)\.tmp(\.\w+)?$")  # the ending of such a name
TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp(\.\w+)?$")


def temp_path(path: Path, ext: str = "") -> Path:
    """The temp file an atomic write of ``path`` goes through: ``.<name>.<pid>.tmp[ext]`` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{ext}")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temp file in the same folder, fsync, then rename over ``path``.

    Any failure (a full disk, an interrupt) removes the temp file and leaves ``path`` as it was; an OSError
    is raised as :class:`WriteError`. The rename replaces a symlink at ``path``, never writing through it.
    """
    raw = data.encode() if isinstance(data, str) else data

    def write(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    atomic_write_with(path, write)


def atomic_write_with(path: Path, write: Callable[[Path], object], ext: str = "") -> None:
    """The one atomic write of fedrun: ``write(temp)`` fills :func:`temp_path` (``ext`` appended, for writers
    that add an extension of their own, ``np.savez``), which is fsynced and renamed over ``path``.

    Any failure removes the temp file and leaves ``path`` as it was; an OSError is raised as :class:`WriteError`.
    """
    path = Path(path)
    tmp = temp_path(path, ext)
    try:
        tmp.unlink(missing_ok=True)  # a dead process of the same pid left it (never a link to follow)
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise WriteError(path, e) from e
        raise


def remove_stale_temps(folder: Path, any_pid: bool = False) -> list[Path]:
    """Delete temp files of atomic writes (``.<name>.<pid>.tmp[.ext]``, :data:`TEMP_NAME`: no other name) in
    ``folder`` left by processes that died mid-write (all of them with ``any_pid``: the caller holds the folder's
    lock, so no live writer can own one). A symlink is never followed nor removed."""
    removed = []
    for f in folder.iterdir() if folder.is_dir() else []:
        m = TEMP_NAME.match(f.name)
        if m and not f.is_symlink() and f.is_file() and (any_pid or not _alive(int(m.group("pid")))):
            with contextlib.suppress(OSError):
                f.unlink()
                removed.append(f)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def write_json(path: Path, obj: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")


def write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write(path, pd.DataFrame(rows).to_csv(index=False))
