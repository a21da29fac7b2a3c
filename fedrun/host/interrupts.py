"""Ctrl-C, SIGTERM and SIGHUP end a run the same way: status ``interrupted``, the last checkpoint kept.

Inside :func:`interrupts` (a run's whole life, start-up included) the first of these signals raises
:class:`Interrupted`, a KeyboardInterrupt, in the main thread: the round loop stops where it is, the run
writes its summary and exits with 128 + the signal's number (a sweep stops). A second signal while the run
is finishing up prints one line and exits at once with that code: atomic writes leave no half file, and
re-running the command resumes from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows which signal raised it."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return type(self), (self.signum,)


def signal_name(e: BaseException) -> str:
    """``SIGTERM``... for an :class:`Interrupted`; ``SIGINT`` (Ctrl-C) for a plain KeyboardInterrupt."""
    return signal.Signals(e.signum).name if isinstance(e, Interrupted) else "SIGINT"


def exit_code(e: BaseException) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + (e.signum if isinstance(e, Interrupted) else int(signal.SIGINT))


@contextmanager
def interrupts(label: str) -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP as described in the module docstring for the ``with`` block (in the main
    thread only: elsewhere Python cannot install handlers, and the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise Interrupted(signum)
        with contextlib.suppress(OSError, ValueError):  # stderr may be gone with the terminal (SIGHUP)
            name = signal.Signals(signum).name
            print(
                f"fedrun: {label}: {name} again: stopping now, without finishing up; re-run the command to resume"
                " from the last checkpoint",
                file=sys.stderr,
                flush=True,
            )
        raise SystemExit(128 + signum)

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
