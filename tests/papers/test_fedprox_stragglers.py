"""FedProx Figure 1 (systems heterogeneity on Synthetic(1, 1)): the target, its preset, its table and figures.

The preset and the target's runs need the ``system`` section (stragglers, from the branch that adds it): the tests
that compose them skip, with one reason, on a checkout whose schema has no ``system`` field; the rest run anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fedrun.cli.reproduce import commands, curves_args, fedrun_line, no_cells, report_args
from fedrun.papers.captions import layout_caption, layout_direction
from fedrun.papers.layouts import render
from fedrun.papers.targets import BY_NAME, FEDPROX_STRAGGLERS, TARGETS
from fedrun.storage.status import Status

PRESET = "fedprox_fig1_synthetic_1_1"


def test_the_target_is_offered() -> None:
    assert FEDPROX_STRAGGLERS in TARGETS and BY_NAME["fedprox-stragglers"] is FEDPROX_STRAGGLERS


def test_rows_and_sweep_follow_the_code() -> None:
    t = FEDPROX_STRAGGLERS
    assert dict(t.sweep) == {"system.stragglers": "0,0.5,0.9"} and t.runs() == 9
    rows = {x.label: x.overrides for x in t.methods}
    assert rows["FedAvg"] == ("algorithm=fedavg", "system.straggler_policy=drop")
    assert rows["FedProx (μ=0)"][1:] == ("algorithm.mu=0", "system.straggler_policy=partial")
    assert rows["FedProx (μ=1)"][1:] == ("algorithm.mu=1", "system.straggler_policy=partial")
    assert t.report_cols == ["system.stragglers"] and t.figures == ("train_loss", "test_acc")


def test_commands_draw_both_figures_and_skip_the_scorecard(tmp_path: Path) -> None:
    cmds = commands(FEDPROX_STRAGGLERS, tmp_path)
    assert len(cmds) == 3 and all("system.stragglers=0,0.5,0.9" in c and f"experiment={PRESET}" in c for c in cmds)
    assert "seed=0" in cmds[0] and "algorithm.mu=1" in fedrun_line(cmds[2])
    figs = curves_args(FEDPROX_STRAGGLERS, tmp_path)
    assert [f[-1] for f in figs] == ["train_loss", "test_acc"]
    assert all(f[:2] == ["curves", str(tmp_path)] and "--cols" in f and "system.stragglers" in f for f in figs)
    assert report_args(FEDPROX_STRAGGLERS, tmp_path)[3] == "fedprox"
    assert "no published cells of FedProx" in (no_cells(FEDPROX_STRAGGLERS) or "")
    assert no_cells(BY_NAME["fedlaw-table3"]) is None


def fake_run(root: Path, method: str, stragglers: float, losses: list[float], acc: float, status: str) -> dict:
    d = root / f"{method}_{stragglers}".replace(" ", "")
    d.mkdir()
    rounds = range(1, len(losses) + 1)
    pd.DataFrame({"round": rounds, "test_acc": acc, "train_loss": losses}).to_csv(d / "metrics.csv", index=False)
    (d / "summary.json").write_text(json.dumps({"test_acc_final": acc}))
    return {
        "run_dir": str(d),
        "status": status,
        "tags.method": method,
        "system.stragglers": stragglers,
        "seed": 0,
        "summary.test_acc_final": acc,
    }


def test_layout_gives_the_last_rounds_loss_and_accuracy(tmp_path: Path) -> None:
    runs = pd.DataFrame(
        [
            fake_run(tmp_path, "FedAvg", 0.0, [2.0, 0.75], 0.81, Status.COMPLETED),
            fake_run(tmp_path, "FedAvg", 0.9, [2.0, 1.5], 0.5, Status.DIVERGED),
            fake_run(tmp_path, "FedProx (μ=1)", 0.0, [2.0, 0.5], 0.84, Status.COMPLETED),
            fake_run(tmp_path, "FedProx (μ=1)", 0.9, [2.0, 0.6, 0.625], 0.8, Status.COMPLETED),
        ]
    )
    table = render("fedprox", runs, ["tags.method"], ["system.stragglers"])
    assert table.loc["FedAvg", "stragglers=0.0 loss"] == "0.750"
    assert table.loc["FedAvg", "stragglers=0.0 acc"] == "81.00"
    assert table.loc["FedAvg", "stragglers=0.9 acc"] == str(Status.DIVERGED)
    assert table.loc["FedProx (μ=1)", "stragglers=0.9 loss"] == "0.625"


def test_preset_is_the_codes_setup(make_spec) -> None:
    spec = make_spec(f"experiment={PRESET}")
    assert (spec.data.name, spec.data.params.variant, spec.data.params.alpha, spec.data.params.beta) == (
        "synthetic",
        "code",
        1.0,
        1.0,
    )
    assert spec.model.name == "mlp" and spec.model.params.hidden == [] and spec.partition.name == "natural"
    fl = spec.fl
    assert (fl.clients, fl.cohort_size, fl.rounds, fl.local_epochs, fl.batch_size, fl.lr) == (30, 10, 200, 20, 10, 0.01)
    assert (fl.momentum, fl.weight_decay, fl.weighting, fl.sampling) == (0.0, 0.0, "size", "fixed")
    assert spec.eval.train_acc and spec.eval.every == 1
    system = spec.raw["system"]
    assert (system["stragglers"], system["straggler_policy"], system["straggler_work"]) == (0.9, "partial", "epochs")


@pytest.mark.parametrize("method", FEDPROX_STRAGGLERS.methods, ids=lambda x: x.label)
@pytest.mark.parametrize("stragglers", ["0", "0.5", "0.9"])
def test_every_cell_composes(make_spec, method, stragglers: str) -> None:
    spec = make_spec(f"experiment={PRESET}", *method.overrides, f"system.stragglers={stragglers}")
    policy = dict(o.split("=", 1) for o in method.overrides)["system.straggler_policy"]
    assert spec.raw["system"]["straggler_policy"] == policy
    assert spec.raw["system"]["stragglers"] == float(stragglers)


def test_caption_and_best_direction_of_the_layout() -> None:
    runs = pd.DataFrame({"seed": [0, 0]})
    caption = layout_caption("fedprox", runs, [1, 1], ["seed"])
    assert caption.startswith("loss: training loss") and "test accuracy (%)" in caption
    cols = ["stragglers=0.5 loss", "stragglers=0.5 acc"]
    assert layout_direction("fedprox", cols) == {cols[0]: "min", cols[1]: "max"}
