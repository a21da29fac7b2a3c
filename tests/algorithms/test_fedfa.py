"""FedFA: the anchor loss by hand, classifier calibration == torch Adam, anchor EMA, round gating."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from client_methods_util import SMALL, ctx_for, make_algo, plain_grad, tiny_batch, tiny_model, train

from fedrun.algorithms.base import sgd_step
from fedrun.algorithms.fedfa import anchor_loss
from fedrun.config.schema import FLConfig


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
    # anchors (one batch = one epoch here): 0.5 a + 0.5 (batch class-mean of z at the step's start)
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


def fedima_anchor_reference(wt, batches, epochs, anchors, lr):  # noqa: ANN001, ANN201
    """FedIMA's fedfa_cl_optimizer (utils/optimizer.py 765-842) on the tiny model, round 0 (CE only, no
    calibration), transcribed with plain autograd: per epoch, the batch class-means of the features are
    summed over the batches where the class occurs, divided by *all* the epoch's batches, and folded into
    the anchors with momentum 0.5; the loss uses the downloaded anchors throughout."""
    w = {k: v.clone() for k, v in wt.items()}
    epoch_mean = anchors.clone()
    label_set = sorted({int(c) for b in batches[0] for c in b["y"]})
    for e in range(epochs):
        batch_mean = torch.zeros_like(anchors)
        for b in batches[e]:
            leaves = {k: v.detach().clone().requires_grad_(True) for k, v in w.items()}
            z = torch.tanh(b["x"] @ leaves["0.weight"].T + leaves["0.bias"])
            logits = z @ leaves["2.weight"].T + leaves["2.bias"]
            grads = torch.autograd.grad(F.cross_entropy(logits, b["y"]), list(leaves.values()))
            w = {k: w[k] - lr * g for k, g in zip(leaves, grads, strict=True)}
            for c in set(b["y"].tolist()):
                batch_mean[c] += z.detach()[b["y"] == c].mean(0)
        for c in label_set:
            epoch_mean[c] = 0.5 * epoch_mean[c] + 0.5 * batch_mean[c] / len(batches[e])
    return w, epoch_mean


def test_anchors_update_once_per_epoch_dividing_by_all_the_epochs_batches() -> None:
    algo = _algo()
    wt = algo.model.init_params()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 1, 0])
    n, bsz, epochs = 5, 2, 3  # ceil(5 / 2) = 3 batches per epoch; class 0 misses some of them
    orders = [torch.tensor([1, 2, 0, 3, 4]), torch.tensor([0, 4, 1, 2, 3]), torch.tensor([3, 1, 2, 0, 4])]
    batches = [[{"x": x[o[i : i + bsz]], "y": y[o[i : i + bsz]]} for i in range(0, n, bsz)] for o in orders]
    anchors = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    extras = {"anchors": anchors, "flags": torch.tensor([0.0, 0.0])}  # round 0: CE only
    algo.fl = FLConfig(rounds=8, batch_size=bsz)
    ctx = ctx_for(algo, wt, extras=extras, lr=0.1)._replace(size=torch.tensor(float(n), dtype=torch.float64))
    w = wt
    for b in (b for epoch in batches for b in epoch):
        w, _, st, _ = algo.client_step(w, None, b, ctx)
        ctx = ctx._replace(state=st)
    upload, reset = algo.client_finish(wt, w, ctx, torch.tensor(epochs * 3))
    ref_w, ref_anchors = fedima_anchor_reference(wt, batches, epochs, anchors, 0.1)
    for k in wt:
        torch.testing.assert_close(w[k], ref_w[k])
    torch.testing.assert_close(upload["anchors"], ref_anchors)
    assert float(reset["epoch_steps"]) == 0 and torch.equal(reset["anchor_keep"], torch.ones(2, dtype=torch.float64))
