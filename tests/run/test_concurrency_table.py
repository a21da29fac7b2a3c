"""The ``concurrency`` table (issue 32): two processes on one run directory. The second (this test's in-process
``fedrun``) never touches what the first wrote: a refused process removes only what it wrote while it held the
run dir's lock, never a lock it does not hold, and writes nothing (no error.txt) into a directory whose lock it could
not take; a sweep's job whose twin in another sweep is running waits for it and finds it done; a refused extension
rewrites no status.

The first process is a real one: ``fedrun`` itself (a run, a sweep, or the run a refused extension was to extend),
or a small script that holds the lock and writes the files a run writes at the moment the second process has just
started (once Hydra's record of its job appears), which is when the red team's race struck.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedrun.storage.lock import LOCK_FILE, lock_holder
from tests.conftest import REPO
from tests.hostile import TINY, Case, completed_run, ids, run_case
from tests.pause_worker import PAUSED, RELEASE

CATEGORY = "concurrency"
BUSY = "in use by another fedrun process (its lock .fedrun.lock is held)"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
WINNER_FILES = ("config.yaml", "partition.csv", "fedrun.log")

# The first process, as a script: it holds <run>/.fedrun.lock (from the start, or from when the second process's Hydra
# record appears: "lock-after"), writes a run's files when that record appears, and holds on until its stdin closes
# ("release": lets go a second later); "writer" writes winner.<n> every half millisecond until it is stopped. It
# says "wrote" once the run's files are written: it is stopped no sooner, or a loaded machine could stop it first.
HOLDER = r"""
import fcntl, os, sys, time
from pathlib import Path
run, mode = Path(sys.argv[1]), sys.argv[2]
run.mkdir(parents=True, exist_ok=True)
def take():
    fd = os.open(run / ".fedrun.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd
fd = None if mode == "lock-after" else take()
print("ready", flush=True)
n = 0
while mode == "writer":
    (run / f"winner.{n}").write_text("x")
    n += 1
    time.sleep(0.0005)
while not (run / ".hydra" / "overrides.yaml").exists():
    time.sleep(0.001)
fd = take() if fd is None else fd
for name in ("config.yaml", "partition.csv", "fedrun.log"):
    (run / name).write_text(f"the first process's {name}\n")
print("wrote", flush=True)
if mode == "release":
    time.sleep(1.0)
    os.close(fd)
sys.stdin.read()
"""


class First:
    """The first process: started by a case's set-up, ended (and its exit code kept in ``{t}/first.rc``) when the
    second has ended. A real fedrun pauses in round 2 holding its run's (or job's) lock (tests/pause_worker.py) until
    the second process has ended or waits for that lock: before, a loaded machine could let it finish first."""

    def __init__(self, t: Path, args: list[str], held: str | None = None, script: bool = False) -> None:
        self.t, self.script, self.held = t, script, held or ""
        self.wrote = threading.Event()
        if held is not None:
            args = ["-m", "tests.pause_worker", "round:2", *args[2:]]  # args: -m fedrun.cli ...
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=t, env=ENV, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        if script:
            out = self.proc.stdout
            assert out is not None and out.readline().strip() == "ready"
            threading.Thread(target=lambda: out.readline().strip() == "wrote" and self.wrote.set(), daemon=True).start()
        deadline = time.monotonic() + 600  # a bound, not a timing
        while held is not None and not ((t / PAUSED).exists() and self._holds(held)):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.proc.communicate()
            time.sleep(0.02)
        if held is not None:  # released once another process waits for a lock (a twin sweep's job)
            threading.Thread(target=self._release_when_waited_for, daemon=True).start()

    def _holds(self, pattern: str) -> bool:
        return any(lock_holder(p) == self.proc.pid for p in self.t.glob(pattern))

    def _release_when_waited_for(self) -> None:
        held = {p.stat().st_ino for p in self.t.glob(self.held)}
        while self.proc.poll() is None and not (self.t / RELEASE).exists():
            if waited_for(held):
                (self.t / RELEASE).touch()
            time.sleep(0.02)

    def close(self) -> None:
        (self.t / RELEASE).touch()
        if self.script:
            if self.proc.args[-1] != "writer":  # its mode; a bound, not a timing
                self.wrote.wait(600)
            self.proc.kill()
        _, err = self.proc.communicate(timeout=600)
        (self.t / "first.rc").write_text(f"{self.proc.returncode}\n{err}")


def waited_for(inodes: set[int]) -> bool:
    """Whether a process waits for a lock on one of these files (a ``->`` line of /proc/locks names the file by
    ``major:minor:inode``). Before, any process's wait counted: another test worker's let the first go too soon."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and int(fields[6].rsplit(":", 1)[-1]) in inodes:
            return True
    return False


def holder(mode: str, where: str = "r") -> object:
    def setup(t: Path) -> First:
        if mode == "writer":
            shutil.rmtree(t / where, ignore_errors=True)
            shutil.copytree(t / "done", t / where, symlinks=True)
        return First(t, ["-c", HOLDER, str(t / where), mode], script=True)

    return setup


def fedrun(*args: str, held: str = f"r/{LOCK_FILE}") -> object:
    def setup(t: Path) -> First:
        fill = {"t": str(t)}
        return First(t, ["-m", "fedrun.cli", *(a.format(**fill) for a in args)], held=held)

    return setup


