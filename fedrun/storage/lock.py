"""Exclusive locks on files: one process per run directory, one writer of a sweep's index at a time.

Two processes writing one run directory (two terminals, a sweep re-launched while the first still runs)
would interleave their files: config.yaml describing one run and metrics.csv the other. The lock is an
``flock`` on ``<run dir>/.fedrun.lock``; the kernel releases it when the holder exits, however it exits
(SIGKILL included), so a crashed run never leaves the directory locked. On taking it, temp files of atomic
writes left in the directory by a process that died mid-write are deleted: no live writer can own them.
A lock file that is a symlink is never opened (``O_NOFOLLOW``): a lock never writes outside its folder.

A process that cannot take a run directory's lock is refused in one line (:class:`RunDirBusy`), or, where its caller
asks (a sweep's job, whose twin in another sweep into the same directory is running it), waits for the other
process to end with it; a lock held by this very process (another open file of it) is never waited for: it could
not be released while this process waits.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable, Iterator
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


def lock_holder(path: Path) -> int | None:
    """The id of the process holding an ``flock`` on ``path`` (from Linux's ``/proc/locks``); None when it cannot be
    told (no ``/proc/locks``, a lock of another namespace, an open file description lock)."""
    try:
        st = os.stat(path, follow_symlinks=False)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].lstrip("-").isdigit():
            pid = int(fields[4])
            return pid if pid > 0 else None
    return None


def _busy(run_dir: Path) -> RunDirBusy:
    return RunDirBusy(
        f"{run_dir}: in use by another fedrun process (its lock {LOCK_FILE} is held); wait for it to end,"
        " or give this run another directory"
    )


@contextmanager
def run_dir_lock(run_dir: Path, wait: Callable[[int], None] | None = None) -> Iterator[bool]:
    """Hold ``run_dir``'s lock (creating the directory) for the ``with`` block, which gets whether this call created
    the lock file. Raise :class:`RunDirBusy` when another process holds it, :class:`~fedrun.storage.atomic.WriteError`
    when the directory cannot be written. With ``wait``, a lock held by another live process (:func:`lock_holder`)
    is waited for instead: ``wait(pid)`` is called first (to say so)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteError(run_dir / LOCK_FILE, e) from None
    made = not os.path.lexists(run_dir / LOCK_FILE)
    try:
        lock = exclusive_lock(run_dir / LOCK_FILE, wait=False)
        lock.__enter__()
    except BlockingIOError:
        holder = lock_holder(run_dir / LOCK_FILE) if wait is not None else None
        if wait is None or holder is None or holder == os.getpid():
            raise _busy(run_dir) from None
        wait(holder)
        lock = exclusive_lock(run_dir / LOCK_FILE, wait=True)
        lock.__enter__()
        made = False
    try:
        remove_stale_temps(run_dir, any_pid=True)
        yield made
    finally:
        lock.__exit__(None, None, None)
