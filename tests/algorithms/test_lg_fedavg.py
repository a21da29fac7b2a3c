"""LG-FedAvg as its authors ran it (fedrun/algorithms/lg_fedavg.py): the split by name, the FedAvg start and its
reduction, the split point on every engine and across a kill, and the selection on test data."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from client_methods_util import SMALL, assert_trees_equal, train

from fedrun.config.schema import RunSpec


@pytest.mark.parametrize("engine", ["sequential", "vectorised"])
def test_a_warm_start_as_long_as_the_run_is_fedavg_bit_for_bit(make_spec: Callable[..., RunSpec], engine: str) -> None:
    common = (*SMALL, "fl.rounds=3", f"hardware.engine={engine}", "fl.momentum=0.5")
    fedavg, _, _ = train(make_spec(*common, "algorithm=fedavg"))
    lg, _, _ = train(make_spec(*common, "algorithm=lg_fedavg", "algorithm.warm_rounds=3"))
    assert_trees_equal(lg, fedavg)


@pytest.mark.parametrize("engine", ["sequential", "vectorised"])
def test_the_local_layers_split_off_after_the_warm_rounds(make_spec: Callable[..., RunSpec], engine: str) -> None:
    params, state, log = train(make_spec(*SMALL, "algorithm=lg_fedavg", "algorithm.warm_rounds=1", "fl.rounds=3",
                                         f"hardware.engine={engine}"))  # fmt: skip
    head = {"3.weight", "3.bias"}  # model.hidden=[16]: the last layer "3" is global by default
    assert set(log[0]["uploads"]["params"]) == set(params)  # round 0: FedAvg, the whole model
    assert set(log[1]["uploads"]["params"]) == head == set(log[2]["uploads"]["params"])
    assert float(state["split"]) == 1.0
    body = [k for k in params if k not in head]
    for k in body:  # the global model's local layers stay as FedAvg left them after round 0
        assert torch.equal(params[k], log[1]["start"][k])
        assert not torch.equal(params[k], log[0]["start"][k])
    rows = log[-1]["states"].rows
    assert rows["own"].tolist() == [1.0] * 4  # every client (all 4 train each round) holds its own local layers
