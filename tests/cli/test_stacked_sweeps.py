"""A sweep's stackable jobs train together (fedrun/cli/stack_launch.py, docs/sweeps.md): the console says which, and
why jobs that would have stacked did not; each job's folder is its own, its metrics those of the same sweep run
unstacked; a stacked sweep grows by its new jobs only, stacked together, and one stopped by Ctrl-C or killed resumes
every job from its own checkpoint to an uninterrupted sweep's metrics."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pytest

from fedrun.cli import hydra_patches
from fedrun.run.sweep_index import read_index
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import REPO, main_exit_code
from tests.dispositions import foreground
from tests.pause_worker import PAUSED, RELEASE

TINY = [
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=200",
    "fl.clients=3",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=1",
]


def sweep(monkeypatch: pytest.MonkeyPatch, folder: Path, *args: str) -> object:
    where = [f"hydra.sweep.dir={folder}", f"cache_dir={folder.parent / 'cache'}"]
    return main_exit_code(monkeypatch, ["fedrun", "-m", *TINY, *args, *where])


def jobs(folder: Path) -> dict[str, pd.DataFrame]:
    """Each job's metrics without the timing columns, by the overrides that name its folder."""
    return {
        p.name.rsplit("-", 1)[0]: pd.read_csv(p / "metrics.csv").drop(columns=list(TIMING_COLUMNS))
        for p in sorted(folder.iterdir())
        if (p / "metrics.csv").is_file()
    }


def test_a_sweep_of_seeds_trains_stacked_says_so_and_equals_the_sweep_unstacked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture, uninterrupted: Whole
) -> None:
    out = uninterrupted.out  # the stacked sweep of seeds 0-2 (4 rounds), read only
    assert out[1] == "stack 1: jobs 1-3 train together, as one vectorised cohort"
    assert sum(line.endswith(", stack 1)") and ": completed, acc " in line for line in out) == 3
    folders = sorted(p for p in uninterrupted.folder.iterdir() if p.is_dir())
    for i, folder in enumerate(folders):
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["engine"] == "vectorised" and summary["stack"]["jobs"] == 3
        assert summary["stack"]["with"] == [f.name for f in folders if f != folder]
        assert (folder / "checkpoint.pt").is_file() and (folder / "fedrun.log").read_text().count("INFO round ") == 4
        assert f"seed {i}" in (folder / "fedrun.log").read_text()  # each job's log holds its own lines only
    monkeypatch.chdir(tmp_path)
    unstacked = ["fl.rounds=4", "seed=0,1,2", "hardware.stack=off", "hardware.engine=vectorised"]
    assert sweep(monkeypatch, tmp_path / "alone", *unstacked) == 0
    assert "stack" not in capsys.readouterr().out
    stacked, alone = uninterrupted.jobs, jobs(tmp_path / "alone")
    assert sorted(stacked) == sorted(alone) == ["seed=0", "seed=1", "seed=2"]
    for name, frame in stacked.items():
        pd.testing.assert_frame_equal(frame, alone[name], check_exact=True)


def test_jobs_that_would_have_stacked_say_why_not_in_one_line_and_run_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sweep(monkeypatch, tmp_path / "sweep", "seed=0,1", "model.dropout=0.5", "algorithm=fedavg,fedprox") == 0
    out = capsys.readouterr().out.splitlines()
    why = (
        "(model=mlp draws dropout masks (module '3') from torch's one global generator, which stacked jobs would share)"
    )
    assert out[1:3] == [
        f"not stacked: jobs 1, 3 train alone {why}",
        f"not stacked: jobs 2, 4 train alone {why}",
    ]
    assert sum(": completed, acc " in line and "stack" not in line for line in out) == 4


