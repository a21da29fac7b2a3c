"""FedProx's presets (conf/experiment/fedprox_*): each one's budget, derived from the numbers litian96/FedProx's run
scripts state, against the composed preset and the preset's "Budget" comment (test_preset_budgets.py's rule)."""

from __future__ import annotations

import pytest

from fedrun.cli.reproduce import preset_cfg
from fedrun.papers.targets import FEDPROX_STRAGGLERS
from tests.papers import test_preset_budgets as general
from tests.papers.test_preset_budgets import EXPERIMENTS, Budget, epochs_rounds, get

SCRIPTS = (
    "litian96/FedProx run_fedavg.sh, run_fedprox.sh: --num_rounds=200 --clients_per_round=10 --num_epochs=20"
    " --batch_size=10; data/synthetic_1_1/generate_synthetic.py NUM_USER = 30"
)
BUDGETS = (
    Budget(
        "fedprox_fig1_synthetic_1_1",
        SCRIPTS,
        dict(rounds=200, clients=30, participation=10 / 30, epochs=20, batch=10),
        epochs_rounds,
        (("system.stragglers", "0,0.5,0.9"),),
    ),
)


def test_every_fedprox_preset_has_a_budget_row() -> None:
    assert {p.stem for p in EXPERIMENTS.glob("fedprox_*.yaml")} == {b.preset for b in BUDGETS}
    assert set(FEDPROX_STRAGGLERS.presets) == {b.preset for b in BUDGETS}


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.preset)
def test_comment_gives_the_derived_rounds(budget: Budget) -> None:
    general.test_preset_comment_gives_the_derived_rounds(budget)


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.preset)
def test_preset_budget_matches_the_scripts(budget: Budget) -> None:
    cfg = preset_cfg(budget.preset)
    derived = budget.derived()
    assert {key: get(cfg, key) for key in derived} == derived, budget.source
    assert dict(FEDPROX_STRAGGLERS.sweep) == dict(budget.sweep)