def tracked_run_blocked(t: Path) -> None:
    """A completed run with TensorBoard on, whose ``tb`` folder is now a file."""
    res = subprocess.run(
        [sys.executable, "-m", "fedrun.cli", *TINY, "tracking=[tensorboard]", f"hydra.run.dir={t / 'r'}",
         f"cache_dir={t / 'cache'}"],
        cwd=t, env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    shutil.rmtree(t / "r" / "tb")
    (t / "r" / "tb").write_text("a file where TensorBoard's folder goes\n")


# ---- what must hold after the second process ended --------------------------------------------------------------
def first_files_kept(where: str = "r") -> object:
    def after(t: Path) -> None:
        for name in WINNER_FILES:
            assert (t / where / name).read_text() == f"the first process's {name}\n", name
        assert (t / where / LOCK_FILE).exists()
        assert not (t / where / "error.txt").exists()

    return after


def writer_files_kept(t: Path) -> None:
    numbers = sorted(int(p.name.split(".")[1]) for p in (t / "w").glob("winner.*"))
    assert numbers == list(range(len(numbers))), "the first process's files were deleted"
    assert (t / "w" / LOCK_FILE).exists() and not (t / "w" / "error.txt").exists()


def first_completed(*folders: str) -> object:
    def after(t: Path) -> None:
        rc, _, err = (t / "first.rc").read_text().partition("\n")
        assert rc == "0", err[-2000:]
        for pattern in folders:
            found = [p for p in t.glob(pattern) if p.is_dir()]
            assert found, pattern
            for run in found:
                assert json.loads((run / "summary.json").read_text())["status"] == "completed", run
                assert not (run / "error.txt").exists(), f"error.txt in the completed run {run}"
                assert (run / LOCK_FILE).exists() and (run / "config.yaml").exists(), run

    return after


# The first process pauses in round 2 until the second has ended or waits for its lock (First), so a round after
# that is all it needs: the rounds it trains once released only cost time
SWEEP = ("-m", "hydra.sweep.dir={t}/s", "fl.rounds=3")
TWIN = ("-m", *TINY, "hydra.sweep.dir={t}/s", "fl.rounds=3", "cache_dir={t}/cache")
REAL_RUN = ("fl.rounds=3", "hydra.run.dir={t}/r")
EXTEND = ("hydra.run.dir={t}/r", "tracking=[tensorboard]", "fl.rounds=2")
TB_REFUSED = ("tracking.tensorboard: cannot open the TensorBoard tracker",)
RUN_KEPT = ("r/summary.json", "r/config.yaml", "r/metrics.csv")
CASES = [
    Case(
        "first-writes-after-second-started",
        ("hydra.run.dir={t}/r",),
        2,
        ("{t}/r: " + BUSY,),
        holder("lock-first"),
        after=first_files_kept(),
    ),  # before: its config.yaml, partition.csv, fedrun.log deleted
    Case(
        "first-locks-after-second-started",
        ("hydra.run.dir={t}/r",),
        2,
        ("{t}/r: " + BUSY,),
        holder("lock-after"),
        after=first_files_kept(),
    ),  # before: the held .fedrun.lock deleted, error.txt written
    Case(
        "bad-input-while-held",
        ("hydra.run.dir={t}/r", "fl.clients=0"),
        2,
        ("fl.clients",),
        holder("lock-first"),
        after=first_files_kept(),
    ),  # before: the first's files deleted, error.txt written
    Case(
        "resume-while-held",
        ("resume={t}/w", "fl.rounds=2"),
        2,
        ("{t}/w: " + BUSY,),
        holder("writer", "w"),
        after=writer_files_kept,
        tiny=False,
    ),  # before: what the first wrote meanwhile deleted
    Case(
        "two-real-runs",
        REAL_RUN,
        2,
        ("{t}/r: " + BUSY,),
        fedrun(*TINY, *REAL_RUN, "cache_dir={t}/cache"),
        after=first_completed("r"),
    ),  # before: error.txt in the completed run, its lock deleted
    Case(
        "twin-sweeps",
        (*SWEEP, "seed=0,1"),
        0,
        ("waiting for fedrun process",),
        fedrun(*TWIN, "seed=0,1", held=f"s/*/{LOCK_FILE}"),
        after=first_completed("s/seed=*"),
    ),
    # before: "1 of 2 jobs failed", exit 1 (and the refused job's files deleted)
    Case(
        "twin-sweeps-one-job",
        SWEEP,
        0,
        ("waiting for fedrun process",),
        fedrun(*TWIN, held=f"s/*/{LOCK_FILE}"),
        after=first_completed("s/[0-9a-f]*"),
    ),  # before: "1 of 1 jobs failed", exit 1
    Case(
        "sweep-job-waits-then-finds-another-run",
        ("-m", "hydra.sweep.dir={t}/s", "hydra.sweep.subdir=job"),
        1,
        ("{t}/s/job/config.yaml is not a fedrun config",),
        holder("release", "s/job"),
        after=first_files_kept("s/job"),
    ),  # before: the first's files deleted
    Case("extension-refused-by-tracker", EXTEND, 2, TB_REFUSED, tracked_run_blocked, RUN_KEPT),
    # before: the completed run's summary.json said "running", its config.yaml 2 rounds
    Case(
        "resumed-extension-refused-by-tracker",
        ("resume={t}/r", "fl.rounds=2"),
        2,
        TB_REFUSED,
        tracked_run_blocked,
        RUN_KEPT,
        tiny=False,
    ),  # before: the same through resume=
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("concurrency") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_concurrency(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
