"""Paper layouts and hyperparameter selection on hand-made runs (cells checked by hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrun.cli.report import main as report_main
from fedrun.papers import layouts
from fedrun.papers.captions import layout_caption, layout_direction
from fedrun.papers.layouts import base_method, render
from fedrun.report.collect import load_runs
from fedrun.report.select import select_best
from tests.conftest import main_exit_code
from tests.report.fake_runs import fake_run


def runs(rows: list[dict]) -> pd.DataFrame:
    """A DataFrame shaped like load_runs: config keys, summary.* columns, status, run_dir in order."""
    out = []
    for i, r in enumerate(rows):
        d = {"status": "completed", "run_dir": f"/r/{i:03d}"}
        for k, v in r.items():
            d[k if "." in k or k in ("status", "seed") else f"summary.{k}"] = v
        out.append(d)
    return pd.DataFrame(out)


def test_fedima_cells_are_acc_without_then_with_ima() -> None:
    df = runs(
        [
            {"tags.method": "FedAvg", "tags.preset": "p1", "ima.enabled": False, "test_acc_last_k": 0.70},
            {"tags.method": "FedAvg", "tags.preset": "p1", "ima.enabled": True, "test_acc_last_k": 0.7250},
            {"tags.method": "FedNova", "tags.preset": "p1", "ima.enabled": False, "test_acc_last_k": 0.60},
            {"tags.method": "FedNova", "tags.preset": "p1", "ima.enabled": True, "status": "diverged"},
        ]
    )
    t = render("fedima", df, ["tags.method"], ["tags.preset"])
    assert t.loc["FedAvg", "p1"] == "70.00 (72.50)"
    assert t.loc["FedNova", "p1"] == "60.00 (diverged)"
    assert list(t.index) == ["FedAvg", "FedNova"]  # registry order kept


def test_fedgam_train_test_and_sigma_over_epochs() -> None:
    rows = []
    for e, acc in ((5, 0.80), (10, 0.84), (15, 0.82)):
        rows.append({"tags.method": "FedGAM", "fl.local_epochs": e, "test_acc_final": acc, "train_acc_final": 0.9})
    t = render("fedgam", runs(rows), ["tags.method"], ["fl.local_epochs"])
    assert t.loc["FedGAM", "local_epochs=10 test"] == "84.00"
    assert t.loc["FedGAM", "local_epochs=5 train"] == "90.00"
    assert t.loc["FedGAM", "σ(E)"] == f"{np.std([80.0, 84.0, 82.0]):.2f}"  # 1.63, population std of the means


def test_fedcos_gain_over_the_same_method_without_fedcos() -> None:
    df = runs(
        [
            {"tags.method": "FedAvg", "partition.iid_fraction": 0.0, "test_acc_final": 0.50, "test_acc_best": 0.55},
            {
                "tags.method": "FedProx(0.1)",
                "partition.iid_fraction": 0.0,
                "test_acc_final": 0.52,
                "test_acc_best": 0.56,
            },
            {
                "tags.method": "FedCos(0.02)",
                "partition.iid_fraction": 0.0,
                "test_acc_final": 0.535,
                "test_acc_best": 0.6,
            },
            {
                "tags.method": "FedProx(0.1)+FedCos(0.02)",
                "partition.iid_fraction": 0.0,
                "test_acc_final": 0.51,
                "test_acc_best": 0.57,
            },
        ]
    )
    t = render("fedcos", df, ["tags.method"], ["partition.iid_fraction"])
    col = "iid_fraction=0.0"
    assert t.loc["FedAvg", col] == "50.00"
    assert t.loc["FedCos(0.02)", col] == "53.50 (+3.50)"
    assert t.loc["FedProx(0.1)+FedCos(0.02)", col] == "51.00 (-1.00)"
    bl = render("fedcos_bestlast", df, ["tags.method"], ["partition.iid_fraction"])
    assert bl.loc["FedCos(0.02)", f"{col} Best"] == "60.00 (+5.00)"
    assert bl.loc["FedCos(0.02)", f"{col} Last"] == "53.50 (+3.50)"
    assert base_method("FedOpt(1.5)+FedCos(0.02)") == "FedOpt(1.5)" and base_method("FedAvg") is None


def test_fedlaw_mean_std_over_seeds() -> None:
    df = runs(
        [
            {"tags.method": "FedAvg", "partition.alpha": 0.1, "seed": s, "test_acc_last_k": a}
            for s, a in ((8, 0.84), (9, 0.86), (10, 0.85))
        ]
    )
    t = render("fedlaw", df, ["tags.method"], ["partition.alpha"])
    assert t.loc["FedAvg", "alpha=0.1"] == "85.00 ± 1.00"


def test_fedsam_client_spread_and_rounds_with_missing_keys() -> None:
    df = runs(
        [
            {
                "tags.method": "FedSAM",
                "train_acc_final": 0.95,
                "client_acc_mean_final": 0.80,
                "client_acc_std_final": 0.05,
                "round_to_target": 40,
            },
            {
                "tags.method": "FedSAM",
                "train_acc_final": 0.97,
                "client_acc_mean_final": 0.82,
                "client_acc_std_final": 0.07,
                "round_to_target": 60,
            },
            {"tags.method": "FedAvg", "train_acc_final": 0.9, "round_to_target": None},  # no spread keys (8b absent)
        ]
    )
    t = render("fedsam", df, ["tags.method"], [])
    assert (t.loc["FedSAM", "Train"], t.loc["FedSAM", "Validation"], t.loc["FedSAM", "Round"]) == (
        "96.00",
        "81.00 (6.00)",
        "50",
    )
    assert (t.loc["FedAvg", "Validation"], t.loc["FedAvg", "Round"]) == ("-", "-")


def test_fedsam_validation_cell_from_a_real_run(tmp_path, monkeypatch) -> None:
    """The runner's summary of an eval.client_acc run renders as "mean (std)" of its last evaluated round."""
    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # a real `fedrun` run, in this process
    argv = ["fedrun", "algorithm=fedsam", "eval.client_acc=true", "eval.train_acc=true", "data.max_train_samples=600"]
    argv += ["data.max_test_samples=300", "fl.clients=4", "fl.rounds=2", "++tags.method=FedSAM"]
    assert main_exit_code(monkeypatch, [*argv, f"hydra.run.dir={run}", f"cache_dir={tmp_path / 'cache'}"]) == 0
    last = pd.read_csv(run / "metrics.csv").iloc[-1]
    t = render("fedsam", load_runs([run]), ["tags.method"], [])
    mean, std = 100 * last["client_acc_mean"], 100 * last["client_acc_std"]
    assert t.loc["FedSAM", "Validation"] == f"{mean:.2f} ({std:.2f})"
    assert t.loc["FedSAM", "Train"] == f"{100 * last['train_acc']:.2f}"


