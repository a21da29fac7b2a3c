"""Per-client evaluation (fedrun/metrics/personal.py): the aggregates, the batched evaluation against a loop
over clients, fine-tuning, clients.csv, and the default (off) leaving metrics.csv as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.metrics import personal
from fedrun.metrics.personal import chunk_cuts, resume_clients_csv, spread_stats
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from fedrun.run.state import fresh_state
from tests.metrics.local_eval_util import local_evaluation

SMALL = (
    "experiment=smoke",
    "data.max_train_samples=800",
    "data.max_test_samples=300",
    "fl.clients=7",
    "fl.rounds=2",
    "model=mlp",
    "model.hidden=[16]",
    "fl.batch_size=20",
    "partition.alpha=0.3",
    "hardware.threads=1",
)


def test_spread_stats_by_hand() -> None:
    acc = np.array([0.5, 1.0, 0.0, np.nan, 0.25])
    sizes = np.array([2, 4, 2, 3, 0])  # the NaN client and the empty one are left out
    s = spread_stats(acc, sizes, "x")
    assert s["x_mean"] == pytest.approx(0.5)
    assert s["x_wmean"] == pytest.approx((0.5 * 2 + 1.0 * 4) / 8)
    assert s["x_std"] == pytest.approx(np.std([0.5, 1.0, 0.0]))
    assert s["x_worst10"] == 0.0 and s["x_best10"] == 1.0  # ceil(3 / 10) = 1 client each


def _loop_reference(exp, params_of: Callable[[int], dict]) -> np.ndarray:  # noqa: ANN001
    """Each client's accuracy, one client at a time, the plain way."""
    local, fed, model = exp.capability("local_eval").local, exp.fed, exp.model
    split = fed.train if local.on_train else fed.test
    out = []
    model.module.eval()
    for cid, idx in enumerate(local.parts):
        b = fed.batch(torch.as_tensor(idx, dtype=torch.long), split)
        with torch.no_grad():
            out.append(float((model.logits(params_of(cid), b["x"]).argmax(1) == b["y"]).float().mean()))
    model.module.train()
    return np.array(out)


@pytest.mark.parametrize("mode", ["split", "partition"])
def test_batched_evaluation_equals_a_loop_over_clients(mode: str, make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "algorithm=fedper", f"eval.local_test={mode}", "eval.batch_size=64"))
    state = fresh_state(exp)
    # give every client a different head, so each client's model differs
    gen = torch.Generator().manual_seed(0)
    rows = state.clients.rows["personal"]
    for k in rows:
        rows[k].add_(torch.randn(rows[k].shape, generator=gen))
    ev = local_evaluation(exp, None, 0)
    row = ev(exp.algorithm, state.params, state.clients, 0, 0.1)
    own = _loop_reference(exp, lambda c: {**state.params, **{k: rows[k][c] for k in rows}})
    glob = _loop_reference(exp, lambda c: state.params)
    sizes = exp.capability("local_eval").local.sizes
    assert row == pytest.approx(
        {**spread_stats(own, sizes, "local_acc"), **spread_stats(glob, sizes, "local_global_acc")}
    )
    assert len(ev.chunks) > 1  # eval.batch_size=64 cuts the clients into several chunks


