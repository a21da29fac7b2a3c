"""A ``-smoke`` reproduce target runs end to end through ``fedrun-reproduce run`` (as
``python -m fedrun.cli.reproduce``) and prints the paper's layout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.cli import reproduce

REPO = Path(__file__).resolve().parents[2]


def test_fedcos_table2_smoke_prints_the_gain_layout(tmp_path: Path) -> None:
    out = tmp_path / "cos"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [
        "run",
        "fedcos-table2",
        "--smoke",
        "--methods",
        "FedAvg,FedCos(0.02)",
        "--set",
        "partition.iid_fraction=0.0",
        "--out",
        str(out),
    ]
    r = subprocess.run(
        [sys.executable, "-m", "fedrun.cli.reproduce", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    # one line per run, then the table; before: two lines per run of every override on stdout, and each run's
    # start, rounds and end on stderr (~277 KB for a whole -smoke target)
    assert r.stderr == ""
    runs = [ln for ln in r.stdout.splitlines() if re.match(r"\[\d/2\] ", ln)]
    assert len(runs) == 2 and all(re.search(r": completed, acc \d+\.\d\d% \(\d+\.\d s\)$", ln) for ln in runs), runs
    # nothing varies: the hash (side by side on idle cores, the two commands' lines come in either order)
    assert any(re.match(r"\[1/2\] FedAvg fedcos_table2_fmnist_mlp [0-9a-f]{8}: ", ln) for ln in runs), runs
    assert r.stdout.splitlines()[0] == f"sweep of 2 jobs in {out / 'fedcos_table2_fmnist_mlp'}"
    lines = {ln.split("|")[1].strip(): ln for ln in r.stdout.splitlines() if ln.startswith("| Fed")}
    assert set(lines) == {"FedAvg", "FedCos(0.02)"}
    assert "(+" in lines["FedCos(0.02)"] or "(-" in lines["FedCos(0.02)"]  # "acc (gain)" over FedAvg
    # beside the runs (the common parent of the one preset's job folders), never inside a run dir
    assert (out / "fedcos_table2_fmnist_mlp" / "reports" / "report_fedcos.md").is_file()
    assert len(list(out.rglob("summary.json"))) == 2
    # a -smoke sweep ends with one line instead of the scorecard: shrunk runs are never compared to the paper
    assert r.stdout.rstrip().splitlines()[-1].startswith("scorecard: not compared; -smoke runs are shrunk")


def test_dry_run_and_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    # the command's main() in this process (the run above goes through `python -m`)
    code = reproduce.main(["run", "fedsam-table2", "--dry-run"])
    r = capsys.readouterr()
    assert code == 0, r.err
    assert r.out.count("\nfedrun -m ") + r.out.startswith("fedrun -m ") == 7 and "--layout fedsam" in r.out
    assert reproduce.main(["run", "nope"]) == 2 and "unknown target" in capsys.readouterr().err
