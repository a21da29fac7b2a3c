"""A sweep's jobs side by side, each in a worker process of its own (fedrun/cli/parallel_launch.py, docs/sweeps.md):
two jobs run at once, with the folders, ``.hydra`` records, index, console lines and metrics of the same sweep in one
process; a sweep stopped by Ctrl-C ends in one line with every started job resumable, and one killed (SIGKILL) leaves
its workers to stop their jobs the same way: re-running it gives the uninterrupted sweep's metrics; a worker that
dies costs its job only; ``hardware.parallel=auto`` keeps today's sweep where no core is idle."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrun.cli import parallel_launch
from fedrun.config.schema import RunSpec
from fedrun.run.sweep_index import read_index
from tests.cli.test_stacked_sweeps import TINY, Whole, jobs, sweep, whole_sweep
from tests.conftest import REPO, main_exit_code
from tests.dispositions import foreground
from tests.pause_worker import RELEASE

PAUSE = "imports=[tests.cli.pause_jobs]"  # each worker pauses in round 2 of its first job (tests/cli/pause_jobs.py)
LONE = ["seed=0,1,2", "hardware.stack=off"]  # three jobs that do not train together


def paused_workers(folder: Path) -> list[int]:
    """The pids of the workers paused in ``folder`` (tests/cli/pause_jobs.py)."""
    return sorted(int(p.name.removeprefix("paused-")) for p in folder.glob("paused-*"))


def _wait_for(what: Callable[[], bool], why: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 600  # a bound, not a timing
    while not what():
        assert (proc is None or proc.poll() is None) and time.monotonic() < deadline, why
        time.sleep(0.02)


def _ended(lines: list[str]) -> list[str]:
    """A sweep's job lines without their seconds, sorted (side by side, they come in any order)."""
    return sorted(re.sub(r"\(\d+\.\d s", "(", line) for line in lines if line.startswith("["))


def _record(folder: Path, name: str) -> dict[str, object]:
    """A job's ``.hydra/config.yaml`` without the keys the two sweeps were told apart by."""
    cfg = yaml.safe_load((folder / name / ".hydra" / "config.yaml").read_text())
    cfg["hardware"].pop("parallel")
    cfg.pop("imports")
    return cfg  # type: ignore[no-any-return]


def test_jobs_run_side_by_side_each_in_a_process_with_the_sweep_in_one_process_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture, uninterrupted: Whole
) -> None:
    monkeypatch.chdir(tmp_path)
    one = uninterrupted.folder  # the same sweep in one process (read only)
    side = one.parent / "side"  # beside it: the same cache_dir, which the jobs' records hold
    seen: list[int] = []

    def release_when_two_pause() -> None:  # two workers in round 2 at once: the jobs overlap
        _wait_for(lambda: len(paused_workers(tmp_path)) == 2, "two jobs did not run at once")
        seen.extend(paused_workers(tmp_path))
        (tmp_path / RELEASE).touch()

    releaser = threading.Thread(target=release_when_two_pause, daemon=True)
    releaser.start()
    assert sweep(monkeypatch, side, "fl.rounds=3", *LONE, "hardware.parallel=2", PAUSE) == 0
    releaser.join(timeout=1)
    side_out, one_out = capsys.readouterr().out.splitlines(), uninterrupted.out
    assert len(set(seen)) == 2 and os.getpid() not in seen
    assert side_out[1] == "side by side: jobs 1-3 run in 2 processes (hardware.parallel=2)"
    assert "side by side" not in "\n".join(one_out) and _ended(side_out) == _ended(one_out)
    names = sorted(read_index(one))
    assert sorted(read_index(side)) == names and len(names) == 3
    for name in names:
        assert _record(side, name) == _record(one, name)
        summary = json.loads((side / name / "summary.json").read_text())
        assert summary["parallel"] == {"workers": 2, "selection": "hardware.parallel=2"}
        assert summary["threads"] == 1 and "parallel" not in (one / name / "summary.json").read_text()
    side_jobs, one_jobs = jobs(side), uninterrupted.jobs
    assert sorted(side_jobs) == sorted(one_jobs) == ["seed=0", "seed=1", "seed=2"]
    for name, frame in one_jobs.items():
        pd.testing.assert_frame_equal(side_jobs[name], frame, check_exact=True)


