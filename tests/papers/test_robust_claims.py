"""The robust-FL target's claims (fedrun/papers/robust_claims.py): no published value is shipped (none could be read
as text), so each claim in words is judged on our cells, paired by seed: ``within`` holds when our cell is at most k
points below its reference, ``drop`` when at least k below; the scorecard's headline counts the claims that hold."""

from __future__ import annotations

import math

import pandas as pd

from fedrun.papers.card import render
from fedrun.papers.claims import orders
from fedrun.papers.robust_claims import ACC, ASR, CLAIMS, Claim, judge
from fedrun.papers.scorecard import CARD_COLUMNS, load_cells
from fedrun.papers.targets import BY_NAME, ROBUST_ATTACKS, ROBUST_DEFENCES


def _card(values: dict[tuple[str, str, str], dict[int, float]]) -> pd.DataFrame:
    lines = []
    for (table, row, column), v in values.items():
        mean = sum(v.values()) / len(v)
        lines.append({"table": table, "row": row, "column": column, "metric": "test_acc_last_k", "ours": mean,
                      "ours_std": math.nan, "n": len(v), "paper": math.nan, "difference": math.nan,
                      "reproduced": False, "note": "", "values": v, "records": ()})  # fmt: skip
    return pd.DataFrame(lines, columns=CARD_COLUMNS)


def test_a_claim_holds_by_its_kind_when_its_margin_is_resolved() -> None:
    within = Claim("s", "Krum", "gaussian", "Krum", "none", "within", 5.0)
    drop = Claim("s", "Krum", "fang_krum", "Krum", "none", "drop", 10.0)
    card = _card({
        (ACC, "Krum", "none"): {0: 80.0, 1: 82.0, 2: 81.0},
        (ACC, "Krum", "gaussian"): {0: 78.0, 1: 81.0},  # 2 and 1 below: 1.5, its margin 3.5 +- 0.5: holds
        (ACC, "Krum", "fang_krum"): {0: 60.0, 1: 61.0, 2: 62.0},  # 20, 21, 19 below: 20 +- 0.58 past 10: a drop
    })  # fmt: skip
    out = judge(card, (within, drop))
    assert out["reproduced"].tolist() == [True, True] and out["resolved"].all()
    assert out["seeds"].tolist() == [[0, 1], [0, 1, 2]] and out["ours_gain"].tolist() == [-1.5, -20.0]
    assert out["paper_gain"].isna().all()
    card.loc[1, "values"][1] = 70.0  # now 12 below on seed 1: 7 on average, past the 5 allowed, but spread +- 5
    line = judge(card, (within,)).iloc[0]
    assert line["reproduced"] is None and not line["resolved"] and line["note"].startswith("not resolved (2 seeds;")
    card.loc[1, "values"].update({0: 60.0, 1: 61.0, 2: 59.0})  # 20, 21, 22 below: far past the 5 allowed
    line = judge(card, (within,)).iloc[0]
    assert line["resolved"] and not line["reproduced"] and line["ours_gain"] == -21.0
    one = _card({(ACC, "Krum", "none"): {0: 80.0}, (ACC, "Krum", "gaussian"): {0: 79.0}})
    assert judge(one, (within,))["reproduced"].tolist() == [None]  # one seed: no spread, never resolved
    assert judge(_card({(ACC, "Krum", "none"): {0: 80.0}}), (within,)).empty  # a cell not run: no line


def test_the_target_ships_its_cells_without_values_and_every_claim_names_them() -> None:
    target = BY_NAME["robust-fmnist"]
    cells = load_cells(target.paper)
    labels = [label for label, _ in ROBUST_DEFENCES]
    assert [m.label for m in target.methods] == labels and cells["value"].isna().all()
    assert set(cells.loc[cells["table"] == ACC, "column"]) == set(ROBUST_ATTACKS)
    assert set(cells.loc[cells["table"] == ASR, "row"]) == set(labels)
    for c in CLAIMS:
        for row, column in ((c.row, c.column), (c.ref_row, c.ref_column)):
            assert ((cells["table"] == c.table) & (cells["row"] == row) & (cells["column"] == column)).any(), c


def test_the_scorecard_counts_the_claims_that_hold() -> None:
    target = BY_NAME["robust-fmnist"]
    card = _card({(ACC, "FedAvg", "none"): {0: 80.0, 1: 81.0}, (ACC, "FedAvg", "gaussian"): {0: 20.0, 1: 22.0},
                  (ACC, "Krum", "none"): {0: 79.0, 1: 80.0}, (ACC, "Krum", "gaussian"): {0: 70.0, 1: 72.0},
                  (ACC, "Median", "none"): {0: 79.0}, (ACC, "Median", "gaussian"): {0: 78.0}})  # fmt: skip
    assert judge(card)["reproduced"].tolist() == [True, False, None]
    text = render(card, orders(card), target, records=[])
    assert "the papers' stated claims that hold: 1 of 2 resolved; 1 not resolved" in text
    assert "no table of the papers'" in text
