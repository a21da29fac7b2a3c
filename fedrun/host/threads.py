"""How many torch threads a run uses (``hardware.threads``; 0 = chosen by measuring the CPU at start).

torch's OpenMP workers spin-wait for each other: on a CPU whose cores are busy with other work, a second
thread makes a small model's step many times slower (the README's Threads section has the numbers), while on
an idle CPU more threads are faster. So ``hardware.threads=0`` samples the CPU's busy time for a fraction of a
second and takes one thread per idle core (at least one): all cores on an idle machine, one on a busy one.
The choice is made once per process and recorded in summary.json; a resumed run keeps its recorded count,
because the thread count changes results in the last digits.

A worker process of a sweep whose jobs run side by side (``hardware.parallel``, fedrun/cli/parallel_launch.py) is
given its share instead (:func:`assign_worker`: one core), and each of its runs records the arrangement.
"""

from __future__ import annotations

import os
import time
from typing import Any

THREADS_PER_CORE = 8  # hardware.threads above this many per CPU (and above 64) only oversubscribes the cores
_CHOICE: dict[str, Any] = {}  # once per process: a sweep's jobs in one process share the measurement
_WORKER: dict[str, Any] = {}  # a side-by-side sweep's worker process: its runs' summary.json ``parallel`` record


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def max_threads() -> int:
    """The most torch threads a run may ask for: :data:`THREADS_PER_CORE` per CPU of the machine, at least 64.
    Each thread reserves its stack: 100,000 of them ended a run in a bare ``MemoryError``."""
    return max(64, THREADS_PER_CORE * (os.cpu_count() or 1))


def busy_cores(sample_s: float = 0.3) -> float:
    """Cores kept busy by other processes, sampled over ``sample_s`` seconds from /proc/stat (this process sleeps
    meanwhile); the 1-minute load average where /proc/stat is missing."""
    try:
        a = _cpu_times()
        time.sleep(sample_s)
        b = _cpu_times()
    except OSError:
        return float(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0
    total, idle = b[0] - a[0], b[1] - a[1]
    cpus = os.cpu_count() or 1
    return cpus * (total - idle) / total if total > 0 else 0.0


def _cpu_times() -> tuple[int, int]:
    """(all jiffies, idle + iowait jiffies) summed over the machine's CPUs."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


def choose_threads(cores: int, busy: float) -> int:
    """One thread per idle core, at least one: ``round(cores - busy)`` clamped to [1, cores]."""
    return max(1, min(cores, int(cores - busy + 0.5)))


def measured() -> dict[str, Any]:
    """This process's measurement of the CPU, made once (``threads``: one per idle core, ``cores``, ``busy_cores``;
    a worker's share where :func:`assign_worker` gave one)."""
    if not _CHOICE:
        cores, busy = usable_cores(), busy_cores()
        _CHOICE.update(threads=choose_threads(cores, busy), cores=cores, busy_cores=round(busy, 2))
    return _CHOICE


def assign_worker(threads: int, record: dict[str, Any]) -> None:
    """This process is a worker of a sweep whose jobs run side by side: its runs of ``hardware.threads=0`` take
    ``threads`` (its share of the idle cores) instead of measuring, and every run records ``record`` (how many
    workers, chosen how) as summary.json's ``parallel``."""
    _CHOICE.clear()
    _CHOICE.update(threads=threads, selection=f"side by side: {threads} per process of {record.get('workers')}")
    _WORKER.clear()
    _WORKER.update(record)


def apply_threads(configured: int, pinned: int | None = None) -> dict[str, Any]:
    """Set torch's intra-op threads: ``configured`` when > 0, else ``pinned`` (the count a resumed run recorded),
    else :func:`choose_threads` on a measurement. Returns what summary.json records."""
    import torch  # here: validation asks max_threads() without importing torch

    worker = {"parallel": dict(_WORKER)} if _WORKER else {}
    if configured > 0 or pinned:
        n = configured if configured > 0 else int(pinned or 1)
        torch.set_num_threads(n)
        why = "configured" if configured > 0 else "kept from the resumed run"
        return {"threads": n, "threads_selection": why, **worker}
    choice = measured()
    torch.set_num_threads(choice["threads"])
    why = choice.get("selection") or f"measured: {choice['busy_cores']} of {choice['cores']} cores busy"
    return {"threads": choice["threads"], "threads_selection": why, **worker}
