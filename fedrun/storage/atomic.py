"""Files a run writes: atomically, so a crash or kill never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
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


TEMP_SUFFIX = re.compile(r"\.(\d+)\.tmp(\.\w+)?$")  # <name>.<pid>.tmp[.ext]: fedrun's temp files of atomic writes


def temp_path(path: Path, ext: str = "") -> Path:
    """The temp file an atomic write of ``path`` goes through: ``.<name>.<pid>.tmp[ext]`` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{ext}")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    Any failure (a full disk, an interrupt) removes the temp file and leaves ``path`` as it was; an OSError
    is raised as :class:`WriteError`.
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
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
    """Delete temp files of atomic writes (``*.<pid>.tmp*``) in ``folder`` left by processes that died mid-write
    (all of them with ``any_pid``: the caller holds the folder's lock, so no live writer can own one)."""
    removed = []
    for f in folder.iterdir() if folder.is_dir() else []:
        m = TEMP_SUFFIX.search(f.name)
        if m and f.is_file() and (any_pid or not _alive(int(m.group(1)))):
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
