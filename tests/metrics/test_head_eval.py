"""The linear-head shortcut of the per-client evaluation (fedrun/metrics/head_eval.py) gives the full forward
pass's counts, and is taken only where the clients' models differ in one linear layer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.metrics.finetune import FineTune
from fedrun.metrics.head_eval import linear_head
from fedrun.run.experiment import build_experiment
from fedrun.run.state import fresh_state
from tests.metrics.local_eval_util import local_evaluation
from tests.metrics.test_personal import SMALL


@pytest.mark.parametrize("method", ["fedper", "fedrod", "fedrep"])
def test_the_head_shortcut_counts_what_the_full_forward_pass_counts(
    method: str, make_spec: Callable[..., RunSpec]
) -> None:
    epochs = ("fl.local_epochs=2",) if method == "fedrep" else ()  # FedRep needs a head epoch
    exp = build_experiment(make_spec(*SMALL, f"algorithm={method}", "eval.local_test=partition", "eval.batch_size=64",
                                     *epochs))  # fmt: skip
    state = fresh_state(exp)
    gen = torch.Generator().manual_seed(0)
    rows = state.clients.rows["p_head" if method == "fedrod" else "personal"]
    for k in rows:  # every client its own head
        rows[k].add_(torch.randn(rows[k].shape, generator=gen))
    ev = local_evaluation(exp, None, 0)
    assert ev is not None and linear_head(exp.model, exp.algorithm.personal_keys()) == "3"
    ev.ft = FineTune()
    fast = ev.accuracies(exp.algorithm, state.params, state.clients, 0, 0.1)[1]
    exp.model.module.eval()
    slow = ev.own_hits(exp.algorithm, state.params, state.clients, 0, 0.1) / ev.sizes  # a forward pass per client
    exp.model.module.train()
    np.testing.assert_array_equal(fast, slow)
    assert np.unique(fast).size > 3  # the clients' heads give different accuracies


@pytest.mark.parametrize("method", ["lg_fedavg", "local", "ditto", "fedavg"])
def test_no_shortcut_where_more_than_a_linear_head_differs(method: str, make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, f"algorithm={method}"))
    assert linear_head(exp.model, exp.algorithm.personal_keys()) is None
