"""`fedrun-report` on a small real multirun: rows/cols from config keys, mean ± std over seeds, files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedrun.cli.report import main as report_main
from tests.conftest import main_exit_code


def test_report_on_a_real_multirun(tmp_path: Path, capsys, monkeypatch) -> None:
    sweep = tmp_path / "sweep"
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", "-m", "algorithm=fedavg,fedprox", "seed=0,1", "data.max_train_samples=1500"]
    argv += ["data.max_test_samples=500", "fl.clients=3", "fl.rounds=2", "partition.alpha=0.1,1.0"]
    argv += [f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}"]
    assert main_exit_code(monkeypatch, argv) == 0  # in-process: the sweep's runs, not its process, are reported
    assert capsys.readouterr().out.count(": completed") == 8
    assert report_main([str(sweep), "--rows", "algorithm", "--cols", "partition.alpha", "--metric", "final"]) == 0
    out = capsys.readouterr().out
    assert "fedavg" in out and "fedprox" in out and "partition.alpha=0.1" in out and "±" in out
    long = pd.read_csv(sweep / "reports" / "report_final.csv")
    assert len(long) == 4 and (long["n"] == 2).all()
    assert (long["mean"] > 10).all()  # percent, above chance
    tex = (sweep / "reports" / "report_final.tex").read_text()
    assert tex.startswith("\\begin{table}") and "\\caption{test accuracy (\\%) after the last round" in tex
    assert "partition.alpha=0.1" in tex and "±" not in tex and "$\\pm$" in tex
    assert report_main([str(sweep), "--table", "rows=seed", "cols=algorithm", "--over", "partition.alpha"]) == 0
    assert report_main([str(sweep), "--table", "rows=seed", "cols=algorithm"]) == 2  # alpha would be pooled
    assert report_main([str(sweep), "--rows", "no.such.key"]) == 2
