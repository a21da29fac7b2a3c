"""The ``changed-inputs`` table (issue 49): a file a run reads by path (``system.trace``, and a FedScale trace's
behaviour pickle beside it) that changed after the run started, met by a resume of a killed run, an extension, the
same command again or a grown sweep, is refused in one line naming the key and the file (exit 2; a sweep's job is
refused and the sweep exits 1), and the run is left byte for byte; the same bytes, even read through the relative
path from another directory, continue it (fedrun/storage/inputs.py).

The runs here name their trace by a relative path (``trace.json``, read from the current directory), so that
each case plants its own copy in its working directory."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fedrun.cli import hydra_patches
from tests.conftest import REPO, dir_snapshot, main_exit_code
from tests.hostile import TINY, Case, FifoGuard, completed_run, ids, run_case

CATEGORY = "changed-inputs"
SAMPLE = json.loads((REPO / "tests" / "system" / "sample_trace.json").read_text())
TRACE = {"clients": {c: SAMPLE["clients"][c] for c in ("0", "1", "2", "3")}}  # TINY's four clients
EDITED = {"clients": {**TRACE["clients"], "1": {**TRACE["clients"]["1"], "flops": 1e3}}}
CAPACITY = {c: {"computation": 100.0 * (c + 1), "communication": 800.0} for c in range(4)}
BEHAVE = {1: {"active": [0], "inactive": [10], "finish_time": 20}}
ON_TRACE = ("system.devices=trace", "system.trace=trace.json")
ON_PICKLE = ("system.devices=trace", "system.trace=trace.pkl")
MADE: dict[str, Path] = {}  # the module's completed runs and sweep (the fixture ``done`` makes them)


def _plant(trace: Any = TRACE, status: str | None = None, pkl: bool = False, behave: Any = BEHAVE) -> Callable:
    """A setup: the trace (or FedScale's pickles, ``pkl``) in the case's working directory, as given (None: none;
    ``"fifo"``: a link to a FIFO), and ``status`` planted in {done}'s summary.json (``interrupted``: a killed run)."""

    def setup(t: Path) -> object:
        guard = None
        if pkl:
            shutil.rmtree(t / "done")
            shutil.copytree(MADE["pkl"], t / "done", symlinks=True)
            (t / "cwd" / "trace.pkl").write_bytes(pickle.dumps(CAPACITY))
            if behave is not None:
                (t / "cwd" / "trace.behave.pkl").write_bytes(pickle.dumps(behave))
        elif trace == "fifo":  # (a link to it: the working directory's snapshot reads its files)
            os.mkfifo(t / "fifo")
            (t / "cwd" / "trace.json").symlink_to(t / "fifo")
            guard = FifoGuard(t / "fifo")
        elif trace is not None:
            (t / "cwd" / "trace.json").write_text(json.dumps(trace))
        if status is not None:
            summary = t / "done" / "summary.json"
            summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": status}))
        return guard

    return setup


def _then(setup: Callable, change: Callable[[Path], None]) -> Callable:
    def both(t: Path) -> object:
        alive = setup(t)
        change(t)
        return alive

    return both


def _sweep(t: Path) -> None:
    shutil.copytree(MADE["sweep"], t / "sweep", symlinks=True)


def _completed(rounds: int) -> Callable[[Path], None]:
    def after(t: Path) -> None:
        s = json.loads((t / "done" / "summary.json").read_text())
        assert s["status"] == "completed" and s["rounds_completed"] == rounds, s
        record = json.loads((t / "done" / "input_digests.json").read_text())
        assert list(record["files"]) == ["system.trace"], record

    return after


def _old_job_kept(t: Path) -> None:
    (job,) = [p for p in MADE["sweep"].iterdir() if p.is_dir()]
    own = lambda d: {k: v for k, v in dir_snapshot(d).items() if not k.startswith(".hydra")}  # noqa: E731 (Hydra's)
    assert own(t / "sweep" / job.name) == own(job)


def _resume(*more: str) -> tuple[str, ...]:
    return ("resume={done}", *more)


# the run's own files (Hydra rewrites its record of the job, .hydra/, for every command run in the folder)
RUN_FILES = tuple(f"done/{name}" for name in ("config.yaml", "summary.json", "metrics.csv", "checkpoint.pt",
                                              "fedrun.log", "input_digests.json"))  # fmt: skip
CHANGED = "system.trace: {t}/cwd/trace.json (the run read "
SWEEP = ("-m", *ON_TRACE, "seed=0,1", "hydra.sweep.dir={t}/sweep")
CASES = [
    Case(
        "killed-trace-edited",
        _resume(),
        2,
        (CHANGED, "changed (sha256 "),
        _plant(EDITED, "interrupted"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "killed-trace-same-bytes-resumes",
        _resume(),
        0,
        (),
        _plant(TRACE, "interrupted"),
        after=_completed(2),
        tiny=False,
    ),  # fmt: skip
    Case("extension-trace-edited", _resume("fl.rounds=3"), 2, (CHANGED,), _plant(EDITED), ("done",), tiny=False),
    Case("extension-trace-same-bytes", _resume("fl.rounds=3"), 0, (), _plant(TRACE), after=_completed(3), tiny=False),
    Case(
        "rerun-of-completed-trace-edited",
        (*ON_TRACE, "fl.rounds=2", "hydra.run.dir={t}/done"),
        2,
        (CHANGED,),
        _plant(EDITED),
        RUN_FILES,
    ),  # fmt: skip
    Case(
        "sweep-grown-trace-edited",
        SWEEP,
        1,
        (CHANGED, "1 of 2 jobs failed"),
        _then(_plant(EDITED), _sweep),
        after=_old_job_kept,
    ),  # fmt: skip
    Case("sweep-grown-trace-same-bytes", SWEEP, 0, (), _then(_plant(TRACE), _sweep), after=_old_job_kept),
    # the red team's next round
    Case(
        "killed-trace-gone",
        _resume(),
        2,
        (CHANGED, "is gone since the run in {t}/done started"),
        _plant(None, "interrupted"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "killed-trace-now-a-link-to-a-fifo",
        _resume(),
        2,
        (CHANGED, "became unreadable", "not a regular file (a FIFO)"),
        _plant("fifo", "interrupted"),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "behaviour-pickle-edited",
        _resume("fl.rounds=3"),
        2,
        ("system.trace: {t}/cwd/trace.behave.pkl (the run read ", "changed (sha256 "),
        _plant(pkl=True, behave={**BEHAVE, 2: BEHAVE[1]}),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "behaviour-pickle-gone",
        _resume("fl.rounds=3"),
        2,
        ("system.trace: {t}/cwd/trace.behave.pkl", "is gone"),
        _plant(pkl=True, behave=None),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case("pickles-same-bytes", _resume("fl.rounds=3"), 0, (), _plant(pkl=True), after=_completed(3), tiny=False),
    Case(
        "record-garbled",
        _resume("fl.rounds=3"),
        2,
        ("resume: {t}/done/input_digests.json: unreadable record of the files the run read",),
        _then(_plant(TRACE), lambda t: (t / "done" / "input_digests.json").write_text("{garbled")),
        ("done",),
        tiny=False,
    ),  # fmt: skip
    Case(
        "record-missing-is-written",
        _resume("fl.rounds=3"),
        0,
        (),
        _then(_plant(TRACE), lambda t: (t / "done" / "input_digests.json").unlink()),
        after=_completed(3),
        tiny=False,
    ),  # fmt: skip
]


def _made(where: Path, *args: str) -> Path:
    """A completed run or sweep of TINY + ``args`` made from ``where`` (its trace beside it)."""
    restore = hydra_patches.saved()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        try:
            code = main_exit_code(mp, ["fedrun", *[a for a in args if a == "-m"], *TINY,
                                       *[a for a in args if a != "-m"], f"cache_dir={where / 'cache'}"])  # fmt: skip
        finally:
            restore()
    assert code == 0
    return where


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("changed-inputs")
    (where / "trace.json").write_text(json.dumps(TRACE))
    (where / "trace.pkl").write_bytes(pickle.dumps(CAPACITY))
    (where / "trace.behave.pkl").write_bytes(pickle.dumps(BEHAVE))
    _made(where, "-m", *ON_TRACE, "seed=0", f"hydra.sweep.dir={where / 'sweep'}")
    MADE["sweep"] = where / "sweep"
    MADE["pkl"] = completed_run(where / "pkl", *ON_PICKLE, "fl.rounds=2")
    return completed_run(where / "run", *ON_TRACE, "fl.rounds=2")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_changed_inputs(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys, done)
