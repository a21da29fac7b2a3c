"""pFedMe's presets (conf/experiment/pfedme_*): each one's budget, from the numbers CharlieDinh/pFedMe's README
commands state (Synthetic, "Fine-tuned Parameters"), against the composed preset and its "Budget" comment."""

from __future__ import annotations

import pytest

from fedrun.cli.reproduce import preset_cfg
from fedrun.papers.targets import PFEDME_SYNTHETIC
from tests.papers import test_preset_budgets as general
from tests.papers.test_preset_budgets import EXPERIMENTS, Budget, get, steps_rounds

README = (
    "CharlieDinh/pFedMe README.md lines 119-128: --num_global_iters 600 --local_epochs 20 --batch_size 20 --numusers"
    " 10; data/Synthetic/generate_synthetic_05_05.py NUM_USER = 100"
)
STATED = dict(rounds=600, clients=100, participation=10 / 100, steps=20, batch=20)  # --numusers 10 of 100
BUDGETS = tuple(Budget(p, README, STATED, steps_rounds) for p in PFEDME_SYNTHETIC.presets)


def test_every_pfedme_preset_has_a_budget_row() -> None:
    assert {p.stem for p in EXPERIMENTS.glob("pfedme_*.yaml")} == {b.preset for b in BUDGETS}


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.preset)
def test_comment_gives_the_derived_rounds(budget: Budget) -> None:
    general.test_preset_comment_gives_the_derived_rounds(budget)


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.preset)
def test_preset_budget_matches_the_readme(budget: Budget) -> None:
    cfg = preset_cfg(budget.preset)
    derived = budget.derived()
    assert {key: get(cfg, key) for key in derived} == derived, budget.source
    # the rows that train with another batch than the preset's: Per-FedAvg's D and D' are a minibatch of 60
    per = next(m for m in PFEDME_SYNTHETIC.methods if m.label == "Per-FedAvg")
    assert "fl.batch_size=60" in per.for_preset(budget.preset)
