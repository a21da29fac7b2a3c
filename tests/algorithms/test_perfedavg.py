"""Per-FedAvg: the Hessian-free step approximates the exact MAML gradient, alpha = 0 is FedAvg on D', FO drops the
Hessian term, the personalised model is one alpha step at evaluation, and bad input is one line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch
from test_personalised import test_kill_and_resume_restores_personal_state_bit_for_bit as resume_check

from fedrun.algorithms.perfedavg import deal
from fedrun.config.schema import RunSpec
from fedrun.run.loop import run
from tests.conftest import refused_in_one_line


def maml_grad(algo, w: dict, batch: dict, alpha: float) -> dict:  # noqa: ANN001
    """The exact gradient of F(w) = f(w - alpha grad f(w; D); D') by double backward, D'' = D for the Hessian."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    d0, d1 = deal(batch, 0), deal(batch, 1)
    g0 = torch.autograd.grad(algo.model.loss(leaves, d0), list(leaves.values()), create_graph=True)
    inner = {k: v - alpha * g for (k, v), g in zip(leaves.items(), g0, strict=True)}
    outer = torch.autograd.grad(algo.model.loss(inner, d1), list(leaves.values()))
    return dict(zip(leaves, outer, strict=True))


def test_the_hessian_free_step_approximates_the_exact_maml_gradient() -> None:
    algo = make_algo("perfedavg", alpha=0.3, delta=1e-5)
    w = algo.model.init_params()
    batch = {k: v.repeat_interleave(3, 0) for k, v in tiny_batch(n=3).items()}  # D = D' = D'': the exact Hessian's
    new, _, _, _ = algo.client_step(w, None, batch, ctx_for(algo, w, lr=0.1))
    exact = maml_grad(algo, w, batch, 0.3)
    assert_trees_equal(new, {k: w[k] - 0.1 * exact[k] for k in w}, atol=1e-9)
    first_order = make_algo("perfedavg", alpha=0.3, variant="fo")
    fo, _, _, _ = first_order.client_step(w, None, batch, ctx_for(first_order, w, lr=0.1))
    g0 = plain_grad(algo.model, w, deal(batch, 0))
    g = plain_grad(algo.model, {k: w[k] - 0.3 * g0[k] for k in w}, deal(batch, 1))
    assert_trees_equal(fo, {k: w[k] - 0.1 * g[k] for k in w}, atol=1e-12)  # FO: no Hessian term
    assert max(float((fo[k] - new[k]).abs().max()) for k in w) > 1e-6  # and the Hessian term mattered


def test_alpha_zero_is_a_fedavg_step_on_the_second_part() -> None:
    algo = make_algo("perfedavg", alpha=0.0)
    fedavg = make_algo("fedavg")
    w = algo.model.init_params()
    batch = tiny_batch(n=10)
    new, _, _, _ = algo.client_step(w, None, batch, ctx_for(algo, w, lr=0.2))
    d1 = {k: v[1::3] for k, v in batch.items()}
    ref, _, _, _ = fedavg.client_step(w, None, d1, ctx_for(fedavg, w, lr=0.2))
    assert_trees_equal(new, ref, atol=1e-12)


def test_a_part_a_short_batch_lacks_has_zero_gradient() -> None:
    algo = make_algo("perfedavg")
    w = algo.model.init_params()
    new, _, _, _ = algo.client_step(w, None, tiny_batch(n=1), ctx_for(algo, w, lr=0.2))
    assert_trees_equal(new, w)  # one sample: D' is empty, so the step is zero (no NaN)


def test_the_personalised_model_is_one_alpha_step_at_evaluation(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    over = (*SMALL, "algorithm=perfedavg", "algorithm.alpha=0.05", "eval.local_test=split")
    for name in ("own", "explicit", "three"):
        (tmp_path / name).mkdir()
    run(make_spec(*over), tmp_path / "own")
    run(make_spec(*over, "eval.finetune_steps=1", "eval.finetune_lr=0.05"), tmp_path / "explicit")
    own = pd.read_csv(tmp_path / "own" / "clients.csv")
    pd.testing.assert_frame_equal(own, pd.read_csv(tmp_path / "explicit" / "clients.csv"))
    assert (own["acc"] != own["global_acc"]).any()  # the step changed some client's accuracy
    run(make_spec(*over, "eval.finetune_steps=3"), tmp_path / "three")  # a set eval.finetune_steps overrides it
    assert not own.equals(pd.read_csv(tmp_path / "three" / "clients.csv"))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["algorithm.variant=so"], "algorithm.variant: invalid value 'so'; valid: hf, fo"),
        (["algorithm.alpha=-0.1"], "algorithm.alpha: must be >= 0"),
        (["algorithm.delta=0"], "algorithm.delta: must be > 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    refused_in_one_line(tmp_path, monkeypatch, capsys, [*SMALL, "algorithm=perfedavg", *args], words)


def test_kill_and_resume_restores_every_clients_state_bit_for_bit(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    resume_check("perfedavg", tmp_path, make_spec, monkeypatch)  # the personalised methods' check (vectorised engine)
