"""The records behind a scorecard: each one's commit, note and setup; a column (or a table across its columns)
whose records ran different setups is flagged."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fedrun.papers.scorecard import evidence_runs, load_evidence, scorecard
from fedrun.papers.setups import mixed, record_lines
from fedrun.papers.targets import BY_NAME

COS4 = BY_NAME["fedcos-table4"]


def record(rid: str, column: str, setting: str, rows: dict[str, float], **extra: Any) -> dict[str, Any]:
    cells = [
        {"row": r, "column": column, "metric": "test_acc_best", "setting": setting, "values": {"0": v}}
        for r, v in rows.items()
    ]
    base = {"id": rid, "paper": "FedCos", "table": "IV", "target": "fedcos-table4"}
    return {**base, "preset": "fedcos_table4_fmnist_mlp", "commit": f"c-{rid}", "seeds": [0], "cells": cells, **extra}


def card_of(records: list[dict[str, Any]]) -> pd.DataFrame:
    return scorecard(evidence_runs(records), COS4)


def test_a_column_whose_records_differ_in_setup_is_flagged() -> None:
    a = record("a", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 82.0}, setup={"inputs": "mean/std"})
    b = record("b", "FMNIST 10% Best", "fl.participation=0.1", {"FedCos(0.05)": 85.0})
    lines = mixed(card_of([a, b]), [a, b])
    assert lines == ["mixed setups: Table IV, FMNIST 10% Best: inputs: mean/std [1], as the preset now [2]"]
    same = record("c", "FMNIST 10% Best", "fl.participation=0.1", {"FedCos(0.05)": 85.0}, setup={"inputs": "mean/std"})
    assert mixed(card_of([a, same]), [a, same]) == []  # two commits, one setup: not mixed


def test_a_table_whose_columns_ran_different_setups_is_flagged() -> None:
    ten = record("ten", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 82.0, "FedCos(0.05)": 85.0})
    twenty = record(
        "twenty",
        "FMNIST 20% Best",
        "fl.participation=0.2",
        {"FedAvg": 83.0, "FedCos(0.05)": 86.0},
        setup={"inputs": "x"},
    )
    assert mixed(card_of([ten, twenty]), [ten, twenty]) == [
        "mixed setups: Table IV across its columns: inputs: as the preset now [1], x [2]"
    ]


def test_a_seed_run_as_the_preset_is_now_supersedes_the_same_seed_of_an_older_setup() -> None:
    old = record(
        "old", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 80.0, "FedProx(0.1)": 81.0}, setup={"k": "v"}
    )
    new = record("new", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 84.0})
    runs = evidence_runs([old, new])
    fedavg = runs[runs["tags.method"] == "FedAvg"]
    assert list(fedavg["summary.test_acc_best"]) == [0.84] and list(fedavg["evidence"]) == ["new"]  # not their mean
    assert list(runs[runs["tags.method"] == "FedProx(0.1)"]["evidence"]) == ["old"]  # no new run of it: kept
    assert mixed(card_of([old, new]), [old, new])  # FedProx's old setup beside FedAvg's current one
    other_seed = {**new, "cells": [{**new["cells"][0], "values": {"1": 84.0}}]}
    assert len(evidence_runs([old, other_seed])) == 3  # another seed supersedes nothing
    twin = record("twin", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 82.0}, setup={"k": "v"})
    assert len(evidence_runs([old, twin])) == 3  # two records of one setup: both kept (the card takes their mean)


def test_each_record_on_the_card_is_listed_with_its_commit_note_and_setup() -> None:
    a = record("a", "FMNIST 10% Best", "fl.participation=0.1", {"FedAvg": 82.0}, note="seed 0", setup={"k": "v"})
    assert record_lines(card_of([a]), [a]) == ["[1] a: commit c-a; seed 0; differs from the preset now: k: v"]


def test_the_shipped_records_flag_their_mixed_columns() -> None:
    # issue 38 point 3: Table II's rows scored 9,900 or 10,000 test images, and its +FedCos rows ran the paper's
    # direction, until seed 0 of those rows was re-run on the preset (fedcos_table2_fmnist_mlp_totally_noniid_seed0);
    # Table IV's 10% column scored 9,900 until its seed 0 was re-run (issue 50), as its 20% column was: one setup now.
    # Robust FL's no-attack column was re-run after a last-bit change of the weighted sum, its attacked columns not.
    records = load_evidence()
    assert mixed(scorecard(evidence_runs(), COS4), records) == []
    assert mixed(scorecard(evidence_runs(), BY_NAME["fedcos-table2"]), records) == []
    robust = mixed(scorecard(evidence_runs(), BY_NAME["robust-fmnist"]), records)
    assert len(robust) == 1 and robust[0].startswith("mixed setups: Table 1 across its columns: weighted sum")
