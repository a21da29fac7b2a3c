"""The most memory this process can ever hold, and what sets it: the machine's RAM and swap, a cgroup's
``memory.max`` (a container's limit), or ``ulimit -v`` / ``ulimit -d``. Validation refuses a run whose
estimated need exceeds it (fedrun/config/resources.py); nothing here imports torch."""

from __future__ import annotations

import os
from pathlib import Path

GB = 1e9
CGROUP_FILES = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def machine_memory() -> int | None:
    """RAM plus swap in bytes (``/proc/meminfo``; ``sysconf`` where it is missing); None when unknown."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return sum(int(info[k].split()[0]) * 1024 for k in ("MemTotal", "SwapTotal") if k in info) or None
    except (OSError, ValueError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def cgroup_limit() -> int | None:
    """This process's cgroup memory limit in bytes, None when there is none (``max``, or a v1 'unlimited')."""
    for f in CGROUP_FILES:
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for no limit
            return int(text)
    return None


def rlimits() -> list[tuple[int, str]]:
    """The soft ``ulimit -v`` and ``ulimit -d`` limits that are set, with their names."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return []
    out = []
    for name, flag in (("RLIMIT_AS", "-v"), ("RLIMIT_DATA", "-d")):
        res = getattr(resource, name, None)
        if res is not None:
            soft, _ = resource.getrlimit(res)
            if soft != resource.RLIM_INFINITY:
                out.append((int(soft), f"`ulimit {flag}`"))
    return out


def available_memory() -> int | None:
    """The memory the machine can give now without swapping, in bytes (``MemAvailable`` of ``/proc/meminfo``), within
    :func:`memory_ceiling`; None when unknown."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        free = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, ValueError, KeyError):
        return None
    ceiling = memory_ceiling()
    return min(free, ceiling[0]) if ceiling else free


def memory_ceiling() -> tuple[int, str] | None:
    """The smallest of the limits above, in bytes, and what sets it; None when none can be read."""
    found = [
        (n, what)
        for n, what in ((machine_memory(), "this machine's RAM + swap"), (cgroup_limit(), "the cgroup's memory.max"))
        if n
    ]
    found += rlimits()
    return min(found) if found else None
