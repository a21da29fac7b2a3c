"""The scorecard: ours | paper | difference, within 1.5 points or our seed spread, the orders the paper separates,
stand-in runs never compared; evidence records; ``fedrun-report --paper``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedrun.cli.report import main as report_main
from fedrun.papers.claims import orders
from fedrun.papers.scorecard import evidence_runs, load_cells, load_evidence, scorecard
from fedrun.papers.targets import BY_NAME

LAW3 = BY_NAME["fedlaw-table3"]
PRESET = "fedlaw_table3_fmnist_mlp"
COLUMN = "FashionMNIST α=0.1 MLP"  # paper: FedAvg 85.11, FedProx 84.33, FedLAW 86.30


def runs_of(method: str, accs: list[float], standin: bool = False, **config: object) -> list[dict]:
    return [
        {
            "tags.preset": PRESET,
            "tags.method": method,
            "partition.alpha": 0.1,
            "seed": 8 + i,
            "status": "completed",
            "summary.test_acc_last_k": a / 100,
            "summary.data_standin": standin,
            **config,
        }
        for i, a in enumerate(accs)
    ]


def card_line(card: pd.DataFrame, row: str) -> pd.Series:
    return card[(card["row"] == row) & (card["column"] == COLUMN)].iloc[0]


def test_cells_are_compared_within_tolerance_or_seed_spread() -> None:
    runs = pd.DataFrame(
        runs_of("FedAvg", [86.5, 86.5, 86.5])  # +1.39 from 85.11, no spread: reproduced
        + runs_of("FedProx", [80.0, 83.0, 86.0])  # -1.33 ... mean 83.0: -1.33, reproduced
        + runs_of("FedLAW", [83.9, 84.0, 84.1])  # -2.30 with std 0.10: not reproduced
    )
    card = scorecard(runs, LAW3)
    assert set(card["column"]) == {COLUMN}  # only the cells our runs cover
    avg, law = card_line(card, "FedAvg"), card_line(card, "FedLAW")
    assert avg["ours"] == pytest.approx(86.5) and avg["paper"] == 85.11 and avg["difference"] == pytest.approx(1.39)
    assert avg["reproduced"] and avg["n"] == 3
    assert law["difference"] == pytest.approx(-2.30) and law["ours_std"] == pytest.approx(0.1)
    assert not law["reproduced"]
    wide = scorecard(pd.DataFrame(runs_of("FedLAW", [80.0, 84.0, 88.0])), LAW3)  # -2.30, std 4: within spread
    assert card_line(wide, "FedLAW")["reproduced"]


def test_the_values_per_seed_are_by_seed_and_a_seeds_runs_averaged() -> None:
    runs = runs_of("FedAvg", [86.0, 85.0, 84.0])  # seeds 8, 9, 10
    runs[0]["seed"], runs[2]["seed"] = 10, 8
    assert list(card_line(scorecard(pd.DataFrame(runs), LAW3), "FedAvg")["values"].items()) == [
        (8, pytest.approx(84.0)),
        (9, pytest.approx(85.0)),
        (10, pytest.approx(86.0)),
    ]
    runs[1]["seed"] = 10  # two runs of seed 10: their mean
    values = card_line(scorecard(pd.DataFrame(runs), LAW3), "FedAvg")["values"]
    assert values == {8: pytest.approx(84.0), 10: pytest.approx(85.5)}


def test_a_card_of_one_table_holds_the_lines_of_the_whole_card_on_that_table() -> None:
    # a backdoor run fills cells of two tables: its accuracy (Table 1) and its ASR (Table 2)
    robust = BY_NAME["robust-fmnist"]
    runs = evidence_runs([r for r in load_evidence() if r["target"] == robust.name])
    whole = scorecard(runs, robust)
    assert set(whole["table"]) == {"1", "2"}
    for table in ("1", "2"):
        mine = whole[whole["table"] == table].reset_index(drop=True)
        pd.testing.assert_frame_equal(scorecard(runs, robust, table=table), mine)


def test_the_papers_column_order_is_checked() -> None:
    runs = pd.DataFrame(runs_of("FedAvg", [85.0]) + runs_of("FedLAW", [86.0]) + runs_of("FedProx", [84.0]))
    order = orders(scorecard(runs, LAW3))
    line = order[order["column"] == COLUMN].iloc[0]
    # the paper separates FedLAW from FedProx by 1.97; FedLAW-FedAvg (1.19) and FedAvg-FedProx (0.78) are not compared
    assert (line["pairs"], line["held"]) == (1, 1) and line["holds"]
    swapped = pd.DataFrame(runs_of("FedProx", [87.0]) + runs_of("FedLAW", [86.0]))
    assert not orders(scorecard(swapped, LAW3))["holds"].iloc[0]


def test_stand_in_runs_are_never_compared() -> None:
    runs = pd.DataFrame(runs_of("FedAvg", [85.0, 85.2], standin=True) + runs_of("FedLAW", [86.0]))
    card = scorecard(runs, LAW3)
    avg = card_line(card, "FedAvg")
    assert avg["n"] == 0 and np.isnan(avg["ours"]) and not avg["reproduced"] and "stand-in" in avg["note"]
    assert orders(card).empty  # one real method left: no order to check
    mixed = pd.DataFrame(runs_of("FedAvg", [10.0], standin=True) + runs_of("FedAvg", [85.0]))
    assert card_line(scorecard(mixed, LAW3), "FedAvg")["ours"] == pytest.approx(85.0)


def test_runs_without_tags_match_a_row_by_its_overrides() -> None:
    # a plain `fedrun experiment=... algorithm=fedprox algorithm.mu=0.001 fl.momentum=0 fl.weight_decay=0` run
    base = {"experiment": PRESET, "partition.alpha": 0.1, "status": "completed", "summary.test_acc_last_k": 0.84}
    prox = {**base, "algorithm.name": "fedprox", "algorithm.mu": 0.001, "fl.momentum": 0.0, "fl.weight_decay": 0.0}
    old = {**prox, "fl.momentum": 0.9, "fl.weight_decay": 5e-4}  # the old row's optimiser: not the paper's row
    card = scorecard(pd.DataFrame([prox]), LAW3)
    assert list(card["row"]) == ["FedProx"] and card["ours"].iloc[0] == pytest.approx(84.0)
    assert scorecard(pd.DataFrame([old]), LAW3).empty


def test_evidence_records_name_shipped_cells_and_give_the_readme_numbers() -> None:
    cells = load_cells()
    keys = set(zip(cells["paper"], cells["table"], cells["row"], cells["column"], strict=True))
    records = load_evidence()
    assert {r["id"] for r in records} >= {
        "fedlaw_table3_fmnist_mlp_alpha0.1",
        "fedcos_table2_fmnist_mlp_totally_noniid_rows",
        "fedcos_table4_fmnist_mlp_20pct",
    }
    for rec in records:
        assert {"command", "commit", "seeds", "wall_time_s", "load", "cells"} <= rec.keys()
        assert rec["preset"] in BY_NAME[rec["target"]].presets
        for cell in rec["cells"]:
            assert (rec["paper"], rec["table"], cell["row"], cell["column"]) in keys
            assert {int(s) for s in cell["values"]} <= set(rec["seeds"])
    card = scorecard(evidence_runs(), LAW3)
    avg = card_line(card, "FedAvg")
    # the 20-per-class runs (fedlaw_table3_fmnist_mlp_alpha0.1_pc20, the preset now) supersede the 10-per-class ones
    # (85.23, 85.48, 86.76 in fedlaw_table3_fmnist_mlp_alpha0.1) seed by seed: not their mean
    assert avg["ours"] == pytest.approx((85.30 + 85.51 + 86.79) / 3) and avg["n"] == 3


def test_report_paper_flag_prints_the_evidence_scorecard(capsys) -> None:  # noqa: ANN001
    assert report_main(["--paper", "fedcos-table2"]) == 0
    out = capsys.readouterr().out
    # seeds 0-2 of the column, pooled over fedcos_table2_fmnist_mlp_totally_noniid_seed0 and _seeds12
    assert "| II | FedAvg | Totally non-IID | 74.65 ± 0.45 | 74.91 | -0.26" in " ".join(out.split())
    assert "cells run: 36 of 36 published (Table II: 36 of 36); within 1.5 points" in out


def test_report_paper_flag_refuses_an_unknown_target(capsys, tmp_path) -> None:  # noqa: ANN001
    assert report_main(["--paper", "fedlaw-table99"]) == 2
    err = capsys.readouterr().err
    assert "--paper: unknown target 'fedlaw-table99'; valid: fedima-table1" in err and err.count("\n") == 1
    assert report_main([str(tmp_path / "missing"), "--paper", "fedlaw-table3"]) == 2
