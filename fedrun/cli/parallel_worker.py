"""A worker process of a sweep whose jobs run side by side (fedrun/cli/parallel_launch.py, which starts it).

On its stdin: first the sweep's setup (the launcher's task and Hydra context, its runs' thread count and the
``parallel`` record of their summary.json), then one unit at a time (a lone job's or a stack's composed configs),
each as an 8-byte length and a pickle. Each unit runs as the basic launcher runs it in the sweep's own process
(fedrun/cli/stack_launch.py: ``run_job``; a stack's jobs in turns), under a quiet sweep console of this process, so
that each job's lines are those of a job of the basic launcher's sweep. On its pipe of events (one JSON object a
line) it tells the sweep: ``ready`` (for a unit), ``start``, ``round`` (an evaluated round's number and accuracy)
and ``end`` (the job's ``JobReturn``, pickled) of each job, ``done`` (the unit), ``interrupted`` (a signal stopped a
job: the job's label and the sweep's folder, for the sweep's one line).

Signals: while it loads and between units, a signal ends it at once and without a word (nothing of a job has
started; the sweep's line says what stopped); during a unit, fedrun's routing (fedrun/host/interrupts.py) stops the
job as a run stops, and the worker exits with 128 + the signal's number. When its stdin ends because the sweep's
process died (SIGKILL), the worker stops its job as on SIGTERM, its output going nowhere.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, SimpleNamespace
from typing import Any

FRAME = 8  # bytes of a message's length on stdin (fedrun/cli/parallel_launch.py's FRAME)
ORPHAN_WAIT_S = 2.0  # how long an ended stdin is checked for the sweep's death (its process may not be reaped yet)


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(128 + signum)


class Events:
    """The worker's pipe of events: one JSON object a line, written whole (a lock; a signal waits for the line);
    ``owner``: the job each thread runs (a round's record names its thread)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.lock = fd, threading.Lock()
        self.owner: dict[int, int] = {}

    def send(self, kind: str, **fields: Any) -> None:
        from fedrun.host.interrupts import deferred

        data = (json.dumps({"e": kind, **fields}, default=str) + "\n").encode()
        main = threading.current_thread() is threading.main_thread()
        with deferred() if main else contextlib.nullcontext(), self.lock, contextlib.suppress(OSError):
            while data:
                data = data[os.write(self.fd, data) :]


class Inbox:
    """The worker's stdin, read in a thread of its own: each message (its bytes) for :meth:`get`, None at its end.
    An end while a unit runs (``busy``) that comes with the sweep's process gone stops the job as SIGTERM does."""

    def __init__(self) -> None:
        self.messages: queue.Queue[bytes | None] = queue.Queue()
        self.busy = False
        self.parent = os.getppid()
        threading.Thread(target=self._read, name="fedrun-worker-inbox", daemon=True).start()

    def get(self) -> bytes | None:
        return self.messages.get()

    def _read(self) -> None:
        stream = sys.stdin.buffer
        while len(head := stream.read(FRAME)) == FRAME:
            body = stream.read(int.from_bytes(head, "big"))
            self.messages.put(body)
        if self.busy and self._orphaned():
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)  # its sweep's pipes are gone: what the job says goes nowhere
            os.dup2(devnull, 2)
            os.kill(os.getpid(), signal.SIGTERM)
        self.messages.put(None)

    def _orphaned(self) -> bool:
        end = time.monotonic() + ORPHAN_WAIT_S
        while time.monotonic() < end:
            if os.getppid() != self.parent:
                return True
            time.sleep(0.02)
        return False


def main(events_fd: int) -> None:
    """The worker (module docstring): ``events_fd``, its pipe of events."""
    from fedrun.host.interrupts import handled_signals

    for s in handled_signals():  # (after that module read what this process inherited as ignored)
        signal.signal(s, _exit_quietly)
    events, inbox = Events(events_fd), Inbox()
    from fedrun.cli import main as cli

    first = inbox.get()
    if first is None:
        return
    setup = pickle.loads(first)
    launcher = _prepare(setup, cli)
    events.send("ready")
    _serve(launcher, setup, events, inbox)