def test_growing_a_stacked_sweep_runs_only_the_new_jobs_stacked_together(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "sweep"
    assert sweep(monkeypatch, folder, "seed=0,1") == 0
    first = {p: (p / "metrics.csv").stat().st_mtime_ns for p in folder.iterdir() if p.is_dir()}
    capsys.readouterr()
    assert sweep(monkeypatch, folder, "seed=0,1,2,3") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "stack 1: jobs 3, 4 train together, as one vectorised cohort"
    assert sum("skipped (already done" in line for line in out) == 2
    assert {p: (p / "metrics.csv").stat().st_mtime_ns for p in first} == first
    new = [p for p in folder.iterdir() if p.is_dir() and p not in first]
    assert len(new) == 2 and all(json.loads((p / "summary.json").read_text())["stack"]["jobs"] == 2 for p in new)


def _stopped_sweep(tmp_path: Path, how: signal.Signals) -> tuple[Path, subprocess.CompletedProcess[str] | None]:
    """A 3-job stacked sweep of 4 rounds stopped while job 0 is in round 2 (pause_worker), by ``how``: SIGINT (then
    the paused round is let go: the stack stops at its next training), or SIGKILL. The sweep's folder and, for
    SIGINT, how the command ended."""
    folder = tmp_path / "sweep"
    args = ["-m", *TINY, "fl.rounds=4", "seed=0,1,2", f"hydra.sweep.dir={folder}", f"cache_dir={tmp_path / 'cache'}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = [sys.executable, "-m", "tests.pause_worker", "round:2", *args]
    proc = subprocess.Popen(worker, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=foreground)  # fmt: skip
    deadline = time.monotonic() + 600  # a bound, not a timing: job 0 waits in round 2 for the signal
    while not (tmp_path / PAUSED).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "job 0 did not reach round 2"
        time.sleep(0.02)
    proc.send_signal(how)
    if how is signal.SIGKILL:
        proc.communicate(timeout=600)
        return folder, None
    (tmp_path / RELEASE).touch()  # the paused job goes on to its next training, where the stack stops
    out, err = proc.communicate(timeout=600)
    return folder, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class Whole(NamedTuple):
    """A sweep run through in this process (:func:`whole_sweep`): its folder, its console lines, its jobs' metrics."""

    folder: Path
    out: list[str]
    jobs: dict[str, pd.DataFrame]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Whole:
    """The 4-round stacked sweep of seeds 0-2 run through: what each stopped one must resume to, and the stacked
    sweep that the first test reads (read only, so the tests share it)."""
    return whole_sweep(tmp_path_factory, "fl.rounds=4", "seed=0,1,2")


def whole_sweep(tmp_path_factory: pytest.TempPathFactory, *args: str) -> Whole:
    """A sweep of ``args`` run through in this process, for a module fixture (Hydra's patches put back after it, as
    each test's own composition expects them)."""
    base = tmp_path_factory.mktemp("whole")
    restore, out = hydra_patches.saved(), io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
            mp.chdir(base)
            assert sweep(mp, base / "whole", *args) == 0
    finally:
        restore()
    return Whole(base / "whole", out.getvalue().splitlines(), jobs(base / "whole"))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_a_stopped_stacked_sweep_resumes_every_job_to_the_uninterrupted_metrics(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    uninterrupted: Whole,
    how: signal.Signals,
) -> None:
    folder, ended = _stopped_sweep(tmp_path, how)
    names = sorted(read_index(folder))
    assert len(names) == 3
    if ended is not None:
        assert ended.returncode == 130, ended.stderr
        line = ended.stderr.strip().splitlines()[-1]
        assert line.startswith("fedrun: stopped by SIGINT in job 0 ["), ended.stderr
        assert "Traceback" not in ended.stderr
        assert {json.loads((folder / n / "summary.json").read_text())["status"] for n in names} == {"interrupted"}
        command = shlex.split(line.split("resume the sweep with: ", 1)[1])[1:]
    else:
        command = ["-m", *TINY, "fl.rounds=4", "seed=0,1,2", f"hydra.sweep.dir={folder}"]
    monkeypatch.chdir(tmp_path)  # the command resumes the sweep (in this process: what it runs is the same)
    capsys.readouterr()
    assert main_exit_code(monkeypatch, ["fedrun", *command, f"cache_dir={tmp_path / 'cache'}"]) == 0
    assert "stack 1: jobs 1-3 train together" in capsys.readouterr().out
    resumed = jobs(folder)
    assert sorted(resumed) == sorted(uninterrupted.jobs) and len(uninterrupted.jobs) == 3
    for name, frame in uninterrupted.jobs.items():
        pd.testing.assert_frame_equal(resumed[name], frame, check_exact=True)
