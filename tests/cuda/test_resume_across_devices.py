"""A checkpoint written on the GPU resumes on the CPU and back; the partition cache serves both devices.

``hardware.device`` is left out of the config fingerprint (fedrun/run/checkpoint.py), so ``fedrun
resume=<dir> hardware.device=cpu`` continues a GPU run. The resumed rounds then agree with an
uninterrupted run to float tolerance (rtol 1e-3 on losses, 0.01 on accuracies), and bit for bit when
both devices are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fedrun.cli import main as cli
from fedrun.run import rounds
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.experiment import build_experiment
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import compose_cfg
from tests.cuda.gpu_util import DEVICE, HARD, SMALL, assert_same_metrics, spec_of

# server state (SCAFFOLD's c, IMA's window of models), client states (c_i, kept momentum) all in the checkpoint
RUN = (
    "algorithm=scaffold",
    "ima.enabled=true",
    "ima.start=0.5",
    "ima.window=2",
    *HARD,
    "fl.rounds=4",
    "checkpoint.every=1",
    "hardware.engine=vectorised",
    "output.quiet=true",
)


def stop_at(call: int) -> Callable[..., object]:
    """The runner's ``evaluate``, interrupted (Ctrl-C) at its ``call``-th call: rounds before it are checkpointed."""
    real, calls = rounds.evaluate, {"n": 0}

    def evaluate(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return evaluate


def start(run_dir: Path, device: str, cache: Path, monkeypatch: pytest.MonkeyPatch, stop: int | None) -> None:
    """``fedrun`` in ``run_dir`` on ``device``; with ``stop``, interrupted in round ``stop`` (after stop-1 rounds)."""
    cfg = compose_cfg([*SMALL, *RUN, f"hardware.device={device}", f"cache_dir={cache}"])
    if stop is None:
        cli.execute(cfg, run_dir, multirun=False)
        return
    with monkeypatch.context() as m:
        m.setattr(rounds, "evaluate", stop_at(stop))
        with pytest.raises(SystemExit) as exit_:
            cli.execute(cfg, run_dir, multirun=False)
    assert exit_.value.code == 130  # 128 + SIGINT
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == stop - 1


def metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=list(TIMING_COLUMNS))


def check_resumed(resumed: Path, first: str, then: str, uninterrupted: Path, interrupted_rows: pd.DataFrame) -> None:
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from_round"] == 2
    assert summary["device"].startswith(torch.device(then).type)
    got = metrics(resumed)
    pd.testing.assert_frame_equal(got.iloc[:2], interrupted_rows, check_exact=True)  # rows from the checkpoint
    if torch.device(first).type == torch.device(then).type:
        pd.testing.assert_frame_equal(got, metrics(uninterrupted), check_exact=True)
    else:
        assert_same_metrics(got, metrics(uninterrupted), rtol=1e-3, acc_atol=0.01)


@pytest.mark.cuda
@pytest.mark.parametrize(("first", "then"), [(DEVICE, "cpu"), ("cpu", DEVICE)])
def test_checkpoint_resumes_on_the_other_device(
    first: str, then: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    whole = tmp_path / "uninterrupted"
    start(whole, first, cache, monkeypatch, stop=None)
    run_dir = tmp_path / "run"
    start(run_dir, first, cache, monkeypatch, stop=3)
    interrupted_rows = metrics(run_dir)
    assert len(interrupted_rows) == 2
    cli.resume(run_dir, [f"hardware.device={then}"])  # fedrun resume=<run_dir> hardware.device=<then>
    check_resumed(run_dir, first, then, whole, interrupted_rows)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["hardware"]["device"] == then


def test_a_gpu_run_resumes_with_device_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # everywhere: a run dir whose config says cuda (as a GPU run writes it) continues with hardware.device=cpu
    cache = tmp_path / "cache"
    whole = tmp_path / "uninterrupted"
    start(whole, "cpu", cache, monkeypatch, stop=None)
    run_dir = tmp_path / "run"
    start(run_dir, "cpu", cache, monkeypatch, stop=3)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["hardware"]["device"] = "cuda"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    interrupted_rows = metrics(run_dir)
    cli.resume(run_dir, ["hardware.device=cpu"])
    check_resumed(run_dir, "cpu", "cpu", whole, interrupted_rows)


@pytest.mark.cuda
def test_partition_cache_serves_gpu_and_cpu_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    gpu = build_experiment(spec_of(cache, f"hardware.device={DEVICE}"))
    files = sorted(cache.glob("*.npz"))
    assert len(files) == 1
    for idx, part in zip(gpu.fed.clients, gpu.parts, strict=True):
        assert idx.device.type == torch.device(DEVICE).type and np.array_equal(idx.cpu().numpy(), part)

    def recompute(*args: object) -> None:
        raise AssertionError("the partition was computed again: a cache miss")

    with monkeypatch.context() as m:
        m.setattr("fedrun.data.partition.np_rng", recompute)  # drawn only when the partition is computed
        cpu = build_experiment(spec_of(cache, "hardware.device=cpu"))
    assert sorted(cache.glob("*.npz")) == files
    fresh = build_experiment(spec_of(tmp_path / "other-cache", "hardware.device=cpu"))
    for a, b, c in zip(cpu.parts, gpu.parts, fresh.parts, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)
