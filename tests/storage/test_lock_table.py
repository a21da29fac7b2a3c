"""The ``lock`` table: a second fedrun on a held run dir is refused in one line and touches nothing; a stale lock
file (whatever it holds) is taken again; a lock file that is a directory, a symlink or a loop is refused. The
subprocess version of the first row is in tests/storage/test_lock.py."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from fedrun.storage.lock import LOCK_FILE
from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "lock"
BUSY = "in use by another fedrun process (its lock .fedrun.lock is held)"


class Held:
    """The lock of ``folder`` held by another open file (flock locks belong to an open file: this process's run
    conflicts with it as another process's would)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def close(self) -> None:
        os.close(self.fd)


def _lock_file(how: str) -> object:
    def setup(t: Path) -> object:
        p = t / "done" / LOCK_FILE
        p.unlink()
        if how == "dir":
            p.mkdir()
        elif how == "junk":
            p.write_text("12345 another host\n")
        elif how == "fifo":
            os.mkfifo(p)
        elif how == "self-loop":
            p.symlink_to(p)
        elif how == "outside":
            (t / "theirs").write_text("x")
            p.symlink_to(t / "theirs")
        elif how == "missing":
            pass
        return None

    return setup


def _stale_temps(t: Path) -> None:
    (t / "done" / f".metrics.csv.{os.getpid()}.tmp").write_text("half")  # the run holds the lock: any pid is dead
    (t / "done" / "name.123.tmp").write_text("the user's")


R2 = ("resume={done}", "fl.rounds=2")
CASES = [
    Case("held-fresh-run", ("hydra.run.dir={t}/r",), 2, ("{t}/r: " + BUSY,), lambda t: Held(t / "r")),
    Case("held-resume", R2, 2, ("{t}/done: " + BUSY,), lambda t: Held(t / "done"), ("done",), tiny=False),
    # Hydra rewrites the record (.hydra/) as it launches the job, before the lock is tried: the live run's comes back
    Case("held-run-dir", ("hydra.run.dir={done}",), 2, ("{done}: " + BUSY,), lambda t: Held(t / "done"), ("done",)),
    Case("stale-lock-is-taken", R2, 0, (), tiny=False),
    Case(
        "lock-a-directory",
        R2,
        2,
        ("{t}/done/.fedrun.lock is a directory where fedrun writes its .fedrun.lock",),
        _lock_file("dir"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "lock-a-symlink-out",
        R2,
        2,
        ("{t}/done/.fedrun.lock is a symlink to",),
        _lock_file("outside"),
        ("done", "theirs"),
        tiny=False,
    ),  # fmt: skip
    Case(
        "stale-temps-cleaned-user-files-kept",
        R2,
        0,
        (),
        _stale_temps,
        tiny=False,
        after=lambda t: (
            (not list((t / "done").glob(".metrics.csv.*.tmp")) and (t / "done" / "name.123.tmp").exists())
            or pytest.fail("temp files")
        ),
    ),  # fmt: skip
    # the red team's next round
    Case("lock-with-junk-content", R2, 0, (), _lock_file("junk"), tiny=False),
    Case("lock-a-fifo", R2, 0, (), _lock_file("fifo"), tiny=False),  # opened O_RDWR: never blocks
    Case(
        "lock-a-self-loop",
        R2,
        2,
        ("cannot write .fedrun.lock in {t}/done: it is a symlink",),
        _lock_file("self-loop"),
        ("done",),
        tiny=False,
    ),  # fmt: skip  before: "RuntimeError: Symlink loop"
    Case("lock-missing", R2, 0, (), _lock_file("missing"), tiny=False),
    Case(
        "held-sweep-job",
        ("-m", "seed=0", "hydra.sweep.dir={t}/s", "hydra.sweep.subdir=job"),
        1,
        ("{t}/s/job: " + BUSY,),
        lambda t: Held(t / "s" / "job"),
    ),  # fmt: skip  a sweep reports its failed job
]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("lock") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_lock(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
