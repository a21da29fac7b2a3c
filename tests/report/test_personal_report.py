"""fedrun-report on personalised runs: ``table --metric local_mean|local_worst10`` (mean ± std over seeds of the last
round's per-client statistic) and ``clients`` (the per-client accuracy distribution: a violin per method, its table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_runs import fake_run

from fedrun.cli.report import report

# (method, seed) -> the last round's per-client accuracies of the clients' own models
ACCS = {
    ("fedper", 0): [0.9, 0.8, 0.7, 0.2],
    ("fedper", 1): [0.95, 0.85, 0.6, 0.3],
    ("fedavg", 0): [0.5, 0.5, 0.4, 0.1],
    ("fedavg", 1): [0.6, 0.4, 0.5, 0.3],
}


def personal_run(root: Path, method: str, seed: int, unseen: list[float] | None = None) -> Path:
    """A fake run whose metrics.csv has the local_* columns and whose clients.csv has two rounds."""
    d = fake_run(root / f"{method}_{seed}", {"algorithm.name": method, "seed": seed}, curve=[0.3, 0.5])
    acc = np.array(ACCS[(method, seed)])
    rows = pd.read_csv(d / "metrics.csv")
    rows["local_acc_mean"] = [0.1, acc.mean()]
    rows["local_acc_worst10"] = [0.0, acc.min()]  # ceil(4 / 10) = 1 client
    rows.to_csv(d / "metrics.csv", index=False)
    last = pd.DataFrame({"round": 2, "client": range(4), "test_samples": 10, "global_acc": 0.5, "acc": acc})
    frames = [last.assign(round=1, acc=0.0), last]
    if unseen is not None:
        frames = [f.assign(unseen=0) for f in frames]
        frames.append(pd.DataFrame({"round": 2, "client": [4, 5], "test_samples": 10, "global_acc": 0.4,
                                    "acc": unseen, "unseen": 1}))  # fmt: skip
    pd.concat(frames).to_csv(d / "clients.csv", index=False)
    return d


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for method, seed in ACCS:
        personal_run(root, method, seed, unseen=[0.5, 0.7] if method == "fedper" else None)
    return root


def cell(mean_of: list[float]) -> str:
    v = 100 * np.array(mean_of)
    return f"{v.mean():.2f} ± {v.std(ddof=1):.2f}"


@pytest.mark.parametrize(("metric", "stat"), [("local_mean", np.mean), ("local_worst10", np.min)])
def test_table_of_a_personalised_metric_is_mean_and_std_over_seeds(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture, metric: str, stat
) -> None:  # noqa: ANN001
    assert report(["table", str(sweep), "--rows", "algorithm", "--metric", metric, "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    for method in ("fedper", "fedavg"):
        want = cell([float(stat(ACCS[(method, s)])) for s in (0, 1)])
        assert want in out, (want, out)


def test_clients_draws_the_distribution_and_tables_it(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert report(["clients", str(sweep), "--rows", "algorithm", "--out", str(tmp_path / "c")]) == 0
    table = pd.read_csv(tmp_path / "c.csv").set_index("group")
    assert (tmp_path / "c.png").stat().st_size > 0
    pooled = np.array(ACCS[("fedper", 0)] + ACCS[("fedper", 1)]) * 100  # the last round, seeds pooled
    row = table.loc["algorithm=fedper"]
    assert row["clients"] == 8
    assert row["mean"] == pytest.approx(pooled.mean(), abs=0.01)
    assert row["worst10"] == pytest.approx(np.sort(pooled)[:1].mean(), abs=0.01)
    unseen = table.loc["algorithm=fedper (unseen)"]
    assert unseen["clients"] == 4 and unseen["mean"] == pytest.approx(60.0)
    assert "algorithm=fedavg" in table.index and "algorithm=fedavg (unseen)" not in table.index
    assert "algorithm=fedper (unseen)" in capsys.readouterr().out


def test_clients_without_clients_csv_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake_run(tmp_path / "runs" / "a", {"algorithm.name": "fedavg"}, curve=[0.5])
    assert report(["clients", str(tmp_path / "runs"), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run has a clients.csv" in err[0]
    assert not (tmp_path / "c.png").exists()


def test_clients_says_where_its_files_went_and_draws_in_percent_with_words(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51: ``table`` and ``curves`` print the files they wrote, ``clients`` printed none; its title was cut."""
    import fedrun.storage.figures as figures

    kept: list = []
    real = figures.save_figure
    monkeypatch.setattr(
        figures, "save_figure", lambda fig, path, **kw: kept.append(fig.axes[0]) or real(fig, path, **kw)
    )
    assert report(["clients", str(sweep), "--out", str(tmp_path / "c")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"written: {tmp_path / 'c.png'}, {tmp_path / 'c.csv'}"
    (ax,) = kept
    assert ax.get_ylabel() == "client accuracy (%)" and ax.get_ylim()[1] > 1  # percent, as the table
    assert (
        " ".join(ax.get_title().split())
        == "Accuracy of each client's own model on the client's test data, last evaluated round"
    )


def test_curves_of_a_personalised_metric_are_percent_with_words(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51: ``curves --metric local_acc_mean`` drew fractions under the axis label ``local_acc_mean``."""
    import fedrun.report.curves as curves

    kept: list = []
    monkeypatch.setattr(curves, "save_figure", lambda fig, path, **kw: kept.append(fig.axes[0]))
    args = ["curves", str(sweep), "--metric", "local_acc_mean", "--out", str(tmp_path / "k.png")]
    assert report(args) == 0
    (ax,) = kept
    assert ax.get_ylabel() == "personalised accuracy, mean over clients (%)"
    assert ax.get_title().startswith("personalised accuracy, mean over clients: mean ± std over seed")
    drawn = pd.read_csv(tmp_path / "k.csv")
    fedper = drawn[(drawn["group"] == "algorithm=fedper") & (drawn["round"] == 2)]["mean"].item()
    assert fedper == pytest.approx(100 * np.mean([np.mean(ACCS[("fedper", s)]) for s in (0, 1)]))


def test_the_runs_fields_hold_each_columns_last_and_best_round(tmp_path: Path) -> None:
    # PFLlib's and pFedMe's tables report the best round of the clients' accuracy: summary.<column>_best
    from fedrun.report.personal_metrics import personal_fields

    d = personal_run(tmp_path, "fedper", 0)
    rows = pd.read_csv(d / "metrics.csv")
    rows["local_acc_mean"] = [0.7, 0.6]  # the best round is the first
    rows["local_acc_worst10"] = [float("nan"), float("nan")]  # never evaluated: no field
    rows.to_csv(d / "metrics.csv", index=False)
    fields = personal_fields(d)
    assert fields["summary.local_acc_mean_best"] == 0.7 and fields["summary.local_acc_mean_final"] == 0.6
    assert "summary.local_acc_worst10_best" not in fields