def _prepare(setup: dict[str, Any], cli: Any) -> SimpleNamespace:
    """This process made a worker of the sweep ``setup`` describes: Hydra's globals, job name and logging as the
    launcher has them, the threads and record of its runs; the launcher's task and context."""
    import importlib
    import inspect

    from hydra.core.utils import JobRuntime, configure_log, setup_globals
    from hydra.types import HydraContext
    from omegaconf import OmegaConf

    from fedrun.host.allocator import tune_glibc_malloc
    from fedrun.host.threads import assign_worker

    del cli  # imported for what its import does: the resolvers, the schemas, the YAML loader (fedrun/cli/main.py)
    tune_glibc_malloc()
    setup_globals()
    JobRuntime.instance().set("name", setup["name"])
    verbose = OmegaConf.create(setup["verbose"]) if isinstance(setup["verbose"], list) else setup["verbose"]
    configure_log(OmegaConf.create(setup["logging"]), verbose)
    assign_worker(int(setup["threads"]), dict(setup["record"]))
    module, name = setup["task"]
    task = inspect.unwrap(getattr(importlib.import_module(module), name))
    return SimpleNamespace(hydra_context=HydraContext(None, setup["callbacks"]), task_function=task)  # type: ignore[arg-type]


def _serve(launcher: SimpleNamespace, setup: dict[str, Any], events: Events, inbox: Inbox) -> None:
    """Run each unit that comes, until stdin ends; a signal that stopped a job ends the worker (module docstring)."""
    from fedrun.cli import sweeps
    from fedrun.host.interrupts import exit_code, interrupts, signal_name
    from fedrun.report.sweep_console import SweepConsole
    from fedrun.run.attempt import SWEEP_AFTER

    rounds = _Rounds(events)
    logging.getLogger("fedrun").addHandler(rounds)
    with sweeps.watching(SweepConsole(setup["sweep_dir"], live=False, quiet=True), announce=False):
        while (message := inbox.get()) is not None:
            unit = pickle.loads(message)
            inbox.busy = True
            try:
                with interrupts("", SWEEP_AFTER):
                    _run_unit(launcher, unit, events)
            except KeyboardInterrupt as e:
                where = {"job": getattr(e, "job", None), "sweep_dir": str(getattr(e, "sweep_dir", ""))}
                events.send("interrupted", signal=signal_name(e), **where)
                sys.stdout.flush()
                os._exit(exit_code(e))
            inbox.busy = False
            events.send("done")


def _run_unit(launcher: SimpleNamespace, unit: dict[str, Any], events: Events) -> None:
    """A unit's jobs as the basic launcher's sweep runs them: one job, or a stack's in turns."""
    from fedrun.cli import stack_launch
    from fedrun.cli.parallel_launch import rebuild

    jobs = [_job(launcher, num, rebuild(job), events) for num, job in unit["jobs"]]
    if len(jobs) == 1:
        jobs[0]()
    else:
        stack_launch.run_together(jobs, list(unit["names"]))


def _job(launcher: SimpleNamespace, num: int, cfg: Any, events: Events) -> Callable[[], Any]:
    """Job ``num`` through ``run_job``, its start and end told to the sweep (its rounds by the thread it runs in)."""
    from fedrun.cli import stack_launch
    from fedrun.run.sweep_index import REFUSED_HERE

    def go() -> Any:
        events.owner[threading.get_ident()] = num
        events.send("start", num=num)
        ret = stack_launch.run_one(launcher, cfg)
        folder = ret.hydra_cfg.hydra.runtime.output_dir if ret.hydra_cfg is not None else ""
        refused = bool(folder) and os.path.abspath(folder) in {str(p) for p in REFUSED_HERE}
        events.send("end", num=num, ret=_returned(ret), refused=refused)
        return ret

    return go


def _returned(ret: Any) -> str:
    """``ret`` (a JobReturn) pickled for the sweep, in base64; a failed job's error that does not survive pickling
    replaced by a RuntimeError that names the job."""
    try:
        data = pickle.dumps(ret)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - an exception whose class takes other arguments than its args
        ret.return_value = RuntimeError(f"job {ret.hydra_cfg.hydra.job.num}: failed (its error could not be passed on)")
        data = pickle.dumps(ret)
    return base64.b64encode(data).decode()


class _Rounds(logging.Handler):
    """A handler of the ``fedrun`` logger: each evaluated round's number and accuracy (the record's row,
    fedrun/run/recorder.py) sent to the sweep for its live table."""

    def __init__(self, events: Events) -> None:
        from fedrun.storage.rundir import ROW_RECORD

        super().__init__(logging.INFO)
        self.events, self.key = events, ROW_RECORD

    def emit(self, record: logging.LogRecord) -> None:
        row, num = getattr(record, self.key, None), self.events.owner.get(record.thread or 0)
        if isinstance(row, dict) and num is not None:
            self.events.send("round", num=num, row={"round": row.get("round"), "test_acc": row.get("test_acc")})
