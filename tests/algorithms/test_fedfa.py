"""FedFA: the anchor loss by hand, classifier calibration == torch Adam, anchor EMA, round gating."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import sgd_step
from fedrun.algorithms.fedfa import anchor_loss
from fedrun.config import FLConfig


def _algo(rounds: int = 8):  # noqa: ANN202
    algo = make_algo("fedfa", tiny_model(), fl=FLConfig(rounds=rounds))
    algo.num_classes = 2
    return algo


def test_anchor_loss_by_hand() -> None:
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = torch.tensor([0, 1, 1])
    a = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    # class 0: ||(1,0)||^2 / 1 = 1; class 1: (1 + 1) / 2 each -> 0.5 + 0.5; sum 2, / C=2
    assert torch.allclose(anchor_loss(z, y, a, None), torch.tensor(1.0))


def test_round_gating_and_anchor_init() -> None:
    algo = _algo(rounds=8)
    w = algo.model.init_params()
    st = algo.server_init(w)
    anchors = st["anchors"]
    assert anchors.shape == (2, 3) and torch.equal(anchors.sum(1), torch.ones(2, dtype=anchors.dtype))
    assert torch.equal(algo.broadcast(w, st)["flags"], torch.tensor([0.0, 0.0]))  # round 0: CE only
    st["round"] = torch.tensor(1.0)
    assert torch.equal(algo.broadcast(w, st)["flags"], torch.tensor([1.0, 0.0]))
    st["round"] = torch.tensor(3.0)  # > R/4 = 2: calibrate
    assert torch.equal(algo.broadcast(w, st)["flags"], torch.tensor([1.0, 1.0]))


def test_step_with_anchor_loss_and_calibration_matches_torch() -> None:
    algo = _algo()
    model, wt, batch = algo.model, algo.model.init_params(), tiny_batch()
    anchors = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    extras = {"anchors": anchors, "flags": torch.tensor([1.0, 1.0])}
    ctx = ctx_for(algo, wt, extras=extras, lr=0.1)
    new, _, st, _ = algo.client_step(wt, None, batch, ctx)
    # reference: SGD on CE + 0.1 * anchor loss, then one torch Adam step on the classifier
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in wt.items()}
    z = torch.tanh(batch["x"] @ leaves["0.weight"].T + leaves["0.bias"])
    loss = model.loss(leaves, batch) + 0.1 * anchor_loss(z, batch["y"], anchors, None)
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
    ref, _ = sgd_step(wt, grads, None, 0.1, 0.0, 0.0, None)
    head = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        head.weight.copy_(ref["2.weight"])
        head.bias.copy_(ref["2.bias"])
    adam = torch.optim.Adam(head.parameters(), lr=1e-3)
    F.cross_entropy(head(anchors), torch.arange(2)).backward()
    adam.step()
    torch.testing.assert_close(new["0.weight"], ref["0.weight"])
    torch.testing.assert_close(new["2.weight"], head.weight.detach())
    torch.testing.assert_close(new["2.bias"], head.bias.detach())
    assert float(st["adam_t"]) == 1
    # anchors: 0.5 a + 0.5 (batch class-mean of z at the step's starting point) for seen classes
    upload, reset = algo.client_finish(wt, new, ctx._replace(state=st), torch.tensor(1))
    z0 = z.detach()
    for c in range(2):
        mean_c = z0[batch["y"] == c].mean(0)
        torch.testing.assert_close(upload["anchors"][c], 0.5 * anchors[c] + 0.5 * mean_c)
    assert float(reset["z_batches"].sum()) == 0 and float(reset["adam_t"]) == 0


def test_round0_is_plain_sgd_on_ce() -> None:
    algo = _algo()
    wt, batch = algo.model.init_params(), tiny_batch()
    ctx = ctx_for(algo, wt, lr=0.1)
    new, _, _, _ = algo.client_step(wt, None, batch, ctx)
    g = plain_grad(algo.model, wt, batch)
    for k in wt:
        torch.testing.assert_close(new[k], wt[k] - 0.1 * g[k], atol=1e-12, rtol=0)


def test_fedfa_runs_and_averages_anchors(make_spec) -> None:
    params, state, log = train(make_spec("algorithm=fedfa", *SMALL, "fl.rounds=3"))
    ups, weights = log[-1]["uploads"]["anchors"], log[-1]["weights"]
    torch.testing.assert_close(state["anchors"], (weights.reshape(-1, 1, 1).to(ups.dtype) * ups).sum(0))
    assert float(state["round"]) == 3 and all(torch.isfinite(v).all() for v in params.values())
