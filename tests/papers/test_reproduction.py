"""The reproduction page and the README's status line are generated from the evidence records."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from fedrun.papers import reproduction
from fedrun.papers.scorecard import load_evidence, scorecard
from tests.conftest import REPO

# the scorecards behind the status line and the pages take seconds each: computed once for the module


@pytest.fixture(scope="module")
def status() -> str:
    """The status line of the shipped evidence records (``status_line()``'s default)."""
    return reproduction.status_line()


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    """Every generated documentation page, from the shipped evidence records (``doc_pages()``'s default)."""
    return reproduction.doc_pages()


def test_the_readmes_status_line_is_what_the_evidence_records_give_now(status: str) -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    assert status in readme, f"README.md's status line is stale; paste this line:\n{status}"


def test_the_status_counts_follow_the_records() -> None:
    records = load_evidence()
    n, measured, within = reproduction.counts(records)
    # pFedMe's Table 1 is an image, and no robust-FL table was found as text: their cells ship no published value,
    # so their records count no measured cell
    unpublished = [r for r in records if r["paper"] in ("pFedMe", "Robust")]
    assert unpublished and reproduction.counts(unpublished) == (len(unpublished), 0, 0)
    assert n == len(records) and 0 < within <= measured
    # one record alone (FedCos Table II's FedAvgM and FedOpt rows, seed 0, both within): its cells, then the same
    # record 10 points lower, then the record twice (a second id): a cell counts once however many records hold it
    (rec,) = [r for r in records if r["id"] == "fedcos_table2_fmnist_mlp_totally_noniid_rows_b"]
    assert reproduction.counts([rec]) == (1, 2, 2)
    far = copy.deepcopy(rec)
    for cell in far["cells"]:
        cell["values"] = {seed: v - 10 for seed, v in cell["values"].items()}  # 10 points below the paper's
    assert reproduction.counts([far]) == (1, 2, 0)
    again = {**copy.deepcopy(rec), "id": rec["id"] + "_again"}
    assert reproduction.counts([rec, again]) == (2, 2, 2)
    assert "2 paper cells measured" in reproduction.status_line([rec, again])


def test_a_cell_run_seed_by_seed_in_several_records_counts_once() -> None:
    # FedLAW Table 3's alpha=0.1 column: its rows' seeds 8, 9 and 10 are spread over several records
    law = [r for r in load_evidence() if r["target"] == "fedlaw-table3"]
    per_record = sum(len(r["cells"]) for r in law)
    distinct = {(r["table"], c["row"], c["column"]) for r in law for c in r["cells"]}
    _, measured, _ = reproduction.counts(law)
    assert measured == len(distinct) < per_record
    cards = dict((t.name, card) for t, card in reproduction.target_cards(law))
    assert set(cards) == {"fedlaw-table3"} and len(cards["fedlaw-table3"].query("n > 0")) == measured


def test_the_status_counts_the_claims_as_the_scorecard_judges_them(status: str) -> None:
    # FedLAW Table 3's alpha=0.1 column: FedLAW over FedAvg is -0.15 ± 0.27 on seeds 8-10 (not resolved), over
    # FedProx +0.90 ± 0.16 (resolved, reproduced); one seed never resolves (FedCos Table II's seed-0 rows)
    records = load_evidence()
    yes, no, unresolved = reproduction.claim_counts(records)
    assert (
        yes >= 1
        and unresolved >= 1
        and f"{yes} reproduced, {no} not, {unresolved} not resolved" in status  # status_line(load_evidence())
    )
    one_seed = [r for r in records if r["target"] == "fedcos-table2" and r["seeds"] == [0]]
    assert one_seed and reproduction.claim_counts(one_seed)[:2] == (0, 0)
    assert reproduction.claim_counts(one_seed)[2] > 0
    assert reproduction.claim_counts([]) == (0, 0, 0)


def test_the_page_lists_every_recorded_cell_with_its_command_commit_seeds_and_wall_time(
    pages: dict[str, str],
) -> None:
    records = load_evidence()
    page = pages[reproduction.PAGE]  # doc_pages' reproduction_page(load_evidence())
    for rec in records:
        commands = rec["command"] if isinstance(rec["command"], list) else [rec["command"]]
        assert f"`{rec['preset']}`" in page and f"`{rec['commit']}`" in page
        assert all(c in page for c in commands)
        for cell in rec["cells"]:
            assert re.search(rf"\| {re.escape(cell['row'])} \| {re.escape(cell['column'])} \| ", page), cell
    assert "5,201 s (seed 8)" in page  # FedLAW Table 3's FedAvg, seed 8


def test_every_paper_has_a_page_with_its_targets_and_presets(pages: dict[str, str]) -> None:
    fedlaw = pages["papers/fedlaw.md"]
    assert "### `fedlaw-table3`" in fedlaw and "### `fedlaw_table3_fmnist_mlp` { #fedlaw_table3_fmnist_mlp }" in fedlaw
    assert "Metric: mean test accuracy of the last 10 rounds" in fedlaw  # the preset's header comment
    assert "[`fedgam_table3_mnist_dir0.3`](#fedgam_table3_mnist_dir0-3)" in pages["papers/fedgam.md"]
    assert "reproduction.md" in pages and "reference/methods/fedlaw.md" in pages


def test_the_page_scores_each_record_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the overview and the records' sections read one card per record, the counts one card of the records pooled
    # per target (each card costs a scorecard)
    records = [r for r in load_evidence() if r["target"] == "fedcos-table2"]
    scored: list[set[str]] = []

    def counting(runs: Any, target: Any, table: str | None = None) -> Any:
        scored.append(set(runs["evidence"]))
        return scorecard(runs, target, table=table)

    monkeypatch.setattr(reproduction, "scorecard", counting)
    page = reproduction.reproduction_page(records)
    ids = [r["id"] for r in records]
    # the pooled card holds the records whose seeds no later setup superseded
    assert len(records) > 1 and scored[:-1] == [{i} for i in ids] and scored[-1] <= set(ids)
    assert all(f"### Record `{r['id']}`" in page for r in records)
