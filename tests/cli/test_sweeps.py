"""Sweeps that can grow (job directories keyed by config), and that stop on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fedrun.cli.sweeps import find_jobs, job_dir_name, read_index, record_job
from fedrun.report.collect import load_runs
from tests.conftest import REPO, compose_cfg

TINY = [
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "fl.rounds=1",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=0",
]


def test_the_job_dir_is_a_hash_of_the_result_relevant_config() -> None:
    name = job_dir_name(compose_cfg(["seed=0"]), ["seed=0"])
    assert len(name) == 12 and int(name, 16) >= 0
    # the same config however the command spells it; settings that do not change results do not count
    assert job_dir_name(compose_cfg([]), []) == name
    assert job_dir_name(compose_cfg(["output.plots=false", "checkpoint.every=1", "cache_dir=/x"]), []) == name
    assert job_dir_name(compose_cfg(["seed=1"]), []) != name
    assert job_dir_name(compose_cfg(["algorithm=fedprox"]), []) != job_dir_name(compose_cfg(["algorithm=fedavg"]), [])
    # a config that does not resolve is keyed by its overrides (validation then names the field in error.txt)
    bad = job_dir_name(compose_cfg(["fl.lr=${undefined.key}"]), ["fl.lr=${undefined.key}"])
    assert bad.startswith("unresolved-") and bad != job_dir_name(compose_cfg(["fl.lr=${x}"]), ["fl.lr=${x}"])


def test_the_index_maps_each_job_dir_to_the_overrides_that_last_ran_it(tmp_path: Path) -> None:
    record_job(tmp_path, "aaa", ["seed=0", "algorithm=fedavg"])
    record_job(tmp_path, "bbb", ["seed=1", "++tags.method='FedProx(0.1)'"])
    record_job(tmp_path, "aaa", ["algorithm=fedavg", "seed=0", "fl.rounds=3"])
    assert read_index(tmp_path) == {
        "aaa": "algorithm=fedavg seed=0 fl.rounds=3",
        "bbb": "seed=1 ++tags.method='FedProx(0.1)'",
    }
    assert find_jobs(tmp_path, "seed=0") == [tmp_path / "aaa"]
    assert find_jobs(tmp_path, "seed=1", "++tags.method='FedProx(0.1)'") == [tmp_path / "bbb"]
    assert (tmp_path / "index.yaml").read_text().startswith("# fedrun sweep: job directory")


def test_a_sweep_grows_by_its_new_jobs_only_and_the_report_sees_each_config_once(
    run_cli: Callable, tmp_path: Path
) -> None:
    """seed=0 -> seed=0,1 under two methods: with job-number directories the second command met other configs
    in jobs 1 and 2 (refused) and ran FedProx seed 0 again; keyed by config, it runs only the two new jobs."""
    sweep = tmp_path / "run"
    first = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0")
    assert first.returncode == 0, first.stderr
    done = {p: (p / "metrics.csv").stat().st_mtime_ns for p in find_jobs(sweep, "seed=0")}
    assert len(done) == 2

    second = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0,1")
    assert second.returncode == 0, second.stderr
    assert second.stderr.count("already completed; skipped") == 2
    assert {p: (p / "metrics.csv").stat().st_mtime_ns for p in done} == done  # reused, not rerun
    jobs = [p for p in sweep.iterdir() if p.is_dir()]
    assert len(jobs) == 4 and sorted(p.name for p in jobs) == sorted(read_index(sweep))
    for p in jobs:
        assert json.loads((p / "summary.json").read_text())["status"] == "completed"
    runs = load_runs([sweep])
    assert len(runs) == 4 and runs.groupby(["algorithm", "seed"]).size().tolist() == [1, 1, 1, 1]


def test_ctrl_c_stops_a_sweep(tmp_path: Path) -> None:
    """Ctrl-C in job 0 ends the sweep (exit 130, one line); before, the next job started and the sweep exited 0."""
    sweep = tmp_path / "sweep"
    long = [*TINY, "fl.rounds=400", "checkpoint.every=1"]
    job0 = sweep / job_dir_name(compose_cfg([*long, "seed=0"]), [])
    cmd = [sys.executable, "-m", "fedrun.cli", "-m", *long, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*cmd, f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 180
    while not (job0 / "checkpoint.pt").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "job 0 wrote no checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "fedrun: stopped by SIGINT; the same command (same hydra.sweep.dir) resumes a sweep" in err
    assert "Traceback" not in err
    assert json.loads((job0 / "summary.json").read_text())["status"] == "interrupted"
    assert list(read_index(sweep)) == [job0.name]  # job 1 never started
