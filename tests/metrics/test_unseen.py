"""Unseen clients (``eval.unseen_clients``): more clients of the same partition that never train, evaluated with the
global model and after fine-tuning from it; reproducible, and refused without local test splits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.metrics.personal import hits_at, spread_stats
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from fedrun.run.state import fresh_state
from tests.conftest import refused_in_one_line
from tests.metrics.local_eval_util import local_evaluation
from tests.metrics.test_personal import SMALL

UNSEEN = (*SMALL, "fl.clients=5", "eval.local_test=split", "eval.unseen_clients=2")


def test_unseen_clients_are_the_partitions_last_parts_and_never_train(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*UNSEEN))
    held: Any = exp.capability("local_eval")
    assert len(exp.fed.clients) == 5 and held.unseen is not None and len(held.unseen.train_parts) == 2
    trained = np.concatenate([c.cpu().numpy() for c in exp.fed.clients])
    unseen = np.concatenate([*held.unseen.train_parts, *held.unseen.local_test.parts])
    assert unseen.size and not np.intersect1d(trained, unseen).size  # no unseen sample is trained on
    ref = build_experiment(make_spec(*SMALL, "fl.clients=7", "eval.local_test=split"))  # the same 7-way partition
    ref_local: Any = ref.capability("local_eval")
    for mine, theirs in zip(held.unseen.local_test.parts, ref_local.local.parts[5:], strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_unseen_columns_global_model_by_hand_and_fine_tuning_reproducible(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    for name in ("a", "b", "k0"):
        (tmp_path / name).mkdir()
    spec = make_spec(*UNSEEN, "eval.finetune_steps=2")
    run(spec, tmp_path / "a")
    run(make_spec(*UNSEEN, "eval.finetune_steps=2"), tmp_path / "b")
    a, b = (pd.read_csv(tmp_path / n / "clients.csv") for n in ("a", "b"))
    pd.testing.assert_frame_equal(a, b)  # fine-tuning draws are keyed: the same numbers every time
    unseen = a[a["unseen"] == 1]
    assert sorted(unseen["client"].unique()) == [5, 6]
    assert (unseen["acc"] != unseen["global_acc"]).any()  # fine-tuned from the global model
    run(make_spec(*UNSEEN), tmp_path / "k0")
    rows = pd.read_csv(tmp_path / "k0" / "metrics.csv")
    np.testing.assert_allclose(rows["unseen_acc_mean"], rows["unseen_global_acc_mean"])  # no fine-tuning: global


def test_unseen_global_accuracy_by_hand(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*UNSEEN, "algorithm=fedper"))  # a personalised method: unseen get w all the same
    state = fresh_state(exp)
    for t in state.clients.rows["personal"].values():  # the trained clients' heads differ from w's
        t.add_(1.0)
    row = local_evaluation(exp, None, 0)(exp.algorithm, state.params, state.clients, 0, 0.1)
    assert exp.capability("local_eval").unseen is not None
    exp.model.module.eval()
    acc = np.array([
        float(hits_at(exp.model, state.params, exp.fed, exp.fed.train, torch.as_tensor(p), 64).float().mean())
        for p in exp.capability("local_eval").unseen.local_test.parts
    ])  # fmt: skip
    sizes = exp.capability("local_eval").unseen.local_test.sizes
    assert {k: v for k, v in row.items() if k.startswith("unseen")} == pytest.approx(
        {**spread_stats(acc, sizes, "unseen_acc"), **spread_stats(acc, sizes, "unseen_global_acc")}
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["eval.unseen_clients=2"], "eval.unseen_clients: unseen clients are evaluated on local test splits"),
        (["eval.local_test=split", "eval.unseen_clients=-1"], "eval.unseen_clients: must be >= 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    refused_in_one_line(tmp_path, monkeypatch, capsys, [*SMALL, *args], words)
