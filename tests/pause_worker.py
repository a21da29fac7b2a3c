"""``python -m tests.pause_worker WHERE [fedrun arguments...]``: the ``fedrun`` command, paused at a moment of a run
until a signal arrives, so that a test can send its signal at that moment on a loaded machine without guessing
how long start-up or a round takes (tests/host/test_interrupts.py, tests/cli/test_signal_table.py, ...).

At the moment the process creates the file ``paused`` in its working directory, then waits until a signal's
handler raises or the file ``release`` appears there (or :data:`LIMIT_S` passed: a bound, not a timing), and goes
on. WHERE is ``start-up`` (the run dir started: config.yaml written, before the first round) or ``round:N`` (round
N trained and aggregated, not yet evaluated or recorded: the middle of a round), each the first time it happens in
the process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

LIMIT_S = 600.0
PAUSED = "paused"
RELEASE = "release"


def pause() -> None:
    """Say so (the file ``paused``), then sleep until a signal's handler raises, ``release`` appears, or
    :data:`LIMIT_S` passed."""
    Path(PAUSED).touch()
    end = time.monotonic() + LIMIT_S
    while time.monotonic() < end and not Path(RELEASE).exists():
        time.sleep(0.01)


def install(where: str) -> None:
    """Pause at ``where`` (see the module docstring)."""
    import fedrun.run.loop as loop
    from fedrun.storage.rundir import RunDir

    done: list[bool] = []
    if where == "start-up":
        start = RunDir.start

        def start_then_pause(self: RunDir, *args: Any, **kwargs: Any) -> Any:
            result = start(self, *args, **kwargs)
            if not done:
                done.append(True)
                pause()
            return result

        RunDir.start = start_then_pause  # type: ignore[method-assign]
        return
    n = int(where.removeprefix("round:"))
    train_round = loop.train_step

    def train_then_pause(experiment: Any, state: Any, rnd: int) -> Any:
        result = train_round(experiment, state, rnd)
        if rnd + 1 == n and not done:
            done.append(True)
            pause()
        return result

    loop.train_step = train_then_pause


if __name__ == "__main__":
    install(sys.argv.pop(1))
    from fedrun.cli.__main__ import main

    sys.argv[0] = "fedrun"
    main()
