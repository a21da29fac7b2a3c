"""FedRoD: the personalised predictor is g(z) + p_i(z), a zero personal head is the generic model, the generic model
trains on the balanced softmax loss with each client's own class counts, and bad input is one line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch, train
from test_personalised import test_kill_and_resume_restores_personal_state_bit_for_bit as resume_check

from fedrun.algorithms.fedrod import ABSENT
from fedrun.config.schema import RunSpec
from fedrun.core.tree import unstack
from fedrun.run.experiment import build_experiment
from tests.conftest import refused_in_one_line


def features(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """z = phi(x) of the tiny model (0 Linear, 1 Tanh | head: 2 Linear)."""
    return torch.tanh(x @ params["0.weight"].T + params["0.bias"])


def test_a_zero_personal_head_is_the_generic_model_and_a_head_adds_its_logits() -> None:
    algo = make_algo("fedrod")
    w = algo.model.init_params()
    state = algo.client_init(w)
    assert algo.head == ["2.weight", "2.bias"]
    assert_trees_equal(algo.personal_model(w, state), w)  # p_init=zero: the personalised model is the generic one
    g = torch.Generator().manual_seed(3)
    p = {k: torch.randn(t.shape, generator=g, dtype=t.dtype) for k, t in state["p_head"].items()}
    x = tiny_batch()["x"]
    z = features(w, x)
    generic = z @ w["2.weight"].T + w["2.bias"]
    personal = z @ p["2.weight"].T + p["2.bias"]
    got = algo.model.logits(algo.personal_model(w, {**state, "p_head": p}), x)
    torch.testing.assert_close(got, generic + personal, rtol=0, atol=1e-12)  # g(z) + p_i(z)
    copied = make_algo("fedrod", p_init="copy").client_init(w)["p_head"]
    assert_trees_equal(copied, {k: w[k] for k in algo.head})


def test_one_step_by_hand_balanced_softmax_for_the_model_plain_ce_for_the_personal_head() -> None:
    algo = make_algo("fedrod")
    w = algo.model.init_params()
    batch = tiny_batch()
    prior = torch.tensor([3.0, 1.0], dtype=torch.float64).log()  # n_{i,c} = (3, 1)
    p = {k: torch.full_like(t, 0.1) for k, t in algo.client_init(w)["p_head"].items()}
    ctx = ctx_for(algo, w, lr=0.2)._replace(state={"p_head": p, "log_prior": prior})
    new, _, state, loss = algo.client_step(w, None, batch, ctx)

    leaves = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    bsm = F.cross_entropy(algo.model.logits(leaves, batch["x"]) + prior, batch["y"])
    grads = torch.autograd.grad(bsm, list(leaves.values()))
    assert_trees_equal(new, {k: w[k] - 0.2 * g for (k, _), g in zip(leaves.items(), grads, strict=True)}, atol=1e-12)
    torch.testing.assert_close(loss, bsm.detach(), rtol=0, atol=1e-12)

    head = {k: (w[k] + p[k]).requires_grad_(True) for k in algo.head}  # d/dp of CE(g(z) + p(z)) = d/dhead at g + p
    ref = plain_grad(algo.model, {**w, **{k: v.detach() for k, v in head.items()}}, batch)
    assert_trees_equal(state["p_head"], {k: p[k] - 0.2 * ref[k] for k in p}, atol=1e-12)


def test_a_balanced_prior_trains_the_generic_model_as_fedavg(make_spec: Callable[..., RunSpec]) -> None:
    algo = make_algo("fedrod")
    w = algo.model.init_params()
    uniform = {"p_head": algo.client_init(w)["p_head"], "log_prior": torch.full((2,), 2.0, dtype=torch.float64)}
    a, _, _, _ = algo.client_step(w, None, tiny_batch(), ctx_for(algo, w, lr=0.3)._replace(state=uniform))
    fedavg = make_algo("fedavg")
    b, _, _, _ = fedavg.client_step(w, None, tiny_batch(), ctx_for(fedavg, w, lr=0.3))
    assert_trees_equal(a, b, atol=1e-12)  # log n_c the same for every class: CE shifted by a constant


def test_each_client_gets_its_own_class_counts(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL, "algorithm=fedrod", "partition=shards", "partition.shards_per_client=2")
    _, _, log = train(spec, rounds=1)
    exp = build_experiment(spec)
    prior = log[-1]["states"].rows["log_prior"]
    for i, part in enumerate(exp.fed.clients):
        counts = torch.bincount(exp.fed.train.y[part], minlength=10).to(prior.dtype)
        want = torch.where(counts > 0, counts.clamp(min=1).log(), torch.full_like(counts, ABSENT))
        torch.testing.assert_close(prior[i], want, rtol=0, atol=0)
    assert (prior == ABSENT).any()  # shards: some classes absent
    state = unstack(log[-1]["states"].rows, 0)
    assert any(bool((t != 0).any()) for t in state["p_head"].values())  # the personal head trained


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["algorithm.head=[]"], "algorithm.head: FedRoD adds its personal head to one linear layer, not []"),
        (["algorithm.p_init=random"], "algorithm.p_init: invalid value 'random'; valid: zero, copy"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    refused_in_one_line(tmp_path, monkeypatch, capsys, [*SMALL, "algorithm=fedrod", *args], words)


def test_kill_and_resume_restores_every_clients_state_bit_for_bit(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    resume_check("fedrod", tmp_path, make_spec, monkeypatch)  # the personalised methods' check (vectorised engine)
