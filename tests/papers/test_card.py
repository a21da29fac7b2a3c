"""The scorecard's text: cells run of cells published, claims reproduced, each cell's record; a target whose
budget is unknown is not judged and shows its readings; runs of no cell of the target: one line, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedrun.cli.report import main as report_main
from fedrun.papers.card import render
from fedrun.papers.claims import orders
from fedrun.papers.scorecard import evidence_runs, load_cells, load_evidence, scorecard
from fedrun.papers.targets import BY_NAME
from tests.report.fake_runs import fake_run

LAW3 = BY_NAME["fedlaw-table3"]


def law(method: str, accs: dict[int, float]) -> list[dict[str, Any]]:
    return [
        {
            "tags.preset": "fedlaw_table3_fmnist_mlp",
            "tags.method": method,
            "partition.alpha": 0.1,
            "seed": s,
            "status": "completed",
            "summary.test_acc_last_k": a / 100,
        }
        for s, a in accs.items()
    ]


def text_of(runs: pd.DataFrame, target=LAW3, records=None) -> str:  # noqa: ANN001
    card = scorecard(runs, target)
    return render(card, orders(card), target, records=[] if records is None else records)


def test_the_headline_counts_cells_run_of_cells_published_and_claims_reproduced() -> None:
    cells = load_cells("FedLAW")
    published = int((cells["preset"].isin(LAW3.presets) & cells["value"].notna()).sum())  # 6 presets x 8 rows x 2
    assert published == 96
    made = law("FedAvg", {8: 85.23, 9: 85.48, 10: 86.76}) + law("FedLAW", {8: 85.56, 9: 85.32, 10: 86.14})
    text = text_of(pd.DataFrame(made))
    assert f"cells run: 2 of {published} published (Table 3: 2 of {published}); within 1.5 points" in text
    assert "claims reproduced: 0 of 0 resolved (the proposed method's gain over a baseline" in text
    assert "; 1 not resolved (within 2 standard errors of zero)" in text
    assert "| our gain ± s.e." in text
    claim = next(ln for ln in text.splitlines() if "FedLAW over FedAvg" in ln)
    assert [x.strip() for x in claim.split("|")[3:8]] == [
        "FedLAW over FedAvg",
        "+1.19",
        "-0.15 ± 0.27",  # the standard error (seed std 0.48 / sqrt(3)), not the seed std
        "8, 9, 10",
        "not resolved (3 seeds; 41 would resolve it at this spread)",
    ]
    resolved = law("FedAvg", {8: 85.0, 9: 85.2, 10: 85.1}) + law("FedLAW", {8: 86.0, 9: 86.3, 10: 86.4})
    text = text_of(pd.DataFrame(resolved))
    assert "claims reproduced: 1 of 1 resolved" in text and "not resolved" not in text
    line = next(ln for ln in text.splitlines() if "FedLAW over FedAvg" in ln)
    assert line.split("|")[5].strip() == "+1.13 ± 0.09" and line.split("|")[7].strip() == "yes"


def test_fedcos_table2_prints_its_cells_run_of_36_and_names_each_cells_record() -> None:
    records = load_evidence()
    text = text_of(evidence_runs(), BY_NAME["fedcos-table2"], records)
    assert "cells run: 36 of 36 published (Table II: 36 of 36)" in text
    line = next(ln for ln in text.splitlines() if "| FedAvgM(0.5)+FedCos(0.02) |" in ln)
    assert line.rstrip(" |").endswith("| 1, 2")  # its records, [1] and [2] in the list below
    assert "[1] fedcos_table2_fmnist_mlp_totally_noniid_seed0: commit 752a7cd" in text
    assert "[2] fedcos_table2_fmnist_mlp_totally_noniid_seeds12: commit 752a7cd" in text


def test_a_target_of_unknown_budget_is_not_judged_and_shows_both_readings() -> None:
    target = BY_NAME["fedcos-table5"]
    assert target.budget_unknown
    text = text_of(evidence_runs(), target, load_evidence())
    assert "budget unknown: not judged" in text
    judged = [ln for ln in text.splitlines() if ln.startswith("| V ") and "FedCos(0.01)" in ln]
    assert len(judged) == 2 and all("| budget unknown |" in " ".join(ln.split()) for ln in judged)
    avg = next(ln for ln in text.splitlines() if ln.startswith("- FedAvg, Shakespeare 10%"))
    assert "paper 37.46; ours round 250 (the run's last) 47.93, round 50 36.82" in avg
    assert "round 40 (the preset's budget): not in the record" in avg


def test_a_target_whose_published_values_are_not_shipped_says_so_and_judges_nothing() -> None:
    """pFedMe's Table 1 cells are named with empty values (the table is an image): its records' cells are counted
    as run, not as "2 of 0 published", and no cell or claim is judged."""
    target = BY_NAME["pfedme-synthetic"]
    assert load_cells("pFedMe")["value"].isna().all()
    text = text_of(evidence_runs(), target, load_evidence())
    head = text.splitlines()[2]
    assert head.startswith("cells run: 2; not compared: fedrun ships none of the published values of pFedMe's")
    assert "of 0 published" not in text and "claims reproduced" not in text
    cell = next(ln for ln in text.splitlines() if ln.startswith("| 1 ") and "Per-FedAvg" in ln)
    assert [x.strip() for x in cell.split("|")[5:8]] == ["-", "-", "-"]  # paper, difference, within


@pytest.mark.parametrize("name", ["fedprox-stragglers", "dp-fedavg-fmnist"])
def test_a_target_without_published_cells_is_one_line_and_exit_2(name: str, tmp_path: Path, capsys: Any) -> None:
    # issue 50 point 3: FileNotFoundError on fedrun/papers/cells/fedprox.csv; fedrun-reproduce already said so
    paper = BY_NAME[name].paper
    for args in (["scorecard", name], ["scorecard", name, str(tmp_path)]):
        assert report_main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert err.startswith(f"fedrun-report: error: scorecard: none; fedrun ships no published cells of {paper}")


def test_runs_that_are_no_cell_of_the_target_are_one_line_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    # issue 32 point 7: runs of another layout (FedCos runs, scored as FedLAW Table 3) crashed with KeyError 'table'
    cfg = {"algorithm.name": "fedavg", "tags.preset": "fedcos_table2_fmnist_mlp", "tags.method": "FedAvg"}
    fake_run(tmp_path / "runs" / "r0", cfg, acc=0.74, curve=[0.7, 0.74])
    assert report_main(["scorecard", "fedlaw-table3", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun-report: error: no run under") and err.count("\n") == 1
    assert "is a cell of fedlaw-table3" in err
