"""fedrun-report says which runs trained on stand-in data (``data.standin``), under the table and in its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrun.cli.report import main as report_main


def _run(d: Path, data: str, seed: int, standin: bool) -> None:
    d.mkdir(parents=True)
    cfg = {"algorithm": {"name": "fedavg"}, "data": {"name": data, "standin": True}, "seed": seed}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    summary = {"status": "completed", "data": data, "data_standin": standin, "test_acc_last_k": 0.5 + seed / 10}
    (d / "summary.json").write_text(json.dumps(summary))


def test_report_names_the_datasets_replaced_by_standin_data(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed in (0, 1):
        _run(tmp_path / f"c{seed}", "cifar10", seed, standin=True)
        _run(tmp_path / f"p{seed}", "pacs", seed, standin=True)
        _run(tmp_path / f"f{seed}", "fmnist", seed, standin=False)  # asked for, but the files were there
    assert report_main([str(tmp_path), "--rows", "data"]) == 0
    out = capsys.readouterr().out
    line = "stand-in data (dataset files not found): cifar10, pacs; 4 of 6 runs trained on seeded random data"
    assert line in out and line in (tmp_path / "reports" / "report_last_k.md").read_text()
    assert "fmnist" not in out.split("stand-in data")[1].splitlines()[0]


def test_no_note_for_real_data(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _run(tmp_path / "f0", "fmnist", 0, standin=False)
    assert report_main([str(tmp_path), "--rows", "data"]) == 0
    assert "stand-in" not in capsys.readouterr().out
