"""Jobs that take turns: several callables run in threads of their own, one at a time, each pausing at
:meth:`Turns.park` with a request until every job still running has paused or ended; then the calling thread serves
all the paused requests in one call (a stacked sweep's jobs: one vectorised training of their cohorts,
fedrun/engines/stacked.py) and the jobs go on, one at a time again, with their answers.

One job runs at a time, always to its next pause or its end, so the jobs share the process as if they ran one after
another: torch's global generator, the loggers, Hydra's current config, the working directory are each job's own
while it runs. Signals reach the serving thread (the main thread): the first ends every job at its next pause, by
raising it there (a run then saves its last finished round, as on Ctrl-C); a job that ends by an interrupt of its own
(one that arrived inside a job's deferred block) does the same to the others. A second signal is the process's:
the handler of fedrun/host/interrupts.py ends it at once, and the job threads (daemons) with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

POLL = 0.1  # seconds between the serving thread's checks while it waits (a signal is handled between them)


class _State(Enum):
    READY = "ready"  # it may run: it has not started, or its request was answered
    RUNNING = "running"
    PARKED = "parked"  # it waits at park() with a request
    DONE = "done"


@dataclass
class Ended:
    """How a job ended: its return value, or the exception that ended it."""

    value: Any = None
    error: BaseException | None = None


class Turns:
    """Run jobs in turns (module docstring); ``serve(requests) -> answers`` answers the paused jobs' requests (one
    answer each, in order; an exception as an answer is raised in its job)."""

    def __init__(self, serve: Callable[[list[Any]], list[Any]]) -> None:
        self.serve = serve
        self.cv = threading.Condition()
        self.states: list[_State] = []
        self.requests: list[Any] = []
        self.answers: list[Any] = []
        self.stop: BaseException | None = None  # the interrupt that ends every job at its next pause
        self._local = threading.local()

    def run(self, jobs: Sequence[Callable[[], Any]]) -> list[Ended]:
        """Run ``jobs`` in turns until every one has ended; how each ended, in order. A second signal (SystemExit,
        from the handler) leaves at once."""
        n = len(jobs)
        self.states, self.requests, self.answers = [_State.READY] * n, [None] * n, [None] * n
        ended = [Ended() for _ in jobs]
        for i, job in enumerate(jobs):
            threading.Thread(target=self._job, args=(i, job, ended[i]), name=f"fedrun-stack-{i}", daemon=True).start()
        while True:
            try:
                if not self._step():
                    return ended
            except KeyboardInterrupt as e:  # the first signal: every job ends at its next pause
                self.stop = self.stop or e

    def _step(self) -> bool:
        """Give each ready job its turn (first letting a job that an interrupt left running reach its pause), then
        serve the parked ones; False once every job has ended."""
        for i in range(len(self.states)):
            if self.states[i] is _State.RUNNING:
                self._wait(i)
            if self.states[i] is _State.READY:
                self._turn(i)
        parked = [i for i, s in enumerate(self.states) if s is _State.PARKED]
        if not parked:
            return any(s is not _State.DONE for s in self.states)
        answers: list[Any]
        try:
            answers = [self.stop] * len(parked) if self.stop is not None else self._served(parked)
        except KeyboardInterrupt as e:  # a signal while serving: the parked jobs' answer
            self.stop = self.stop or e
            answers = [e] * len(parked)
        except Exception as e:  # noqa: BLE001 - a failure of the serving itself: every parked job's
            answers = [e] * len(parked)
        with self.cv:
            for i, answer in zip(parked, answers, strict=True):
                self.answers[i], self.requests[i], self.states[i] = answer, None, _State.READY
        return True

    def _served(self, parked: list[int]) -> list[Any]:
        answers = self.serve([self.requests[i] for i in parked])
        if len(answers) != len(parked):
            raise RuntimeError(f"served {len(answers)} answers for {len(parked)} requests")
        return answers

    def _turn(self, i: int) -> None:
        """Let job ``i`` run until it parks or ends."""
        with self.cv:
            self.states[i] = _State.RUNNING
            self.cv.notify_all()
        self._wait(i)

    def _wait(self, i: int) -> None:
        """Wait until the running job ``i`` parks or ends (a signal is handled between the checks)."""
        with self.cv:
            while self.states[i] is _State.RUNNING:
                self.cv.wait(POLL)

    def _job(self, i: int, job: Callable[[], Any], ended: Ended) -> None:
        self._local.index = i
        with self.cv:
            while self.states[i] is not _State.RUNNING:
                self.cv.wait()
        try:
            ended.value = job()
        except BaseException as e:  # noqa: BLE001 - how the job ended is its caller's to tell
            ended.error = e
            if isinstance(e, KeyboardInterrupt):
                self.stop = self.stop or e
        finally:
            with self.cv:
                self.states[i] = _State.DONE
                self.cv.notify_all()

    def park(self, request: Any) -> Any:
        """From a job's thread: pause with ``request`` until it is served; its answer (raised when an exception)."""
        i = self._local.index
        if self.stop is not None:
            raise _copy(self.stop)
        with self.cv:
            self.requests[i], self.states[i] = request, _State.PARKED
            self.cv.notify_all()
            while self.states[i] is not _State.RUNNING:
                self.cv.wait()
            answer, self.answers[i] = self.answers[i], None
        if isinstance(answer, BaseException):
            raise _copy(answer) if isinstance(answer, KeyboardInterrupt) else answer
        return answer

    @property
    def index(self) -> int | None:
        """The number of the job whose thread calls this (None outside a job)."""
        return getattr(self._local, "index", None)


def _copy(e: BaseException) -> BaseException:
    """A fresh instance of the interrupt ``e`` for another job's thread (one exception object, one traceback)."""
    signum = getattr(e, "signum", None)
    try:
        return type(e)(signum) if signum is not None else type(e)()
    except Exception:  # noqa: BLE001 - an interrupt whose class takes other arguments
        return KeyboardInterrupt()
