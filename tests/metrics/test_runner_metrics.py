"""The optional per-round columns reach metrics.csv, summary.json and TensorBoard in a real (tiny) run."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.config.schema import RunSpec
from fedrun.metrics.diagnostics import DIAGNOSTIC_COLUMNS
from fedrun.run.loop import run

TINY = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.threads=1",
    "checkpoint.every=0",
    "checkpoint.keep_final=false",
]


def test_off_by_default_adds_nothing(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    run(make_spec(*TINY), tmp_path)
    cols = set(pd.read_csv(tmp_path / "metrics.csv").columns)
    assert not cols & {*DIAGNOSTIC_COLUMNS, "client_acc_mean", "client_acc_std"}
    assert not (tmp_path / "tb").exists()


def test_client_acc_diagnostics_and_tensorboard(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    tb = ["tracking.tensorboard=true"] if _has_tensorboard() else []
    spec = make_spec(*TINY, "eval.client_acc=true", "eval.diagnostics=true", *tb)
    summary = run(spec, tmp_path)
    df = pd.read_csv(tmp_path / "metrics.csv")
    assert len(df) == 2
    for col in (*DIAGNOSTIC_COLUMNS, "client_acc_mean", "client_acc_std", "client_acc_min", "client_acc_max"):
        assert df[col].notna().all(), col
    assert ((df["grad_coherence"] >= -1) & (df["grad_coherence"] <= 1)).all()
    assert (df["client_dist_max"] >= df["client_dist_mean"]).all()
    assert (df["client_acc_min"] <= df["client_acc_mean"]).all()
    assert (df["client_acc_mean"] <= df["client_acc_max"]).all()
    assert not math.isclose(df["global_update_norm"].iloc[0], 0.0)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["client_acc_mean_final"] == pytest.approx(df["client_acc_mean"].iloc[-1])
    assert summary["client_acc_std_final"] == pytest.approx(df["client_acc_std"].iloc[-1])
    if tb:
        assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def _has_tensorboard() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None
