"""``imports=[tests.cli.pause_jobs]``: each worker process of a side-by-side sweep (fedrun/cli/parallel_worker.py)
pauses in round 2 of the first job it trains (trained and aggregated, not yet evaluated or recorded), says so by the
file ``paused-<its pid>`` in its working directory, and waits until a signal's handler raises or the file
``release`` appears (:data:`tests.pause_worker.LIMIT_S` at most: a bound, not a timing). So a test sees two jobs
running at once, each in a process of its own, and can stop them mid-round on a loaded machine without guessing how
long start-up or a round takes. Any other process that imports it (the sweep's own, which validates each job) never
pauses, nor does a process forked from one that did (a test process that ran such a sweep in-process, then forks the
workers of ``fedrun-reproduce --smoke``, fedrun/cli/reproduce_side.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import fedrun.run.loop as loop
from fedrun.host import threads
from tests.pause_worker import LIMIT_S, RELEASE

PAUSED = "paused-"  # + the pid of the worker that paused


def _install() -> None:
    train_round = loop.train_step
    if getattr(train_round, "pauses", False):  # imported again (a second sweep of the same process)
        return
    done: list[bool] = []
    installed_in = os.getpid()

    def train_then_pause(experiment: Any, state: Any, rnd: int) -> Any:
        result = train_round(experiment, state, rnd)
        if rnd + 1 == 2 and not done and threads._WORKER and os.getpid() == installed_in:
            done.append(True)
            Path(f"{PAUSED}{os.getpid()}").touch()
            end = time.monotonic() + LIMIT_S
            while time.monotonic() < end and not Path(RELEASE).exists():
                time.sleep(0.01)
        return result

    train_then_pause.pauses = True  # type: ignore[attr-defined]
    loop.train_step = train_then_pause


_install()
