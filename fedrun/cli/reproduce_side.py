"""A ``-smoke`` target's commands side by side on idle cores (``fedrun-reproduce run TARGET --smoke --parallel``).

fedrun/cli/reproduce_sweep.py runs a target's ``fedrun -m`` commands in one process. A ``-smoke`` job lasts a tenth
of a second, so composing its config, validating it and writing its records are most of its cost: Python, on one
core. Here this process, which has imported fedrun and composed the presets, forks workers (one per idle core, at
most one per command: :func:`choose`). Each takes the next command from a queue (a pipe of command numbers, all
written before the first fork) and runs it as reproduce_sweep does, into the same folders, with the same job
numbers and lines; a job's metrics depend on its config and seed only, so they equal the in-process run's
(tests/cli/test_reproduce_side.py). A command is the unit: its jobs share a sweep folder and its
``index.yaml``, which one process writes at a time.

Forked, not started afresh: a worker begins at once with all of this imported and the YAML parsed (a new Python
would pay the 1.5 s of imports again); this process has not trained, so no torch thread pool is inherited. A stack
trains in one process, so where a job may stack (an engine other than the ``-smoke`` shrink's sequential one) the
target runs in this process. The workers run in a process group of their own: a signal to this process (Ctrl-C
at the terminal) is passed to each of them once; each stops its job as a sweep in one process does (its last
round kept), and the command ends with 128 + the signal's number. Should this process die (SIGKILL), each worker
stops its job as on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from types import FrameType
from typing import Any

from fedrun.cli.parallel_launch import WORKER_THREADS
from fedrun.cli.reproduce_sweep import common_root, expand, run_commands, split_command
from fedrun.host.interrupts import Interrupted, exit_code, handled_signals
from fedrun.host.threads import assign_worker, measured
from fedrun.report.sweep_console import job_numbers

ITEM = 4  # bytes of a command's number on the queue
PIPE_BYTES = 65536  # what a pipe holds before its writer waits (Linux's default): the queue is written whole
FAILED_MAX = 100  # a worker's exit code: the commands that failed, at most this (128 and over: a signal)
CRASHED = FAILED_MAX + 1  # a worker's exit code: an error past fedrun's own (its traceback on stderr)


def choose(asked: str, commands: list[list[str]]) -> tuple[int, str]:
    """How many processes run ``commands`` (``fedrun -m`` argument lists), and why: ``off`` one (this one); ``N``
    at most N; ``auto`` one per idle core (fedrun/host/threads.py's measurement); never more than the commands,
    and one where a job may stack (its last ``hardware.engine`` is not ``sequential``: a stack is one process's)."""
    engines = [
        next((a.split("=", 1)[1] for a in reversed(c) if a.startswith("hardware.engine=")), "") for c in commands
    ]
    if asked == "off":
        return 1, "--parallel off"
    if any(engine != "sequential" for engine in engines):
        return 1, "jobs that may stack train in one process"
    if asked == "auto":
        cpu = measured()
        idle = int(cpu["threads"])
        return min(idle, len(commands)), f"auto: {idle} of {cpu.get('cores', '?')} cores idle"
    return min(int(asked), len(commands)), f"--parallel {asked}"


def job_starts(commands: list[list[str]]) -> tuple[list[int], int]:
    """Each command's first job number and the count of jobs in all, as one process numbers them; a command whose
    overrides do not expand counts none (its worker prints why, as one process would)."""
    starts, count = [], 0
    for args in commands:
        starts.append(count)
        try:
            count += len(expand(split_command(args)[1]))
        except Exception:  # noqa: BLE001 - said by the worker that runs it
            pass
    return starts, count


@dataclass
class Work:
    """What every worker is handed: the commands, each one's first job number and the count of all jobs, the read
    ends of the queue and of this process's life line (its end: this process died), and the threads and record of
    its runs (fedrun/host/threads.py's :func:`assign_worker`)."""

    commands: list[list[str]]
    starts: list[int]
    total: int
    queue: int
    life: int
    threads: int
    record: dict[str, Any]


def run_side_by_side(commands: list[list[str]], workers: int, why: str) -> int:
    """Run ``commands`` in ``workers`` forked processes (module docstring); the number of commands that failed, as
    :func:`run_commands` counts them. A signal ends it with the :class:`Interrupted` of the first signal, once the
    workers have stopped."""
    starts, total = job_starts(commands)
    if len(commands) * ITEM > PIPE_BYTES:
        return run_commands(commands)
    print(f"sweep of {total} jobs in {common_root([split_command(c)[0] for c in commands])}")
    print(f"side by side: commands {job_numbers(list(range(len(commands))))} run in {workers} processes ({why})")
    queue, write = os.pipe()
    os.write(write, b"".join(i.to_bytes(ITEM, "big") for i in range(len(commands))))
    os.close(write)
    life, alive = os.pipe()  # this process holds ``alive`` open until it ends
    sys.stdout.flush()
    sys.stderr.flush()
    record = {"workers": workers, "selection": why}
    work = Work(commands, starts, total, queue, life, WORKER_THREADS, record)  # one idle core each, as fedrun -m's
    pids = [_fork(work, alive) for _ in range(workers)]
    for fd in (queue, life):
        os.close(fd)
    try:
        return wait_forwarding(pids)
    finally:
        os.close(alive)


def _fork(work: Work, alive: int) -> int:
    """A worker: the commands it takes from the queue, one at a time, until none is left; its exit code says how
    many failed (or the signal that stopped it). Should this process die, the worker stops its job as on SIGTERM
    (:func:`_watch`)."""
    pid = os.fork()
    if pid:
        return pid
    code = CRASHED
    try:
        os.close(alive)
        os.setpgid(0, 0)
        assign_worker(work.threads, work.record)
        threading.Thread(target=_watch, args=(work.life,), name="fedrun-parent-watch", daemon=True).start()
        failed = 0
        while len(item := os.read(work.queue, ITEM)) == ITEM:
            i = int.from_bytes(item, "big")
            failed += run_commands([work.commands[i]], first=[work.starts[i]], total=work.total)
        code = min(failed, FAILED_MAX)
    except KeyboardInterrupt as e:
        code = exit_code(e)
    except BaseException:  # noqa: BLE001 - a worker never returns into its parent's code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _watch(life: int) -> None:
    """A worker's thread: when the life line ends (the process that forked it died, SIGKILL), what the worker says
    goes nowhere (the pipes it wrote to may be gone) and it stops its job as on SIGTERM, keeping its last round."""
    os.read(life, 1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.kill(os.getpid(), signal.SIGTERM)


def wait_forwarding(pids: list[int], what: str = "a worker") -> int:
    """Wait for the child processes ``pids`` (each in a process group of its own), passing each signal this process
    gets on to those still running; the sum of their exit codes up to :data:`FAILED_MAX` (a worker's: the commands
    that failed; a ``fedrun -m``'s: 1 or 2 when it failed), one more for each that died. A signal ends it with the
    :class:`Interrupted` of the first, once they have all ended."""
    pending, stopped = set(pids), []

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopped.append(signum)
        for pid in pending:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    before = {s: signal.signal(s, forward) for s in handled_signals()}
    failed = 0
    try:
        for pid in pids:
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            pending.discard(pid)
            if code < 0 or code == CRASHED:  # killed, or an error past fedrun's (its traceback is above)
                print(f"fedrun-reproduce: {what} ended ({_how(code)}); a rerun resumes its jobs", file=sys.stderr)
            failed += code if 0 <= code <= FAILED_MAX else 0 if code >= 128 else 1
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if stopped:
        raise Interrupted(stopped[0])
    return failed


def _how(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
