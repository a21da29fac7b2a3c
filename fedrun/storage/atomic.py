"""Files a run writes: atomically, so a crash or kill never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import csv
import errno
import io
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
    """``rows`` as a CSV table at ``path`` (atomically): pandas' ``to_csv`` of the whole table. When the call before
    for ``path`` wrote the same rows but the last, and every row has the same columns holding values of the same
    types (none of them None), the text is that call's plus the new row formatted alone: the same text, since
    pandas then gives each column one dtype and formats each value on its own (``astype(str)``; NaN as the empty
    string either way), without reformatting the whole table at every evaluated round."""
    row_types = _types(rows[-1]) if rows else None
    last = _METRICS_TEXT.get(path)
    if (
        last is not None
        and row_types is not None
        and last[0] == len(rows) - 1
        and len(rows) > 1
        and rows[-2] is last[1]
        and last[2] == row_types
    ):
        text = last[3] + _csv_row(rows[-1])
    else:
        text = pd.DataFrame(rows).to_csv(index=False)
        if row_types is None or any(_types(r) != row_types for r in rows):
            row_types = None
    atomic_write(path, text)
    if row_types is None:
        _METRICS_TEXT.pop(path, None)
    else:
        if len(_METRICS_TEXT) > 64 and path not in _METRICS_TEXT:  # (a sweep's many runs: keep a few)
            _METRICS_TEXT.clear()
        _METRICS_TEXT[path] = (len(rows), rows[-1], row_types, text)


# each path's last write_metrics: (rows, the last row, the rows' column types, the text); a cache, never the truth
_METRICS_TEXT: dict[Path, tuple[int, dict[str, Any], tuple[tuple[str, type], ...], str]] = {}


def _csv_row(row: dict[str, Any]) -> str:
    """One row as pandas' ``to_csv`` writes it in a column of its value's type: a float by its shortest repr (numpy's
    ``astype(str)``) and NaN as the empty string, an int or a bool by ``str``, a string as it is, through the csv
    writer pandas uses (minimal quoting, ``\\n``); a value of another type through pandas itself."""
    cells: list[str] = []
    for v in row.values():
        t = type(v)
        if t is float:
            cells.append("" if v != v else repr(v))
        elif t is int or t is bool or t is str:
            cells.append(str(v))
        else:
            return str(pd.DataFrame([row]).to_csv(index=False, header=False))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def _types(row: dict[str, Any]) -> tuple[tuple[str, type], ...] | None:
    """A row's columns and the types of its values (None when a value is None: its column's dtype would depend on
    the other rows)."""
    out = tuple((k, type(v)) for k, v in row.items())
    return None if any(t is type(None) for _, t in out) else out
