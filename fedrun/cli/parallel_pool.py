"""The worker processes of a sweep whose jobs run side by side, as the sweep's process sees them
(fedrun/cli/parallel_launch.py decides and describes; fedrun/cli/parallel_worker.py is a worker's side).

:class:`Pool` starts the workers, each in a session (process group) of its own, as this Python with this process's
``sys.path``; sends each its setup, then a unit at a time as it becomes idle; reads, without blocking, each worker's
pipe of events (a job's start, rounds and end, told to the sweep's console as fedrun's Hydra callback tells a job of
the sweep's own process) and its stdout and stderr (passed on whole lines at a time); replaces a worker that died
while units wait; and, on a signal, passes it to every worker and waits for them (:meth:`Pool.stop`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import pickle
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from fedrun.cli import sweeps
from fedrun.host.interrupts import Interrupted, deferred
from fedrun.report.sweep_console import Job
from fedrun.run.sweep_index import REFUSED_HERE

POLL = 0.2  # seconds between the sweep's looks at its workers (a signal is handled between them)
# a worker's first instruction: the sweep's sys.path (the same fedrun, the same user modules), then its main
BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from fedrun.cli.parallel_worker import main; from fedrun.host.exits import ending_process; "
    "ending_process(lambda: main(int(sys.argv[2])))"
)
FRAME = 8  # bytes of a message's length, before the message (a pickle), on a worker's stdin
STOP_S = 5.0  # after a second signal, how long the workers have to record their interrupted jobs before a kill


@dataclass
class Worker:
    """A worker process as its sweep sees it: ``state`` loading, idle or busy (``unit``: the job numbers it runs)."""

    proc: subprocess.Popen[bytes]
    events: int  # the read end of its pipe of events
    state: str = "loading"
    unit: list[int] | None = None
    ready: bool = False  # it has been idle once (it started)
    open: set[int] = field(default_factory=set)  # its output's file descriptors not yet at their end
    partial: dict[int, bytes] = field(default_factory=dict)  # the last, unfinished line of each

    def send(self, message: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.write(len(message).to_bytes(FRAME, "big") + message)
                stdin.flush()
            except OSError:  # it has ended: its end is noticed from its output
                pass

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except OSError:
                pass


def start_worker(setup: bytes) -> Worker:
    """A worker process, sent ``setup``: in a session (process group) of its own, its events on a pipe of their own."""
    read, write = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, json.dumps(sys.path), str(write)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(write,), start_new_session=True,
        )  # fmt: skip
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    worker = Worker(proc, read)
    worker.send(setup)
    return worker


class Pool:
    """The sweep's workers, its units' queue, and what the workers say (module docstring)."""

    def __init__(
        self,
        units: list[list[int]],
        workers: int,
        setup: bytes,
        sent: dict[int, dict[str, Any]],
        jobs: dict[int, tuple[DictConfig, str]],
    ) -> None:
        self.units, self.size, self.setup, self.sent, self.jobs = units, workers, setup, sent, jobs
        self.console = sweeps.active_console()
        self.workers: list[Worker] = []
        self.selector = selectors.DefaultSelector()
        self.returns: dict[int, JobReturn] = {}
        self.started: dict[int, Job] = {}
        self.stopped: list[tuple[int, dict[str, Any]]] = []  # (its unit's first job, the worker's interrupt)
        self.stopping = 0  # the signal that stops the sweep
        self.failed_starts = 0

    def serve(self) -> dict[int, JobReturn]:
        """Every unit run, each given to the next idle worker; then the workers ended."""
        pending = deque(self.units)
        for _ in range(self.size):
            self._spawn()
        while pending or any(w.unit is not None for w in self.workers):
            for w in self.workers:
                if w.state == "idle" and pending:
                    with deferred():  # the unit is the worker's once it is sent: a signal waits for both
                        w.unit, w.state = pending.popleft(), "busy"
                        w.send(self._unit(w.unit))
            if not self.workers:
                raise RuntimeError(
                    "the sweep's worker processes ended before they could run its jobs (their lines above say why);"
                    " hardware.parallel=off runs the jobs in the sweep's own process"
                )
            self._pump(POLL)
            self._reap(bool(pending))
        for w in self.workers:
            w.close_stdin()
        while self.workers:
            self._pump(POLL)
            self._reap(False)
        return self.returns

    def stop(self, interrupt: KeyboardInterrupt) -> Interrupted:
        """The sweep was interrupted: the signal passed to every worker, their ends awaited (a second signal stops
        them at once: :meth:`close`), and the interrupt to raise, naming the first job that stopped in it."""
        signum = interrupt.signum if isinstance(interrupt, Interrupted) else int(signal.SIGINT)
        self.stopping = signum
        for w in self.workers:
            w.signal(signum)
            w.close_stdin()
        while self.workers:
            self._pump(POLL)
            self._reap(False)
        stopped = Interrupted(signum)
        named = [s for s in self.stopped if s[1].get("job")]  # (a job stopped before its attempt began: no name)
        if named:
            _, first = min(named, key=lambda s: s[0])
            stopped.job = first.get("job")  # type: ignore[attr-defined]
            stopped.sweep_dir = Path(str(first.get("sweep_dir")))  # type: ignore[attr-defined]
        return stopped

    def close(self) -> None:
        """End the workers still running and let go of their pipes: after a second signal, the signal again (each
        job records that it was interrupted, as a run's second signal does, its lines no longer passed on), then,
        as after an error, a kill."""
        for w in self.workers:
            w.close_stdin()
            if self.stopping:
                w.signal(self.stopping)
        end = time.monotonic() + (STOP_S if self.stopping else 0.0)
        try:
            for w in self.workers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(timeout=max(end - time.monotonic(), 0.0))
        finally:  # (a third signal too)
            for w in self.workers:
                if w.proc.poll() is None:
                    w.proc.kill()
                w.proc.wait()
                self._release(w)
        self.workers.clear()
        self.selector.close()

    def _spawn(self) -> None:
        with deferred():  # a started worker is always in the list: a signal reaches it
            worker = start_worker(self.setup)
            self.workers.append(worker)
        for fd, what in ((worker.events, "events"), (_fd(worker.proc.stdout), "out"), (_fd(worker.proc.stderr), "err")):
            os.set_blocking(fd, False)
            worker.open.add(fd)
            self.selector.register(fd, selectors.EVENT_READ, (worker, what))

    def _unit(self, unit: list[int]) -> bytes:
        """A unit's message: its jobs' numbers and configs (:func:`portable`), their folders' names (a stack's
        record)."""
        jobs = [(n, self.sent[n]) for n in unit]
        return pickle.dumps({"jobs": jobs, "names": [Path(self.jobs[n][1]).name for n in unit]})

    def _pump(self, timeout: float) -> None:
        """What the workers said, for at most ``timeout`` seconds of waiting: their events and their lines."""
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.selector.select(timeout):
            worker, what = key.data
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            buffered = worker.partial.pop(key.fd, b"") + data
            if data:  # whole lines now, the rest with the next read
                lines, newline, worker.partial[key.fd] = buffered.rpartition(b"\n")
                buffered = lines + newline
            else:
                self.selector.unregister(key.fd)
                worker.open.discard(key.fd)
            if buffered:
                self._said(worker, what, buffered)

    def _said(self, worker: Worker, what: str, data: bytes) -> None:
        if what == "out":
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        elif what == "err":
            sys.stderr.write(data.decode(errors="replace"))
            sys.stderr.flush()
        else:
            for line in data.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:  # a worker killed mid-line
                    continue
                self._event(worker, event)

    def _event(self, worker: Worker, event: dict[str, Any]) -> None:
        kind, num = event.get("e"), event.get("num")
        if kind in ("ready", "done"):
            worker.state, worker.unit, worker.ready = "idle", None, True
        elif kind == "start" and isinstance(num, int):
            self._started(num)
        elif kind == "round" and isinstance(num, int) and self.console is not None:
            self.console.round_done(event.get("row") or {}, -(num + 1))
        elif kind == "end" and isinstance(num, int):
            self._ended(num, pickle.loads(base64.b64decode(event["ret"])), bool(event.get("refused")))
        elif kind == "interrupted":
            self.stopped.append((min(worker.unit or [0]), event))

    def _started(self, num: int) -> None:
        """Job ``num`` started in its worker: the console's start, as fedrun's callback says it."""
        if self.console is None:
            return
        cfg, folder = self.jobs[num]
        rounds = OmegaConf.select(cfg, "fl.rounds", default=None)
        job = self.console.job_started(num, Path(folder).name, rounds, Path(folder))
        job.thread = -(num + 1)  # its rounds' key (a worker's rounds come from here, not from its threads)
        self.started[num] = job

    def _ended(self, num: int, ret: JobReturn, refused: bool) -> None:
        """Job ``num`` ended in its worker, returning ``ret`` (``refused``: its attempt refused it in a folder that
        says how an earlier run ended): the console's end, as fedrun's callback says it."""
        ran = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir") if ret.hydra_cfg is not None else None
        folder = Path(ran or self.jobs[num][1])
        if refused:
            REFUSED_HERE.add(folder.absolute())
        self.returns[num] = ret
        job = self.started.pop(num, None)
        if self.console is not None and job is not None:
            self.console.job_ended(job, folder, failed=ret.status == JobStatus.FAILED)

    def _reap(self, pending: bool) -> None:
        """Workers whose process ended: the jobs it left unfinished said so, and, while units wait, a new worker in
        place of one that had started (a worker that could not start is replaced twice at most in all)."""
        for w in [w for w in self.workers if not w.open and w.proc.poll() is not None]:
            self.workers.remove(w)
            self._release(w)
            if w.unit is not None and not self.stopping:
                self._lost(w)
            self.failed_starts += not w.ready
            if pending and not self.stopping and (w.ready or self.failed_starts <= 2):
                self._spawn()

    def _release(self, w: Worker) -> None:
        for fd in list(w.open):
            self.selector.unregister(fd)
        w.open.clear()
        for f in (w.proc.stdout, w.proc.stderr):
            if f is not None:
                f.close()
        try:
            os.close(w.events)
        except OSError:
            pass

    def _lost(self, w: Worker) -> None:
        """A worker ended before its unit's jobs did (killed: the out-of-memory killer): each unfinished job said so
        in one line; its folder keeps its last checkpoint, and the same command resumes it."""
        code = w.proc.returncode
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        for num in [n for n in w.unit or [] if n not in self.returns]:
            cfg, folder = self.jobs[num]
            print(f"fedrun: job {num} [{Path(folder).name}]: its process ended ({how}) before the job did;"
                  " the same command resumes it", file=sys.stderr)  # fmt: skip
            if num not in self.started:
                self._started(num)
            self._ended(num, _lost_return(cfg, folder), False)


def _fd(stream: Any) -> int:
    return int(stream.fileno())


def _lost_return(cfg: DictConfig, folder: str) -> JobReturn:
    """The return of a job whose worker died: its folder tells how far it got (the sweep's count of failed jobs)."""
    ret = JobReturn()
    hydra_cfg = copy.deepcopy(cfg)
    with read_write(hydra_cfg.hydra.runtime), open_dict(hydra_cfg.hydra.runtime):
        hydra_cfg.hydra.runtime.output_dir = os.path.abspath(folder)
    ret.hydra_cfg, ret.overrides = hydra_cfg, list(cfg.hydra.overrides.task)
    ret.status, ret.return_value = JobStatus.COMPLETED, None
    return ret
