"""Memory limits too small for any run, refused in one line before torch is imported.

Under ``ulimit -v 600M`` importing torch aborted the process in C++ (``std::bad_alloc``, signal 6); under
300M an ImportError ended it with a traceback. ``ulimit -v`` counts address space, which is not what ``top``
shows as memory in use: importing torch maps about 640 MiB, and a smoke run (``experiment=smoke``) peaks at
about 880 MiB of it (measured on Linux, x86-64, CPU); ``ulimit -d`` counts private writable memory. A limit
below what a smoke run needs is refused (:data:`LIMITS`); a larger run that hits a larger limit fails in
one line (``job failed: MemoryError ...``, exit 1), its traceback in ``error.log``.
"""

from __future__ import annotations

import sys

MiB = 1 << 20
# (resource, ulimit flag, what it limits, the least a run needs: a smoke run's need (measured), rounded up)
LIMITS = (
    ("RLIMIT_AS", "-v", "virtual memory", 1024 * MiB),  # 800 MiB failed, 880 MiB ran; torch alone maps ~640
    ("RLIMIT_DATA", "-d", "data segment size", 512 * MiB),  # 400 MiB failed, 490 MiB ran
)


def memory_limit_error() -> str | None:
    """One line naming a memory limit of this process below what the smallest run needs, and that need;
    None if there is none."""
    try:
        import resource
    except ImportError:  # not on POSIX: no such limits
        return None
    for name, flag, what, need in LIMITS:
        res = getattr(resource, name, None)
        if res is None:
            continue
        soft, _ = resource.getrlimit(res)
        if soft != resource.RLIM_INFINITY and soft < need:
            return (
                f"memory limit: `ulimit {flag}` ({what}) is {soft // MiB} MiB; a fedrun run needs at least"
                f" {need // MiB} MiB of it (a smoke run; larger data and models need more); valid: `ulimit {flag}"
                f" unlimited` or at least `ulimit {flag} {need // 1024}`"
            )
    return None


def refuse_small_memory_limits(exit_code: int = 2) -> None:
    """Print :func:`memory_limit_error`'s line and exit with ``exit_code`` (bad input) if there is one."""
    message = memory_limit_error()
    if message is not None:
        print(f"fedrun: error: {message}", file=sys.stderr)
        sys.exit(exit_code)