def test_stacks_run_side_by_side_each_trained_in_its_worker_as_in_one_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    two = ["seed=0,1", "algorithm=fedavg,fedprox"]  # a stack of each method's two seeds
    assert sweep(monkeypatch, tmp_path / "side", *two, "hardware.parallel=2") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == [
        "stack 1: jobs 1, 3 train together, as one vectorised cohort",
        "stack 2: jobs 2, 4 train together, as one vectorised cohort",
        "side by side: jobs 1-4 run in 2 processes (hardware.parallel=2)",
    ]
    assert sweep(monkeypatch, tmp_path / "one", *two, "hardware.parallel=off") == 0
    assert _ended(out) == _ended(capsys.readouterr().out.splitlines())
    for name in read_index(tmp_path / "one"):
        side, one = (json.loads((tmp_path / d / name / "summary.json").read_text()) for d in ("side", "one"))
        assert side["stack"] == one["stack"] and side["stack"]["jobs"] == 2 and side["parallel"]["workers"] == 2
    side_jobs, one_jobs = jobs(tmp_path / "side"), jobs(tmp_path / "one")
    assert sorted(side_jobs) == sorted(one_jobs) and len(one_jobs) == 4
    for name, frame in one_jobs.items():
        pd.testing.assert_frame_equal(side_jobs[name], frame, check_exact=True)


def test_a_stack_wider_than_the_units_is_split_for_idle_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    three = ["seed=0,1,2", "hardware.engine=vectorised"]  # one stack of 3 in one process
    assert sweep(monkeypatch, tmp_path / "side", *three, "hardware.parallel=2") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [
        "stack 1: jobs 1, 2 train together, as one vectorised cohort",
        "side by side: jobs 1-3 run in 2 processes (hardware.parallel=2)",
    ]
    assert sweep(monkeypatch, tmp_path / "one", *three, "hardware.parallel=off") == 0
    assert capsys.readouterr().out.splitlines()[1] == "stack 1: jobs 1-3 train together, as one vectorised cohort"
    side_jobs, one_jobs = jobs(tmp_path / "side"), jobs(tmp_path / "one")
    assert sorted(side_jobs) == sorted(one_jobs) and len(one_jobs) == 3
    for name, frame in one_jobs.items():
        pd.testing.assert_frame_equal(side_jobs[name], frame, check_exact=True)


def test_split_units_splits_stacks_while_that_shortens_the_sweep() -> None:
    every = lambda n: True  # noqa: E731
    assert parallel_launch.split_units([[1, 2, 3, 4, 5]], 2, every) == [[1, 2, 3], [4, 5]]
    assert parallel_launch.split_units([[1, 2, 3, 4, 5]], 4, every) == [[1, 2], [3], [4, 5]]  # 2 rounds at best
    assert parallel_launch.split_units([[1, 2], [3, 4, 5, 6]], 3, every) == [[1, 2], [3, 4], [5, 6]]
    assert parallel_launch.split_units([[1, 2, 3], [4]], 2, every) == [[1, 2], [3], [4]]
    # three stacks of 3 on 2 workers: 6 rounds unsplit, 5 with the first stack split
    assert parallel_launch.split_units([[1, 2, 3], [4, 5, 6], [7, 8, 9]], 2, every) == [
        [1, 2],
        [3],
        [4, 5, 6],
        [7, 8, 9],
    ]
    assert parallel_launch.split_units([[1, 2]], 8, every) == [[1], [2]]
    assert parallel_launch.split_units([[1, 2, 3]], 1, every) == [[1, 2, 3]]
    # finished jobs (1, 2) cost nothing: the jobs that train are halved, a unit of finished jobs is not split
    assert parallel_launch.split_units([[1, 2, 3, 4, 5]], 2, lambda n: n > 2) == [[1, 2, 3, 4], [5]]
    assert parallel_launch.split_units([[1, 2], [3]], 2, lambda n: n > 2) == [[1, 2], [3]]
    assert parallel_launch.makespan([3, 3, 2, 1], 2) == 5 and parallel_launch.makespan([], 2) == 0


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "fedrun.cli", *args], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=foreground)  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Whole:
    """The 3-round sweep run through in one process: what the side-by-side sweep must equal and each stopped sweep
    must resume to (read only, so the tests share it)."""
    return whole_sweep(tmp_path_factory, "fl.rounds=3", *LONE, "hardware.parallel=off")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_a_stopped_side_by_side_sweep_resumes_every_job_to_the_uninterrupted_metrics(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    uninterrupted: Whole,
    how: signal.Signals,
) -> None:
    folder = tmp_path / "sweep"
    args = ["-m", *TINY, "fl.rounds=3", *LONE, "hardware.parallel=2", f"hydra.sweep.dir={folder}",
            f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    proc = _start(tmp_path, *args, PAUSE)
    _wait_for(lambda: len(paused_workers(tmp_path)) == 2, "two jobs did not reach round 2", proc)
    proc.send_signal(how)
    out, err = proc.communicate(timeout=600)
    names = sorted(read_index(folder))
    assert len(names) == 2  # the third job had not started
    if how is signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err, err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"fedrun: stopped by SIGINT in job 0 [{names[0]}]; resume the sweep with: fedrun -m ")
        assert shlex.split(line.split("resume the sweep with: ", 1)[1])[-1] == f"hydra.sweep.dir={folder}"
    status = lambda n: json.loads((folder / n / "summary.json").read_text())["status"]  # noqa: E731
    _wait_for(lambda: {status(n) for n in names} == {"interrupted"}, "a job was left running")  # (its worker's end)
    monkeypatch.chdir(tmp_path)  # the same command resumes it (in this process: its workers are processes still)
    capsys.readouterr()
    assert main_exit_code(monkeypatch, ["fedrun", *args]) == 0
    assert "side by side: jobs 1-3 run in 2 processes" in capsys.readouterr().out
    resumed = jobs(folder)
    assert sorted(resumed) == sorted(uninterrupted.jobs) and len(uninterrupted.jobs) == 3
    for name, frame in uninterrupted.jobs.items():
        pd.testing.assert_frame_equal(resumed[name], frame, check_exact=True)


