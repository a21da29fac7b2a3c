"""Ctrl-C, SIGTERM and SIGHUP end a run the same way: status ``interrupted``, the last checkpoint kept.

Inside :func:`interrupts` (a run's whole life, start-up included) the first of these signals raises
:class:`Interrupted`, a KeyboardInterrupt, in the main thread: the round loop stops where it is, the run
writes its summary and exits with 128 + the signal's number (a sweep stops). A second signal while the run
is finishing up prints one line and exits at once with that code: atomic writes leave no half file, and
re-running the command resumes from the last checkpoint.

No exception is raised while Python imports a module (fedrun imports torch and the methods' code lazily, in
the first second of a run, and torch imports more of itself in the first rounds): one inside ``import torch``
left a partially initialised module, blamed on the input, and crashed the interpreter. Inside
:func:`interrupts` the first signal then waits until the import is done (a watcher thread re-sends it to the
main thread once no import is under way), so the run ends as above; a second signal during the import prints
one line and ends the process at once (``os._exit``, 128 + its number). While the command's own modules load
(:func:`loading`), before anything is written, any signal does the latter.

Inside :func:`deferred` (the few statements that make a finished round the run's state) a first signal waits
until the block ends, so the state a run saves when interrupted is always that of a whole round.

A signal that was ignored when the process started stays ignored, as POSIX tools expect: ``nohup fedrun ...``
ignores SIGHUP, so the run goes on after logout; a job started with ``&`` by a non-interactive shell (a script)
ignores SIGINT (and SIGQUIT), so a Ctrl-C meant for the script's foreground leaves it running. SIGTERM, which
neither ignores, still interrupts such a run as above.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
# Read when this module is first imported, before fedrun installs any handler: what the process inherited.
IGNORED_AT_START = frozenset(int(s) for s in SIGNALS if signal.getsignal(s) == signal.SIG_IGN)
_IMPORTING = "<frozen importlib._bootstrap"
# inside :func:`deferred`: its depth, and the first signal that arrived there (re-raised when the block ends)
_DEFER: dict[str, int] = {"depth": 0, "pending": 0}
# the handlers a `loading(handover=True)` replaced, put back by the next `interrupts` when it ends
_HANDOVER: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows which signal raised it."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return type(self), (self.signum,)


def handled_signals() -> tuple[int, ...]:
    """The signals fedrun routes: SIGINT, SIGTERM and SIGHUP, less those the process inherited as ignored."""
    return tuple(int(s) for s in SIGNALS if int(s) not in IGNORED_AT_START)


def signal_name(e: BaseException) -> str:
    """``SIGTERM``... for an :class:`Interrupted`; ``SIGINT`` (Ctrl-C) for a plain KeyboardInterrupt."""
    return signal.Signals(e.signum).name if isinstance(e, Interrupted) else "SIGINT"


def exit_code(e: BaseException) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + (e.signum if isinstance(e, Interrupted) else int(signal.SIGINT))


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a signal handler's) is inside Python's import machinery."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORTING):
            return True
        frame = frame.f_back
    return False


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr may be gone with the terminal (SIGHUP)
        print(line, file=sys.stderr, flush=True)


@contextmanager
def interrupts(
    label: str,
    after: str | Callable[[], str] = "",
    on_exit: Callable[[int], None] | None = None,
) -> Iterator[None]:
    """Route the :func:`handled_signals` as described in the module docstring for the ``with`` block (in the
    main thread only: elsewhere Python cannot install handlers, and the block runs unchanged).

    ``label`` names what is stopped (a run dir, a sweep's job; none: the command); ``after`` says what to do
    next, in the line printed when a second signal ends the process (a callable is asked then, so that it can say
    what is on disk at that moment); ``on_exit(signum)`` is called then, before the process ends, to record the
    interruption (its errors are ignored).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []
    held_back: list[int] = []  # a first signal that arrived inside an import, until it is re-sent
    resent = threading.Event()  # set by the watcher just before it re-sends: that delivery is not a new signal
    done = threading.Event()
    main_id = threading.main_thread().ident

    def handler(signum: int, frame: FrameType | None) -> None:
        if resent.is_set() and held_back and signum == held_back[-1]:
            resent.clear()
            held_back.clear()
        else:
            seen.append(signum)
        in_import = importing(frame)
        if len(seen) == 1:
            if _DEFER["depth"] and not in_import:  # raised when the deferred block ends
                _DEFER["pending"] = signum
                return
            if not in_import:
                raise Interrupted(signum)
            held_back.append(signum)
            args = (signum, main_id, done, resent)
            threading.Thread(target=_resend_after_import, args=args, name="fedrun-interrupt", daemon=True).start()
            return
        where = f"{label}: " if label else ""
        then = after if isinstance(after, str) else _asked(after)
        then = f"; {then}" if then else ""
        _say(f"fedrun: {where}{signal.Signals(signum).name} again: stopping now, without finishing up{then}")
        if on_exit is not None:
            with contextlib.suppress(Exception):
                on_exit(signum)
        if not in_import:
            raise SystemExit(128 + signum)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os._exit(128 + signum)  # no exception may surface inside an import: it would leave the module half made

    try:
        with _handling(handled_signals(), handler):
            yield
    finally:
        done.set()
        _DEFER["pending"] = 0
    if held_back:  # the block ended before the watcher re-sent the signal
        raise Interrupted(held_back[-1])


def _asked(after: Callable[[], str]) -> str:
    """``after()``, or nothing when it fails (it runs inside a signal handler)."""
    try:
        return after()
    except Exception:  # noqa: BLE001
        return ""


def _resend_after_import(signum: int, main_id: int | None, done: threading.Event, resent: threading.Event) -> None:
    """The watcher of a first signal that arrived inside an import: once the main thread is out of the import
    machinery (and the block still runs), send the signal to it again (``resent`` marks that delivery)."""
    while not done.wait(0.005):
        frame = sys._current_frames().get(main_id or 0)
        if frame is None or not importing(frame):
            if not done.is_set() and main_id is not None:
                resent.set()
                signal.pthread_kill(main_id, signum)
            return


@contextmanager
def deferred() -> Iterator[None]:
    """A block that a first signal does not cut in two: inside :func:`interrupts` it raises :class:`Interrupted` when
    the block ends instead (a second signal still ends the process at once). Keep it to a few statements."""
    _DEFER["depth"] += 1
    try:
        yield
    except BaseException:
        _DEFER["pending"] = 0  # the block failed: its error goes on (a signal that came meanwhile is dropped)
        raise
    finally:
        _DEFER["depth"] -= 1
    if not _DEFER["depth"] and _DEFER["pending"]:
        signum, _DEFER["pending"] = _DEFER["pending"], 0
        raise Interrupted(signum)


@contextmanager
def loading(after: str, handover: bool = False) -> Iterator[None]:
    """While the command's modules load (before :func:`interrupts` can help): any of the :func:`handled_signals`
    prints ``fedrun: stopped by SIG...; <after>`` and ends the process with 128 + its number at once. Nothing
    has been written yet, and no exception may surface inside an import (see the module docstring).

    With ``handover`` the handler stays after the block, until the next :func:`interrupts` replaces it (and puts
    back, when it ends, what was there before this block): no moment between the two is left to the default
    action, which killed the process without a line (a SIGTERM 1.5 s in, on a loaded machine)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        _say(f"fedrun: stopped by {signal.Signals(signum).name}; {after}")
        os._exit(128 + signum)

    signums = handled_signals() if threading.current_thread() is threading.main_thread() else ()
    if not handover:
        with _handling(signums, handler):
            yield
        return
    for s in signums:
        _HANDOVER.setdefault(s, signal.getsignal(s))
        signal.signal(s, handler)
    yield


@contextmanager
def _handling(signums: Iterable[int], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for each of ``signums`` inside the block; the handlers before it are put back after it."""
    previous = {s: _HANDOVER.pop(s, signal.getsignal(s)) for s in signums}
    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