@pytest.mark.parametrize("keep_inputs", [True, False])
@pytest.mark.parametrize("mode", ["split", "partition"])
def test_whole_personal_models_by_vmap_equal_a_loop_over_clients(
    mode: str, keep_inputs: bool, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ditto's v_i are whole models: the vmap path, its chunks indexing the kept inputs or gathering their own
    if not keep_inputs:
        monkeypatch.setattr(personal, "INPUTS_BYTES", 0)
    exp = build_experiment(make_spec(*SMALL, "algorithm=ditto", f"eval.local_test={mode}", "eval.batch_size=64"))
    state = fresh_state(exp)
    gen = torch.Generator().manual_seed(1)
    v = state.clients.rows["v"]
    for k in v:
        v[k].add_(0.5 * torch.randn(v[k].shape, generator=gen))
    ev = local_evaluation(exp, None, 0)
    row = ev(exp.algorithm, state.params, state.clients, 0, 0.1)
    assert (ev.local_inputs() is not None) == keep_inputs
    own = _loop_reference(exp, lambda c: {k: v[k][c] for k in v})
    glob = _loop_reference(exp, lambda c: state.params)
    sizes = exp.capability("local_eval").local.sizes
    assert row == pytest.approx(
        {**spread_stats(own, sizes, "local_acc"), **spread_stats(glob, sizes, "local_global_acc")}
    )
    assert len(ev.chunks) > 1 and np.unique(own).size > 2


def _brute_cuts(w: list[int], cap: int, overhead: int) -> float:
    """The least padded samples + overhead per chunk over every way of cutting ``w`` into contiguous chunks."""
    best = float("inf")
    for mask in range(1 << (len(w) - 1)):
        starts = [0] + [i + 1 for i in range(len(w) - 1) if mask >> i & 1] + [len(w)]
        groups = list(zip(starts, starts[1:], strict=False))
        if all(b - a == 1 or (b - a) * w[a] <= cap for a, b in groups):
            best = min(best, sum((b - a) * w[a] + overhead for a, b in groups))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_chunk_cuts_are_the_cheapest_contiguous_cutting(seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = sorted(rng.integers(1, 60, size=9).tolist(), reverse=True)
    cap, overhead = int(rng.integers(40, 200)), int(rng.integers(0, 50))
    cuts = chunk_cuts(np.array(w), cap, overhead)
    assert [a for a, _ in cuts] == [0] + [b for _, b in cuts[:-1]] and cuts[-1][1] == len(w)  # a cover, in order
    assert all(b - a == 1 or (b - a) * w[a] <= cap for a, b in cuts)  # a chunk of several fits the cap
    assert sum((b - a) * w[a] + overhead for a, b in cuts) == _brute_cuts(w, cap, overhead)


def test_finetuning_changes_the_clients_models_reproducibly(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "eval.local_test=split", "eval.finetune_steps=3", "eval.finetune_lr=0.5"))
    state = fresh_state(exp)
    ev = local_evaluation(exp, None, 0)
    a = ev(exp.algorithm, state.params, state.clients, 0, 0.1)
    b = ev(exp.algorithm, state.params, state.clients, 0, 0.1)
    assert a == b
    assert a["local_acc_mean"] != a["local_global_acc_mean"]  # fine-tuned vs the global model
    c = ev(exp.algorithm, state.params, state.clients, 1, 0.1)  # another round: other minibatches
    assert c != a


def test_clients_csv_per_round_and_cut_back_on_resume(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    run(make_spec(*SMALL, "eval.local_test=partition", "fl.rounds=3"), tmp_path)
    rows = pd.read_csv(tmp_path / "clients.csv")
    assert list(rows.columns) == ["round", "client", "test_samples", "global_acc", "acc"]
    assert rows.groupby("round").size().to_dict() == {1: 7, 2: 7, 3: 7}
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    r3 = rows[rows["round"] == 3]
    w = r3["test_samples"] / r3["test_samples"].sum()
    assert metrics["local_global_acc_wmean"].iloc[-1] == pytest.approx(float((r3["global_acc"] * w).sum()))
    resume_clients_csv(tmp_path / "clients.csv", 2)
    assert sorted(pd.read_csv(tmp_path / "clients.csv")["round"].unique()) == [1, 2]
    resume_clients_csv(tmp_path / "clients.csv", 0)
    assert not (tmp_path / "clients.csv").exists()


def test_partition_convention_global_columns_match_the_test_accuracy_when_all_classes_are_held(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    # the test split dealt out whole: the size-weighted mean of the global model's local accuracies is its test accuracy
    small = [o for o in SMALL if not o.startswith("partition.")]
    run(make_spec(*small, "eval.local_test=partition", "partition=iid"), tmp_path)
    m = pd.read_csv(tmp_path / "metrics.csv")
    assert m["local_global_acc_wmean"].tolist() == pytest.approx(m["test_acc"].tolist())


def test_off_by_default_writes_no_new_column_or_file(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    run(make_spec(*SMALL), tmp_path)
    assert not [c for c in pd.read_csv(tmp_path / "metrics.csv").columns if c.startswith("local_acc")]
    assert not (tmp_path / "clients.csv").exists()
