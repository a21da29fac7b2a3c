"""A report cannot pool what it was not asked to pool; it says what is missing, duplicated or unreadable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrun.cli.report import main as report_main
from fedrun.report.collect import collect_runs, run_labels
from fedrun.report.pooling import PoolingError, check_pooling, drop_duplicates, missing_runs
from fedrun.report.tables import make_table
from tests.report.fake_runs import fake_run

REPO = Path(__file__).resolve().parents[2]


def flat(text: str) -> str:
    """Whitespace collapsed (Markdown pads cells to the column width)."""
    return " ".join(text.split())


def _alpha_sweep(root: Path) -> dict[tuple[str, float, int], float]:
    """fedavg/fedprox x alpha 0.1/1.0 x seeds 0/1, each with its own accuracy."""
    accs = {}
    for i, (alg, alpha, seed) in enumerate(
        (a, al, s) for a in ("fedavg", "fedprox") for al in (0.1, 1.0) for s in (0, 1)
    ):
        accs[(alg, alpha, seed)] = 0.40 + 0.05 * i
        cfg = {"algorithm.name": alg, "partition.name": "dirichlet", "partition.alpha": alpha, "seed": seed}
        fake_run(root / f"{i}", cfg, accs[(alg, alpha, seed)])
    return accs


def test_a_key_that_varies_inside_a_cell_is_an_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _alpha_sweep(tmp_path)
    # the old report averaged alpha 0.1 and 1.0 into one cell without a word
    assert report_main([str(tmp_path), "--rows", "algorithm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun-report: error: partition.alpha varies inside a cell (algorithm=fedavg: 0.1, 1.0)")
    assert "--over seed,partition.alpha" in err and err.count("\n") == 1
    assert not (tmp_path / "reports" / "report_last_k.md").exists()  # nothing half-written


def test_over_names_the_keys_a_cell_may_average(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    accs = _alpha_sweep(tmp_path)
    assert report_main([str(tmp_path), "--rows", "algorithm", "--over", "seed,partition.alpha"]) == 0
    long = pd.read_csv(tmp_path / "reports" / "report_last_k.csv").set_index("algorithm")
    fedavg = 100 * np.array([v for k, v in accs.items() if k[0] == "fedavg"])
    assert long.loc["fedavg", "mean"] == pytest.approx(fedavg.mean())
    assert long.loc["fedavg", "std"] == pytest.approx(fedavg.std(ddof=1))
    assert long.loc["fedavg", "completed"] == 4


def test_split_makes_the_varying_key_a_column(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    accs = _alpha_sweep(tmp_path)
    assert report_main([str(tmp_path), "--rows", "algorithm", "--split"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("| algorithm=fedprox"))
    a, b = 100 * accs[("fedprox", 1.0, 0)], 100 * accs[("fedprox", 1.0, 1)]
    assert f"{(a + b) / 2:.2f} ± {np.std([a, b], ddof=1):.2f}" in line
    assert "partition.alpha=1.0" in out.splitlines()[0]


def test_runs_of_different_length_are_not_pooled(tmp_path: Path) -> None:
    for seed, rounds in ((0, 5), (1, 10)):
        fake_run(tmp_path / f"r{seed}", {"algorithm.name": "fedavg", "seed": seed, "fl.rounds": rounds})
    runs = collect_runs([tmp_path])[0]
    with pytest.raises(PoolingError, match=r"fl.rounds varies inside a cell \(algorithm=fedavg: 10, 5\)"):
        make_table(runs, ["algorithm"], [], "last_k")
    check_pooling(runs, ["algorithm"], ["seed", "fl.rounds"])  # asked for: no error


def test_labels_are_key_value_never_tuples(tmp_path: Path) -> None:
    _alpha_sweep(tmp_path)
    runs = collect_runs([tmp_path])[0]
    table, _ = make_table(runs, ["algorithm", "partition.alpha"], [], "final")
    assert list(table.index) == [
        "algorithm=fedavg, partition.alpha=0.1",
        "algorithm=fedavg, partition.alpha=1.0",
        "algorithm=fedprox, partition.alpha=0.1",
        "algorithm=fedprox, partition.alpha=1.0",
    ]
    assert "(" not in table.to_markdown().splitlines()[2]


def test_cells_show_n_when_it_differs_and_missing_seeds_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for seed in (0, 1, 2):
        fake_run(tmp_path / f"a{seed}", {"algorithm.name": "fedavg", "seed": seed}, 0.50 + seed / 100)
    for seed in (0, 1):  # fedprox lacks seed 2
        fake_run(tmp_path / f"b{seed}", {"algorithm.name": "fedprox", "seed": seed}, 0.60 + seed / 100)
    assert report_main([str(tmp_path)]) == 0
    out = flat(capsys.readouterr().out)
    assert f"| algorithm=fedprox | 60.50 ± {np.std([60.0, 61.0], ddof=1):.2f} (n=2) |" in out
    assert "| algorithm=fedavg | 51.00 ± 1.00 |" in out  # the common n is not repeated
    assert "1 runs missing (a cell, or a value other cells have): algorithm=fedprox: seed=2" in out
    assert "n = 3 runs (seed) per cell unless a cell says (n=...)" in out


def test_duplicate_run_dirs_count_once_and_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed in (0, 1, 2):
        fake_run(tmp_path / "a" / f"{seed}", {"algorithm.name": "fedavg", "seed": seed}, 0.5 + seed / 10)
    for seed in (0, 1):  # the same sweep run again into other job dirs (the n=5 for 3 seeds)
        fake_run(tmp_path / "b" / f"{seed}", {"algorithm.name": "fedavg", "seed": seed}, 0.5 + seed / 10)
    runs, _ = collect_runs([tmp_path])
    kept, dups = drop_duplicates(runs)
    assert len(kept) == 3 and sorted(Path(d.run_dir).parent.name for d in dups) == ["b", "b"]
    assert report_main([str(tmp_path)]) == 0
    out = flat(capsys.readouterr().out)
    assert f"| algorithm=fedavg | 60.00 ± {np.std([50, 60, 70], ddof=1):.2f} |" in out
    assert "2 duplicate run dirs (the same config as another; counted once):" in out
    assert f"{tmp_path / 'b' / '0'}: same config as {tmp_path / 'a' / '0'}" in out
    assert pd.read_csv(tmp_path / "reports" / "report_last_k.csv")["n"].tolist() == [3]


@pytest.mark.parametrize(
    ("file", "content", "why"),
    [
        ("summary.json", '{"status": "comp', "summary.json: "),
        ("summary.json", "[1, 2, 3]", "summary.json: not a fedrun summary"),
        ("summary.json", b"\xff\xfe\x00garbage", "summary.json: "),
        ("summary.json", '{"status": 3}', "summary.json: not a fedrun summary"),
        ("config.yaml", "a: [unclosed", "config.yaml: "),
        ("config.yaml", "just a string", "config.yaml: not a mapping"),
        ("config.yaml", "!!python/object:os.system {}", "config.yaml: "),
    ],
)
def test_a_damaged_run_dir_is_listed_and_the_others_tabled(
    tmp_path: Path, capsys: pytest.CaptureFixture, file: str, content: str | bytes, why: str
) -> None:
    for seed in (0, 1):
        fake_run(tmp_path / f"ok{seed}", {"algorithm.name": "fedavg", "seed": seed}, 0.5 + seed / 10)
    bad = fake_run(tmp_path / "bad", {"algorithm.name": "fedavg", "seed": 2}, 0.9)
    (bad / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    assert report_main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "| algorithm=fedavg | 55.00 ± 7.07 |" in flat(captured.out)  # the damaged run is not in the table
    assert "1 unreadable run dirs (left out):" in captured.out
    assert f"{bad}: {why}" in captured.out


def test_only_damaged_runs_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = fake_run(tmp_path / "bad", {"algorithm.name": "fedavg"}, 0.9)
    (bad / "summary.json").write_text("{")
    assert report_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun-report: error: no readable runs under") and err.count("\n") == 1


def test_a_cell_without_runs_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake_run(tmp_path / "a", {"algorithm.name": "fedavg", "partition.alpha": 0.1}, 0.5)
    fake_run(tmp_path / "b", {"algorithm.name": "fedavg", "partition.alpha": 1.0}, 0.6)
    fake_run(tmp_path / "c", {"algorithm.name": "fedprox", "partition.alpha": 0.1}, 0.7)
    assert report_main([str(tmp_path), "--cols", "partition.alpha"]) == 0
    out = flat(capsys.readouterr().out)
    assert "| algorithm=fedprox | 70.00 | missing |" in out
    assert "runs missing (a cell, or a value other cells have): algorithm=fedprox, partition.alpha=1.0: no runs" in out


def test_missing_runs_over_several_keys() -> None:
    runs = pd.DataFrame(
        {"algorithm": ["a", "a", "b"], "seed": [0, 1, 0], "status": "completed", "run_dir": ["x", "y", "z"]}
    )
    assert missing_runs(runs, ["algorithm"], ["seed"]) == ["algorithm=b: seed=1"]
    assert missing_runs(runs, ["algorithm"], []) == []


def test_run_labels_name_the_method_not_the_job_number(tmp_path: Path) -> None:
    a = fake_run(tmp_path / "0", {"algorithm.name": "fedavg", "tags.method": "FedAvg", "seed": 0})
    b = fake_run(tmp_path / "1", {"algorithm.name": "fedsam", "seed": 0})
    c = fake_run(tmp_path / "2", {"algorithm.name": "fedsam", "seed": 1})
    assert run_labels([a, b, c]) == ["FedAvg", "fedsam (seed=0)", "fedsam (seed=1)"]


def test_report_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    for i in range(1500):  # a table far longer than a pipe's buffer (64 KiB)
        fake_run(tmp_path / f"{i}", {"algorithm.name": "fedavg", "tags.method": f"method {i:04d} " + "x" * 100})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "fedrun.cli.report", str(tmp_path), "--rows", "tags.method"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()  # `| head -1`
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0
    assert err == "", err