def test_render_rejects_unknown_layout_and_keys() -> None:
    df = runs([{"tags.method": "FedAvg", "test_acc_last_k": 0.5}])
    with pytest.raises(ValueError, match="layout"):
        render("nope", df, ["tags.method"], [])
    with pytest.raises(ValueError, match="no.such"):
        render("fedlaw", df, ["tags.method"], ["no.such"])


def test_select_picks_the_best_mean_over_seeds_per_setting() -> None:
    rows = []
    # alpha 0.1: mu=0.01 best by mean (0.70) though mu=0.1 has the single best seed; alpha 1: mu=0.1 best
    for alpha, table in (
        (0.1, {0.1: (0.80, 0.50), 0.01: (0.70, 0.70), 0.001: (0.60, 0.62)}),
        (1.0, {0.1: (0.90, 0.88), 0.01: (0.85, 0.86), 0.001: (0.10, 0.10)}),
    ):
        for mu, accs in table.items():
            for seed, acc in enumerate(accs):
                rows.append(
                    {
                        "tags.method": "FedProx",
                        "partition.alpha": alpha,
                        "algorithm.mu": mu,
                        "seed": seed,
                        "test_acc_last_k": acc,
                    }
                )
    rows.append({"tags.method": "FedAvg", "partition.alpha": 0.1, "algorithm.mu": None, "test_acc_last_k": 0.6})
    df = runs(rows)
    kept, chosen = select_best(df, "algorithm.mu", ["tags.method", "partition.alpha"], "summary.test_acc_last_k")
    picks = dict(zip(chosen["partition.alpha"], chosen["algorithm.mu"], strict=True))
    assert picks == {0.1: 0.01, 1.0: 0.1}
    assert len(kept) == 2 + 2 + 1  # two seeds of each chosen value, FedAvg untouched
    t = render("fedlaw", kept, ["tags.method"], ["partition.alpha"])
    assert t.loc["FedProx", "alpha=0.1"] == "70.00 ± 0.00" and t.loc["FedAvg", "alpha=0.1"] == "60.00"


