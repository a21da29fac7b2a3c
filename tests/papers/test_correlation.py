"""FedLAW Table 11 (``--layout fedlaw_corr``): accumulated lambda, data size and heterogeneity degree from a run's
files, Pearson r per run, the pooled column, and the run order the reports rely on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE
from fedrun.papers.correlation import client_factors
from fedrun.papers.layouts import render
from fedrun.report.collect import find_runs
from fedrun.storage.figures import write_partition

# 5 clients x 3 classes; HD = 1 / population variance of the class proportions, worked out by hand:
# c0 uniform (variance 0: HD infinite, left out), c1 and c4 (2/3, 1/3, 0): 27/2, c2 (1, 0, 0): 9/2, c3 (1/2, 1/2, 0): 18
COUNTS = np.array([[10, 10, 10], [20, 10, 0], [30, 0, 0], [5, 5, 0], [40, 20, 0]])
DS = np.array([30.0, 30, 30, 10, 60])
HD = np.array([np.inf, 13.5, 4.5, 18.0, 13.5])


def write_run(run_dir: Path, lambdas: list[np.ndarray], clients: list[int] | None = None) -> None:
    """A run directory with partition.csv and one client_weights.csv round per entry of ``lambdas``."""
    run_dir.mkdir(parents=True)
    write_partition(run_dir, COUNTS, plots=False)
    ids = clients if clients is not None else list(range(len(COUNTS)))
    rows = [
        {"round": t + 1, "client": c, "size": DS[c], "p": 0.0, "coef": lam[j], "lambda": lam[j]}
        for t, lam in enumerate(lambdas)
        for j, c in enumerate(ids)
    ]
    pd.DataFrame(rows).to_csv(run_dir / CLIENT_WEIGHTS_FILE, index=False)


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "completed", "tags.method": "Attentive LAW", **r} for r in rows])


def test_factors_follow_the_definitions(tmp_path: Path) -> None:
    lam = DS / DS.sum()
    write_run(tmp_path / "a", [lam, lam, lam])
    f = client_factors(tmp_path / "a")
    np.testing.assert_allclose(f["aw"], 3 * lam)  # lambda summed over the 3 rounds
    np.testing.assert_array_equal(f["ds"], DS)
    np.testing.assert_allclose(f["hd"], HD)
    np.testing.assert_allclose(f["ds_hd"], DS * HD)
    write_run(tmp_path / "b", [np.array([0.5, 0.5]), np.array([0.2, 0.8])], clients=[1, 3])  # partial participation
    np.testing.assert_allclose(client_factors(tmp_path / "b")["aw"], [0, 0.7, 0, 1.3, 0])


def test_table11_cells_and_pooled_column(tmp_path: Path) -> None:
    up = DS / DS.sum()  # aw proportional to data size: r(DS) = 1
    other = np.array([0.1, 0.3, 0.05, 0.4, 0.15])
    rows = []
    for seed, e, lam in ((8, 1, up), (8, 5, other), (9, 1, up), (9, 5, other[::-1])):
        d = tmp_path / f"s{seed}e{e}"
        write_run(d, [lam, lam])
        rows.append({"seed": seed, "fl.local_epochs": e, "run_dir": str(d)})
    t = render("fedlaw_corr", frame(rows), ["tags.method"], ["fl.local_epochs"])
    assert list(t.columns) == ["E=1", "E=5", "E=1 & E=5"]
    assert list(t.index) == ["Dataset size (DS)", "Heterogeneity degree (HD)", "DS×HD"]
    assert t.loc["Dataset size (DS)", "E=1"] == "1.000 ± 0.000"

    def r(aw: np.ndarray, x: np.ndarray) -> float:
        ok = np.isfinite(x)
        return float(np.corrcoef(aw[ok], x[ok])[0, 1])

    hd5 = [r(2 * other, HD), r(2 * other[::-1], HD)]
    assert t.loc["Heterogeneity degree (HD)", "E=5"] == f"{np.mean(hd5):.3f} ± {np.std(hd5, ddof=1):.3f}"
    pooled = [r(np.r_[2 * up, 2 * o], np.r_[DS * HD, DS * HD]) for o in (other, other[::-1])]
    assert t.loc["DS×HD", "E=1 & E=5"] == f"{np.mean(pooled):.3f} ± {np.std(pooled, ddof=1):.3f}"


def test_runs_without_client_weights_show_a_dash(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    write_partition(tmp_path / "r", COUNTS, plots=False)
    t = render("fedlaw_corr", frame([{"seed": 8, "fl.local_epochs": 1, "run_dir": str(tmp_path / "r")}]), [], [])
    assert (t.to_numpy() == "-").all()


def test_gws_layout_puts_gamma_across(tmp_path: Path) -> None:
    rows = []
    for alpha in (100, 1):
        for model in ("simplecnn", "resnet8"):
            for gamma, acc in ((1.0, 0.60), (0.9, 0.65)):
                for seed, d in ((8, 0.0), (9, 0.02)):
                    rows.append(
                        {
                            "partition.alpha": alpha,
                            "model": model,
                            "algorithm.gamma": gamma,
                            "seed": seed,
                            "summary.test_acc_last_k": acc + d + (0.1 if alpha == 1 else 0),
                        }
                    )
    t = render("fedlaw_gws", frame(rows), ["tags.method"], ["partition.alpha", "model", "algorithm.gamma"])
    assert list(t.columns) == ["γ=1.0", "γ=0.9"]
    assert list(t.index) == [
        "alpha=100, model=simplecnn",
        "alpha=100, model=resnet8",
        "alpha=1, model=simplecnn",
        "alpha=1, model=resnet8",
    ]
    assert t.loc["alpha=1, model=resnet8", "γ=0.9"] == "76.00 ± 1.41"


def test_job_folders_are_read_in_sweep_order(tmp_path: Path) -> None:
    n = 12  # lexical order would put 10 and 11 before 2
    for i in range(n):
        (tmp_path / "m00" / str(i)).mkdir(parents=True)
        (tmp_path / "m00" / str(i) / "summary.json").write_text("{}")
    assert [int(p.name) for p in find_runs([tmp_path])] == list(range(n))
