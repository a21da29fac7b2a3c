"""``hardware.device=auto`` in a multirun: job n runs on GPU n mod k.

With a fake device count the assignment is checked on any machine, through a real Hydra multirun whose
jobs run in parallel worker processes (joblib); on a machine with GPUs, the jobs really run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO

TINY = (
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=1",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "hardware.device=auto",
    "output.plots=false",
    "checkpoint.every=0",
)

# Imported by every Python process of the sweep (the CLI and joblib's workers) through PYTHONPATH: torch reports
# FAKE_GPUS devices; each job records the device ``auto`` resolved to, then trains on the CPU (there is no GPU).
FAKE_GPUS = """
import os

import torch

torch.cuda.device_count = lambda: int(os.environ["FAKE_GPUS"])

from fedrun.run import experiment as runner  # noqa: E402
from fedrun.run import loop
from fedrun.host.devices import multirun_job_num  # noqa: E402

_resolve = runner.resolve_device


def resolve_device(name):
    device = _resolve(name)
    with open(os.environ["FAKE_GPU_LOG"], "a") as f:
        f.write(f"{multirun_job_num()} {device}\\n")
    return torch.device("cpu")


runner.resolve_device = resolve_device
"""


def sweep(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    run_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "fedrun.cli", "-m", *TINY, *args]
    cmd += [f"hydra.sweep.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    # the repository first, then what the caller's PYTHONPATH held (a GPU machine's carried packages)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=full_env, cwd=tmp_path)


def summaries(tmp_path: Path) -> dict[int, dict]:
    """Each job's summary.json by its seed (job n of ``seed=0,1,...`` has seed n): job dirs are keyed by content."""
    found = [json.loads(f.read_text()) for f in (tmp_path / "sweep").glob("*/summary.json")]
    return {s["seed"]: s for s in found}


def test_device_auto_spreads_a_parallel_multirun_over_fake_gpus(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="Hydra's joblib launcher is not installed")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAKE_GPUS)
    log = tmp_path / "devices.log"
    path = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "FAKE_GPUS": "3", "FAKE_GPU_LOG": str(log)}
    res = sweep(tmp_path, "hydra/launcher=parallel", "seed=0,1,2,3", env=env)
    assert res.returncode == 0, res.stderr
    seen = sorted(tuple(line.split()) for line in log.read_text().splitlines())
    assert seen == [(str(n), f"cuda:{n % 3}") for n in range(4)]  # job n on GPU n mod 3: job 3 wraps to GPU 0
    jobs = summaries(tmp_path)
    assert sorted(jobs) == [0, 1, 2, 3] and {s["status"] for s in jobs.values()} == {"completed"}


@pytest.mark.cuda
def test_device_auto_multirun_runs_each_job_on_gpu_n_mod_k(tmp_path: Path) -> None:
    k = torch.cuda.device_count()  # 0 in a CPU dry run: every job then runs on the CPU
    res = sweep(tmp_path, "seed=0,1,2")
    assert res.returncode == 0, res.stderr
    jobs = summaries(tmp_path)
    assert sorted(jobs) == [0, 1, 2]
    for n, summary in jobs.items():
        assert summary["status"] == "completed"
        assert summary["device"] == (f"cuda:{n % k}" if k else "cpu")
