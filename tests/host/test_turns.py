"""Jobs in turns (fedrun/host/turns.py): one runs at a time, each to its next pause; the paused requests are served in
one call; an interrupt (while serving, or ending one job) ends every job at its next pause."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fedrun.host.interrupts import Interrupted
from fedrun.host.turns import Turns


class Log:
    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()
        self.served: list[list[Any]] = []

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


def test_jobs_run_one_at_a_time_and_their_requests_are_served_together() -> None:
    log = Log()

    def serve(requests: list[Any]) -> list[Any]:
        log.served.append(list(requests))
        return [r * 10 for r in requests]

    turns = Turns(serve)

    def job(name: int, pauses: int) -> Any:
        got = []
        for p in range(pauses):
            log.enter()
            request = name * 100 + p
            log.leave()
            got.append(turns.park(request))
        return got

    ended = turns.run([lambda: job(1, 3), lambda: job(2, 1), lambda: job(3, 2)])
    assert [e.error for e in ended] == [None, None, None]
    assert [e.value for e in ended] == [[1000, 1010, 1020], [2000], [3000, 3010]]
    assert log.served == [[100, 200, 300], [101, 301], [102]]  # every job still running, each time
    assert log.most == 1


def test_an_exception_as_an_answer_is_raised_in_its_job_and_a_failing_serve_fails_every_paused_job() -> None:
    def serve(requests: list[Any]) -> list[Any]:
        if "boom" in requests:
            raise RuntimeError("the stack failed")
        return [ValueError(r) if r == "bad" else r for r in requests]

    turns = Turns(serve)
    ended = turns.run([lambda: turns.park("bad"), lambda: turns.park("good")])
    assert isinstance(ended[0].error, ValueError) and ended[1].value == "good"
    turns = Turns(serve)
    ended = turns.run([lambda: turns.park("boom"), lambda: turns.park("fine")])
    assert all(isinstance(e.error, RuntimeError) for e in ended)


def test_an_interrupt_while_serving_ends_every_job_at_its_pause() -> None:
    calls = []

    def serve(requests: list[Any]) -> list[Any]:
        calls.append(requests)
        raise Interrupted(15)  # SIGTERM arrived while the stack trained

    turns = Turns(serve)
    after = []

    def job(name: str) -> Any:
        try:
            return turns.park(name)
        except KeyboardInterrupt as e:
            after.append((name, type(e).__name__, getattr(e, "signum", None)))
            raise

    ended = turns.run([lambda: job("a"), lambda: job("b")])
    assert len(calls) == 1
    assert sorted(after) == [("a", "Interrupted", 15), ("b", "Interrupted", 15)]
    assert all(isinstance(e.error, KeyboardInterrupt) for e in ended)
    assert ended[0].error is not ended[1].error  # each job's own exception


def test_a_job_ended_by_an_interrupt_ends_the_others_at_their_next_pause() -> None:
    served = []

    def serve(requests: list[Any]) -> list[Any]:
        served.append(list(requests))
        return requests

    turns = Turns(serve)
    stopped = []

    def interrupted_after(n: int) -> None:
        for p in range(n):
            turns.park(p)
        raise Interrupted(2)  # its run was interrupted inside a deferred block: it ends by the signal itself

    def long_job() -> None:
        try:
            for p in range(10):
                turns.park(p)
        except KeyboardInterrupt:
            stopped.append(p)
            raise

    ended = turns.run([lambda: interrupted_after(1), long_job])
    assert isinstance(ended[0].error, Interrupted) and isinstance(ended[1].error, KeyboardInterrupt)
    assert stopped == [1] and served == [[0, 0]]


def test_the_serving_thread_is_the_callers_and_the_jobs_have_their_own() -> None:
    threads: dict[str, Any] = {}

    def serve(requests: list[Any]) -> list[Any]:
        threads["serve"] = threading.get_ident()
        return requests

    turns = Turns(serve)

    def job() -> Any:
        threads.setdefault("jobs", set()).add(threading.get_ident())
        assert turns.index is not None
        return turns.park(1)

    turns.run([job, job])
    assert threads["serve"] == threading.get_ident()
    assert len(threads["jobs"]) == 2 and threading.get_ident() not in threads["jobs"]
    assert turns.index is None


@pytest.mark.parametrize("n", [0, 1])
def test_no_job_and_one_job(n: int) -> None:
    turns = Turns(lambda rs: rs)
    assert [e.value for e in turns.run([lambda: turns.park("x")] * n)] == ["x"] * n
