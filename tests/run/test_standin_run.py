"""A run on stand-in data says so: a one-line notice, ``data_standin`` in summary.json, the option in config.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrun.cli import main as cli
from tests.conftest import compose_cfg

TINY = [
    "experiment=smoke",
    "data.max_train_samples=200",
    "data.max_test_samples=100",
    "fl.clients=4",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "output.quiet=true",
]


def _run(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, dict]:
    run_dir = tmp_path / name
    cfg = compose_cfg([*TINY, f"cache_dir={tmp_path / 'cache'}", *overrides])
    cli.execute(cfg, run_dir, multirun=True, label=name)
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, yaml.safe_load((run_dir / "config.yaml").read_text())


def test_missing_dataset_runs_on_standin_data_and_is_marked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summary, config = _run(
        tmp_path, "mnist", "data=mnist", "model=mlp", f"data.root={tmp_path / 'none'}", "data.standin=true"
    )  # model=mlp: TINY's model.hidden (MNIST's own model is McMahan's CNN)
    assert summary["status"] == "completed" and summary["data_standin"] is True
    assert config["data"]["standin"] is True
    notices = [ln for ln in capsys.readouterr().err.splitlines() if "stand-in" in ln]
    assert notices == [
        "fedrun: data.standin: mnist files not found, training on stand-in random data of its shape"
        " (the numbers mean nothing)"
    ]


def test_present_dataset_ignores_standin(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summary, _ = _run(tmp_path, "fmnist", "data.standin=true")  # Fashion-MNIST is on this machine
    assert summary["status"] == "completed" and summary["data_standin"] is False
    assert "stand-in" not in capsys.readouterr().err  # same data as without the option: tests/data/test_standin.py