def test_a_worker_that_dies_costs_its_job_only_and_the_sweep_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "sweep"
    args = ["-m", *TINY, *LONE, "hardware.parallel=2", f"hydra.sweep.dir={folder}", f"cache_dir={tmp_path / 'cache'}"]
    proc = _start(tmp_path, *args, PAUSE)
    _wait_for(lambda: len(paused_workers(tmp_path)) == 2, "two jobs did not reach round 2", proc)
    os.kill(paused_workers(tmp_path)[0], signal.SIGKILL)  # (the out-of-memory killer's way)
    (tmp_path / RELEASE).touch()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    lost = [line for line in err.splitlines() if "its process ended (killed by SIGKILL) before the job did" in line]
    assert len(lost) == 1 and err.strip().splitlines()[-1].startswith("fedrun: 1 of 3 jobs failed (running: 1); ")
    assert sum(": completed, acc " in line for line in out.splitlines()) == 2  # the others, one in a new worker
    monkeypatch.chdir(tmp_path)
    assert sweep(monkeypatch, folder, *LONE, "hardware.parallel=2") == 0  # the same command resumes it
    assert capsys.readouterr().out.count("skipped (already done") == 2


def _spec(make_spec: Callable[..., RunSpec], *overrides: str) -> RunSpec:
    return make_spec("experiment=smoke", "data.max_train_samples=300", *overrides)


def test_auto_runs_side_by_side_only_on_idle_cores_and_memory_for_jobs_of_threads_0(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = {"threads": 1, "cores": 2}
    monkeypatch.setattr(parallel_launch, "measured", lambda: cpu)
    monkeypatch.setattr(parallel_launch, "available_memory", lambda: 16 * 2**30)
    auto = [_spec(make_spec, "hardware.threads=0"), _spec(make_spec, "hardware.threads=0", "seed=1")]
    unit = lambda: parallel_launch.PROCESS_BYTES  # noqa: E731 - the largest unit's bytes, asked for auto only
    assert parallel_launch.choose_workers(auto, unit)[0] == 1  # no idle core but the sweep's: today's sweep
    cpu.update(threads=4, cores=4)
    assert parallel_launch.choose_workers(auto, unit) == (4, "auto: 4 of 4 cores idle, memory for 20")
    assert parallel_launch.choose_workers(auto, lambda: 8 * 2**30)[0] == 1  # half the free memory holds one such unit
    pinned = [_spec(make_spec, "hardware.threads=1"), *auto]
    assert parallel_launch.choose_workers(pinned, unit) == (1, "hardware.threads pinned")
    assert parallel_launch.choose_workers([*auto, _spec(make_spec, "hardware.parallel=off")], unit)[0] == 1
    assert parallel_launch.choose_workers([*pinned, _spec(make_spec, "hardware.parallel=3")], unit)[0] == 3
