"""A short real run on fmnist_domains: per-domain breakdown in summary.json, and fedrun-report --partition."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedrun.cli.report import main as report_main
from fedrun.run.loop import run


def test_domains_run_writes_breakdown_and_report(make_spec, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    spec = make_spec(
        "data=fmnist_domains",
        "partition=domains",
        "experiment=smoke",
        "data.max_train_samples=2000",
        "data.max_test_samples=200",
        "fl.rounds=1",
        "output.plots=true",
    )
    summary = run(spec, tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["partition_stats"]["clients"] == 10
    dom = written["partition_domains"]
    assert sorted(dom) == sorted(["plain", "rotate", "invert", "noise", "colour"])
    assert all(v["clients"] == 2 for v in dom.values())  # 10 clients / 5 domains, one domain each
    assert summary["partition_domains"] == dom
    table = np.loadtxt(tmp_path / "partition_domains.csv", delimiter=",", skiprows=1)[:, 2:]
    assert ((table > 0).sum(1) == 1).all()
    assert report_main(["partition", str(tmp_path), "--out", str(tmp_path.parent / "figs" / "part.png")]) == 0
    out = capsys.readouterr().out
    assert "clients holding more than one domain: 0 of 10" in out
    assert (tmp_path.parent / "figs" / "part.png").stat().st_size > 0
    assert (tmp_path.parent / "figs" / "part_domains.png").stat().st_size > 0


def test_report_partition_missing_dir(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert report_main(["--partition", str(tmp_path)]) == 2
    assert "partition.csv" in capsys.readouterr().err
