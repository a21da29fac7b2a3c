"""Signal dispositions for the tests that send SIGINT, SIGTERM or SIGHUP: the process that gets the signal starts
as a command typed at a terminal does (all three at their defaults), whatever the test process inherited.

fedrun leaves a signal alone that was ignored when its process started (fedrun/host/interrupts.py, on purpose:
``nohup fedrun ...`` survives logout). ``nohup make test > log 2>&1 &`` from a script starts pytest, its xdist
workers and every child with SIGHUP (nohup) and SIGINT (a non-interactive shell's ``&``) ignored, so a test's
child would never see the signal the test sends and would sit at its pause until its 600 s limit.

- :func:`foreground` is the ``preexec_fn`` of a child that a test signals;
- :func:`inheriting` that of a child that must start with some signals ignored (the nohup cases), the others at
  their defaults;
- the ``foreground_signals`` fixture (tests/conftest.py) does the same for a test that signals its own process:
  fedrun routes every signal, whatever the worker inherited.

tests/test_background_signals.py checks that every test file sending one of these signals uses them, and runs
one test of each kind with SIGINT and SIGHUP ignored, as ``nohup make test &`` starts it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

WATCHED = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def foreground() -> None:
    """In a child, before exec: SIGINT, SIGTERM and SIGHUP at their defaults."""
    for s in WATCHED:
        signal.signal(s, signal.SIG_DFL)


def inheriting(ignored: tuple[int, ...]) -> Callable[[], None]:
    """A ``preexec_fn``: :func:`foreground`, then ``ignored`` ignored, as nohup (SIGHUP) and a script's ``&``
    (SIGINT) leave them before exec."""

    def preexec() -> None:
        foreground()
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)

    return preexec
