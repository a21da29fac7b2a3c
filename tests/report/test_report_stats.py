"""Rounds saved vs a baseline and the spread of a metric across settings (FedGAM sigma(E), sigma(C))."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from fedrun.report.stats import load_metrics, rounds_saved, rounds_saved_vs, rounds_to_target, std_across


def _curve(accs: list[float], every: int = 1) -> pd.DataFrame:
    return pd.DataFrame({"round": [every * (i + 1) for i in range(len(accs))], "test_acc": accs})


def test_rounds_to_target_is_the_first_round_at_or_above() -> None:
    assert rounds_to_target(_curve([0.1, 0.5, 0.4, 0.7]), 0.5) == 2
    assert rounds_to_target(_curve([0.1, 0.5, 0.4, 0.7], every=5), 0.6) == 20
    assert rounds_to_target(_curve([0.1, 0.2]), 0.5) is None


def test_rounds_saved_against_a_baseline(tmp_path: Path) -> None:
    run, base = _curve([0.3, 0.6, 0.8, 0.8]), _curve([0.2, 0.3, 0.5, 0.7, 0.8, 0.85])
    s = rounds_saved(run, base, 0.7)
    assert (s.run_round, s.baseline_round, s.saved) == (3, 4, 1)
    assert s.speedup == pytest.approx(4 / 3)
    assert rounds_saved(base, run, 0.7).saved == -1  # the slower run "saves" a negative number
    # the baseline never gets there within its 6 rounds: at least 6 - 2 rounds saved
    never = rounds_saved(run, _curve([0.1] * 6), 0.6)
    assert never.saved is None and never.speedup is None and never.saved_at_least == 4
    assert rounds_saved(_curve([0.1]), base, 0.9).saved_at_least is None
    (tmp_path / "metrics.csv").write_text(run.to_csv(index=False))
    assert rounds_saved(load_metrics(tmp_path), base, 0.7).saved == 1


def test_std_across_settings_averages_seeds_first() -> None:
    runs = pd.DataFrame(
        {
            "algorithm": ["fedavg"] * 4 + ["fedgam"] * 3,
            "fl.local_epochs": [5, 5, 10, 10, 5, 10, 20],
            "summary.test_acc_final": [0.70, 0.72, 0.80, 0.80, 0.90, 0.90, 0.90],
            "status": ["completed"] * 6 + ["diverged"],
        }
    )
    out = std_across(runs, "fl.local_epochs", "summary.test_acc_final").set_index("algorithm")
    assert out.loc["fedavg", "values"] == pytest.approx((0.71, 0.80))
    assert out.loc["fedavg", "std"] == pytest.approx(0.045)  # population std of {0.71, 0.80}
    assert out.loc["fedavg", "var"] == pytest.approx(0.045**2)
    assert out.loc["fedgam", "std"] == pytest.approx(0.0) and out.loc["fedgam", "n_values"] == 2
    sample = std_across(runs, "fl.local_epochs", "summary.test_acc_final", ddof=1).set_index("algorithm")
    assert sample.loc["fedavg", "std"] == pytest.approx(0.09 / math.sqrt(2))
    with pytest.raises(ValueError, match="no column 'fl.participation'"):
        std_across(runs, "fl.participation", "summary.test_acc_final")


def test_rounds_saved_vs_pairs_each_run_with_its_baseline(tmp_path: Path) -> None:
    curves = {
        ("fedavg", 0): [0.2, 0.5, 0.7, 0.8],
        ("fedavg", 1): [0.3, 0.6, 0.65, 0.72],
        ("fedlaw", 0): [0.5, 0.75, 0.8, 0.8],
        ("fedlaw", 1): [0.2, 0.3, 0.4, 0.5],
    }
    rows = []
    for (algo, seed), accs in curves.items():
        d = tmp_path / f"{algo}-{seed}"
        d.mkdir()
        (d / "metrics.csv").write_text(_curve(accs).to_csv(index=False))
        rows.append({"algorithm": algo, "seed": seed, "run_dir": str(d)})
    out = rounds_saved_vs(pd.DataFrame(rows), "fedavg", 0.7).set_index(["algorithm", "seed"])
    assert out.loc[("fedlaw", 0), "rounds_saved"] == 1  # round 2 vs the seed-0 baseline's round 3
    assert out.loc[("fedavg", 1), "rounds_saved"] == 0  # the baseline against itself
    assert math.isnan(out.loc[("fedlaw", 1), "rounds_saved"])  # never reaches 0.7
    assert out.loc[("fedlaw", 1), "baseline_round"] == 4
