"""LG-FedAvg as its authors ran it (fedrun/algorithms/lg_fedavg.py): the split by name, the FedAvg start and its
reduction, the split point on every engine and across a kill, and the selection on test data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from client_methods_util import SMALL, assert_trees_equal, make_algo, train

from fedrun.config.schema import RunSpec
from fedrun.core.tree import nbytes
from fedrun.run import loop
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS

SPLIT = (*SMALL, "eval.local_test=split")


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


def test_the_warm_rounds_take_warm_lr_and_send_the_whole_model() -> None:
    algo = make_algo("lg_fedavg", warm_rounds=3, warm_lr=0.1)
    assert [algo.local_lr(r, 0.05) for r in range(5)] == [0.1, 0.1, 0.1, 0.05, 0.05]
    assert make_algo("lg_fedavg", warm_rounds=3).local_lr(0, 0.05) == 0.05  # no warm_lr: the configured schedule
    w = algo.model.init_params()
    state = algo.server_init(w)
    assert algo.broadcast_bytes(w, algo.broadcast(w, state)) == nbytes(w)
    head = {k: w[k] for k in algo.shared}  # tiny_model's last layer "2"
    assert set(head) == {"2.weight", "2.bias"}
    split = {"split": torch.ones_like(state["split"])}
    assert algo.broadcast_bytes(w, algo.broadcast(w, split)) == nbytes(head)
    assert make_algo("lg_fedavg").broadcast(w, {}) == {}  # no warm start: nothing more than before it existed


def test_the_authors_selection_is_each_clients_best_accuracy_so_far(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    run(make_spec(*SPLIT, "algorithm=lg_fedavg", "algorithm.select_on_test=true", "fl.rounds=4"), tmp_path)
    clients, metrics = pd.read_csv(tmp_path / "clients.csv"), pd.read_csv(tmp_path / "metrics.csv")
    best = clients.sort_values("round").groupby("client")["acc"].cummax()
    np.testing.assert_array_equal(clients.loc[best.index, "best_acc"], best)
    mean = clients.groupby("round")["best_acc"].mean()
    np.testing.assert_allclose(metrics["local_best_acc_mean"], mean.to_numpy())
    assert (metrics["local_best_acc_mean"].diff().dropna() >= 0).all()
    assert "local_best_acc_mean" not in pd.read_csv(_plain_run(tmp_path, make_spec) / "metrics.csv")


def _plain_run(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> Path:
    out = tmp_path / "plain"
    out.mkdir()
    run(make_spec(*SPLIT, "algorithm=lg_fedavg", "fl.rounds=1"), out)
    return out


def test_a_kill_across_the_split_resumes_bit_for_bit(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    over = (*SPLIT, "algorithm=lg_fedavg", "algorithm.warm_rounds=2", "algorithm.select_on_test=true",
            "fl.rounds=4", "checkpoint.every=1", "hardware.engine=vectorised", "fl.participation=0.5",
            "eval.finetune_epochs=1", "eval.finetune_momentum=0.5")  # fmt: skip
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    run(make_spec(*over), whole)
    real = loop.train_step

    def killed_in_round_4(experiment, state, rnd):  # noqa: ANN001, ANN202
        if rnd == 3:
            raise KeyboardInterrupt
        return real(experiment, state, rnd)

    monkeypatch.setattr(loop, "train_step", killed_in_round_4)
    assert run(make_spec(*over), cut)["status"] == "interrupted"
    monkeypatch.setattr(loop, "train_step", real)
    assert run(make_spec(*over), cut)["resumed_from_round"] == 3
    timings = list(TIMING_COLUMNS)
    pd.testing.assert_frame_equal(
        pd.read_csv(cut / "metrics.csv").drop(columns=timings), pd.read_csv(whole / "metrics.csv").drop(columns=timings)
    )
    assert (cut / "clients.csv").read_bytes() == (whole / "clients.csv").read_bytes()
