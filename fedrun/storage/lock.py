"""Exclusive locks on files: one process per run directory, one writer of a sweep's index at a time.

Two processes writing one run directory (two terminals, a sweep re-launched while the first still runs)
would interleave their files: config.yaml describing one run and metrics.csv the other. The lock is an
``flock`` on ``<run dir>/.fedrun.lock``; the kernel releases it when the holder exits, however it exits
(SIGKILL included), so a crashed run never leaves the directory locked. On taking it, temp files of atomic
writes left in the directory by a process that died mid-write are deleted: no live writer can own them.
A lock file that is a symlink is never opened (``O_NOFOLLOW``): a lock never writes outside its folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedrun.core.errors import ResumeError
from fedrun.storage.atomic import WriteError, remove_stale_temps

LOCK_FILE = ".fedrun.lock"


class RunDirBusy(ResumeError):
    """Another process holds the run directory's lock (a one-line refusal; nothing in the directory is touched)."""


@contextmanager
def exclusive_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created when missing, never through a symlink) for the ``with``
    block. ``wait=False`` raises BlockingIOError at once when another process holds it; an OSError opening the
    file is raised as :class:`~fedrun.storage.atomic.WriteError`."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            e = OSError(errno.ELOOP, "it is a symlink; a lock is never taken through one", str(path))
        raise WriteError(path, e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (deleting it would let two processes lock two files)


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock (creating the directory) for the ``with`` block; raise :class:`RunDirBusy` when
    another process holds it, :class:`~fedrun.storage.atomic.WriteError` when the directory cannot be written."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteError(run_dir / LOCK_FILE, e) from None
    try:
        lock = exclusive_lock(run_dir / LOCK_FILE, wait=False)
        lock.__enter__()
    except BlockingIOError:
        raise RunDirBusy(
            f"{run_dir}: in use by another fedrun process (its lock {LOCK_FILE} is held); wait for it to end,"
            " or give this run another directory"
        ) from None
    try:
        remove_stale_temps(run_dir, any_pid=True)
        yield
    finally:
        lock.__exit__(None, None, None)
