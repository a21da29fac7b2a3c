"""``fedrun-reproduce`` as a child process that a test signals: started as a terminal starts a command
(tests/dispositions.py), and handed back once its runs are under way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO
from tests.dispositions import foreground

COMMAND = [sys.executable, "-m", "fedrun.cli.reproduce"]
START_S = 120.0  # the most a test waits for the runs to start


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def started(args: list[str], cwd: Path, runs: int, capture: bool = True) -> subprocess.Popen[str]:
    """``fedrun-reproduce *args`` in ``cwd`` (its output piped, or with ``capture`` false dropped), once ``runs`` of
    its runs have a fedrun.log and a second more has passed: each is past its first rounds."""
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    proc = subprocess.Popen(
        [*COMMAND, *args], stdout=out, stderr=out, text=True, env=env(), cwd=cwd, preexec_fn=foreground
    )
    deadline = time.monotonic() + START_S
    while len(list(cwd.rglob("fedrun.log"))) < runs and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    return proc
