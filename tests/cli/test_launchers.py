"""Sweeps through Hydra's launchers (joblib, submitit's local executor) and per-job device assignment."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import open_dict

from fedrun.config.schema import RunSpec
from fedrun.host.devices import job_device, multirun_job_num
from fedrun.run import experiment as runner
from fedrun.run.loop import run
from fedrun.run.sweep_index import find_jobs, read_index
from tests.conftest import CONF_DIR

TINY = (
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=2",
    "model.hidden=[32]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "hardware.device=auto",
    "output.plots=false",
    "checkpoint.every=0",
)
TIMINGS = ["round_seconds", "aggregate_seconds", "seconds"]


def _metrics(d: Path) -> pd.DataFrame:
    return pd.read_csv(d / "metrics.csv").drop(columns=TIMINGS)


def test_joblib_multirun_of_4_jobs_matches_single_runs(
    run_cli: Callable, make_spec: Callable[..., RunSpec], tmp_path: Path
) -> None:
    res = run_cli("-m", "hydra/launcher=parallel", *TINY, "seed=0,1,2,3")
    assert res.returncode == 0, res.stderr
    sweep = tmp_path / "run"
    launcher = yaml.safe_load((sweep / "multirun.yaml").read_text())["hydra"]["launcher"]
    assert launcher["_target_"].endswith("JoblibLauncher") and launcher["n_jobs"] == 2
    assert len(read_index(sweep)) == 4  # each job's directory (named by its config) is in the sweep's index
    # the jobs run in joblib's processes: each prints its end line there, the sweep its directory at start and end
    ends = [ln for ln in res.stdout.splitlines() if ": completed, acc " in ln]
    assert sorted(ln.split(" ")[0] for ln in ends) == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], res.stdout
    assert f"sweep of 4 jobs in {sweep}" in res.stdout
    assert f"sweep done (4 completed): {sweep}; its table: fedrun-report table {sweep}" in res.stdout
    for seed in range(4):
        (job,) = find_jobs(sweep, f"seed={seed}")
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["seed"] == seed and summary["device"] == "cpu"
        reference = tmp_path / f"reference-{seed}"
        reference.mkdir()
        run(make_spec(*TINY, f"seed={seed}"), reference)
        pd.testing.assert_frame_equal(_metrics(job), _metrics(reference), check_exact=True)


def test_submitit_local_multirun_completes(run_cli: Callable, tmp_path: Path) -> None:
    res = run_cli("-m", "hydra/launcher=slurm_local", *TINY, "seed=0,1")
    assert res.returncode == 0, res.stderr
    sweep = tmp_path / "run"
    for seed in (0, 1):
        (job,) = find_jobs(sweep, f"seed={seed}")
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rounds_completed"] == 2
    assert any((sweep / ".submitit").rglob("*_result.pkl"))  # the jobs really went through submitit


# ---- per-job device ------------------------------------------------------------------------------------------------
def test_job_device_spreads_jobs_over_gpus() -> None:
    assert [job_device(n, 4) for n in range(6)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert job_device(7, 1) == "cuda:0"  # SLURM: each job sees only its own GPU
    assert job_device(3, 0) == "cpu" and job_device(None, 0) == "cpu"
    assert job_device(None, 8) == "cuda"  # a single run: the default GPU


@pytest.fixture
def hydra_job() -> Iterator[Callable[[RunMode, int], None]]:
    """Make this process look like job ``num`` of a Hydra run/multirun (restored afterwards)."""
    instance = HydraConfig.instance()
    saved = instance.cfg

    def _set(mode: RunMode, num: int) -> None:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose(config_name="config", return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.mode = mode
            cfg.hydra.job.num = num
        instance.set_config(cfg)

    yield _set
    instance.cfg = saved
    GlobalHydra.instance().clear()


def test_device_auto_in_a_multirun_takes_gpu_job_mod_n(
    hydra_job: Callable[[RunMode, int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    hydra_job(RunMode.MULTIRUN, 6)
    assert multirun_job_num() == 6
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert runner.resolve_device("auto") == torch.device("cuda:2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert runner.resolve_device("auto") == torch.device("cpu")
    hydra_job(RunMode.RUN, 6)
    assert multirun_job_num() is None