# ---- the Layout record: one registration, read by captions.py and fedrun-report ----------------------------------


def test_the_papers_layouts_are_records_in_the_registry() -> None:
    assert list(layouts.LAYOUTS) == [
        "fedima", "fedgam", "fedcos", "fedcos_bestlast", "fedlaw", "pfllib", "fedlaw_gws", "fedlaw_corr", "fedsam",
        "rounds", "fedprox",
    ]  # fmt: skip
    assert all(name == record.name for name, record in layouts.LAYOUTS.items())
    final = {"fedgam", "fedcos", "fedcos_bestlast", "fedsam", "fedprox"}  # the rest table the last-k mean
    assert {n for n, r in layouts.LAYOUTS.items() if r.metric == "test_acc_final"} == final
    assert layouts.LAYOUTS["pfllib"].metric == "local_acc_wmean_best"  # PFLlib's leaderboard: personalised, best round
    assert {r.metric for n, r in layouts.LAYOUTS.items() if n not in {*final, "pfllib"}} == {"test_acc_last_k"}
    assert [n for n, r in layouts.LAYOUTS.items() if not r.best] == ["fedlaw_corr"]
    assert [n for n, r in layouts.LAYOUTS.items() if r.split] == ["fedima"]
    assert layout_direction("rounds", ["E=1", "x Round"]) == {"E=1": "min", "x Round": "min"}
    assert layout_direction("fedlaw_corr", ["E=1"]) == {"E=1": None}
    assert "The best value" not in layout_caption("fedlaw_corr", pd.DataFrame(), [2], ["seed"])


def test_a_new_layout_states_only_what_differs_and_captions_read_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    plain = layouts.register_layout(layouts.Layout("plain", layouts.fedlaw, "test accuracy (%), {last_k}"))
    assert (plain.metric, plain.best, plain.split) == ("test_acc_last_k", True, ())
    cols = ["acc", "E=1 loss", "loss", "x Round", "σ(E)", "lossy"]
    assert layout_direction("plain", cols) == dict(zip(cols, ["max", "min", "min", "min", "min", "max"], strict=True))
    three = pd.DataFrame({"status": ["completed"], "eval.last_k": [10], "summary.last_k": [3]})
    assert layout_caption("plain", three, [2], ["seed"]) == (
        "test accuracy (%), mean of all 3 evaluated rounds (fewer than eval.last_k = 10); n = 2 runs (seed) per cell."
        " The best value of each column in bold."
    )
    assert layout_caption("plain", three, [2], ["seed"], bold=False).endswith("per cell.")
    layouts.register_layout(layouts.Layout("flat", layouts.fedlaw, "r values", best=False, direction=lambda c: "min"))
    assert layout_direction("flat", cols) == dict.fromkeys(cols)
    assert layout_caption("flat", three, [2], ["seed"]) == "r values; n = 2 runs (seed) per cell."
    with pytest.raises(ValueError, match="^layout plain: a layout of that name exists$"):
        layouts.register_layout(layouts.Layout("plain", layouts.rounds, "again"))
    with pytest.raises(ValueError, match="^layout: unknown 'nope'; valid: fedima, fedgam, .*, plain, flat$"):
        layout_caption("nope", three, [2], ["seed"])


def test_fedrun_report_shows_a_layouts_split_keys_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """FedIMA's record splits ima.enabled: the cell is "without (with)"; the fedlaw layout pools it, an error."""
    for i, (flag, acc) in enumerate([(False, 0.5), (True, 0.6), (False, 0.7), (True, 0.8)]):
        cfg = {"algorithm.name": "fedavg", "tags.method": "FedAvg", "ima.enabled": flag, "seed": i // 2}
        fake_run(tmp_path / f"r{i}", cfg, curve=[acc, acc])
    args = ["table", str(tmp_path), "--rows", "tags.method", "--out", str(tmp_path / "out")]
    assert report_main([*args, "--layout", "fedima"]) == 0
    assert "| FedAvg        | 60.00 (70.00) |" in capsys.readouterr().out
    assert report_main([*args, "--layout", "fedlaw"]) == 2
    assert "ima.enabled" in capsys.readouterr().err
