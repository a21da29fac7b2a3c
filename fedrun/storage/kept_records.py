"""Hydra's record of the run a run directory holds, kept from before Hydra overwrites it.

Hydra writes its record of a job (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``) into the run directory
when it launches the job, before fedrun can check the job against the run there. A job refused there (another
config, or a directory another process holds) would leave that finished or live run labelled with the refused
attempt's record. The composition checks (fedrun/cli/compose_checks.py), which run before Hydra writes, keep the
record's bytes here (:func:`keep`); the refusal puts them back (:func:`restore`, from
:meth:`fedrun.storage.rundir.RunDir.refuse`). Only in the process that composed the job: a launcher that runs its
jobs in other processes (joblib, Ray) keeps nothing, and there the refused attempt's record stays.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from fedrun.storage.atomic import atomic_write

# the record folder's real path -> (whether it existed, each record file's bytes, None where it was absent)
_KEPT: dict[str, tuple[bool, dict[str, bytes | None]]] = {}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def keep(folder: Path, names: Iterable[str]) -> None:
    """Keep the record files ``names`` in ``folder`` as they are now (until :func:`restore` or the next keep)."""
    _KEPT[os.path.realpath(folder)] = (folder.is_dir(), {n: _read(folder / n) for n in names})


def forget(folder: Path) -> None:
    """Drop what :func:`keep` kept of ``folder``: the job ran there, and the record is its own."""
    _KEPT.pop(os.path.realpath(folder), None)


def restore(folder: Path) -> bool:
    """Put ``folder``'s record files back as :func:`keep` found them (removing those it found absent, and the
    folder when it was absent and is left empty); whether anything was kept. Best effort: a file that cannot be
    written back stays as Hydra wrote it."""
    kept = _KEPT.pop(os.path.realpath(folder), None)
    if kept is None:
        return False
    existed, files = kept
    for name, data in files.items():
        path = folder / name
        with contextlib.suppress(OSError):
            if data is None:
                path.unlink(missing_ok=True)
            elif _read(path) != data:
                atomic_write(path, data)
    if not existed:
        with contextlib.suppress(OSError):
            folder.rmdir()
    return True
