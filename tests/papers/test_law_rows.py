"""FedLAW's method rows run as its code ran them (issue 24 points 1 and 4)."""

from __future__ import annotations

import pytest
import torch

from fedrun.algorithms.base import ClientContext
from fedrun.models.base import FunctionalModel
from fedrun.papers.targets import BY_NAME, LAW_METHODS

LAW_PRESETS = sorted({p for t in BY_NAME.values() if t.methods == LAW_METHODS for p in t.presets})


def row(label: str) -> tuple[str, ...]:
    return next(m.overrides for m in LAW_METHODS if m.label == label)


@pytest.mark.parametrize("preset", ["fedlaw_table3_fmnist_mlp", "fedlaw_table3_cifar100_simplecnn"])
def test_fedlaw_fedprox_clients_step_as_perturbed_gradient_descent(make_spec, preset: str) -> None:
    # FedLAW utils.py: PerturbedGradientDescent.step, p -= lr (grad f + mu (p - w^t)): no momentum, no weight
    # decay (the presets' SGD(0.9, 5e-4 / 5e-5) is every other row's optimiser), three steps by plain torch
    spec = make_spec(f"experiment={preset}", *row("FedProx"), "hardware.threads=1")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    model = FunctionalModel(module)
    algo = spec.algorithm.obj(spec.algorithm.params, spec.fl, model)
    wt = model.init_params()
    g = torch.Generator().manual_seed(1)
    batches = [{"x": torch.randn(6, 4, generator=g, dtype=torch.float64), "y": torch.randint(0, 2, (6,), generator=g)}]
    batches *= 3
    lr, mu = 0.08, 1e-3
    params, opt = dict(wt), {k: torch.zeros_like(v) for k, v in wt.items()}  # the kept momentum buffer
    ctx = ClientContext(wt, {}, {}, lr)
    for b in batches:
        params, opt, _, _ = algo.client_step(params, opt, b, ctx)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    ref.load_state_dict({k: v.clone() for k, v in module.state_dict().items()})
    for p, w in zip(ref.parameters(), wt.values(), strict=True):
        p.data.copy_(w)
    anchor = [p.detach().clone() for p in ref.parameters()]
    for b in batches:
        ref.zero_grad()
        torch.nn.functional.cross_entropy(ref(b["x"]), b["y"]).backward()
        with torch.no_grad():
            for p, a in zip(ref.parameters(), anchor, strict=True):
                p.add_(p.grad + mu * (p - a), alpha=-lr)
    for got, want in zip(params.values(), ref.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), atol=1e-12, rtol=0)


def test_fedlaw_rows_override_only_fedprox_optimiser_and_feddyn_variant(make_spec) -> None:
    assert "fedlaw_table3_fmnist_mlp" in LAW_PRESETS
    for preset in LAW_PRESETS:
        prox = make_spec(f"experiment={preset}", *row("FedProx"))
        avg = make_spec(f"experiment={preset}", *row("FedAvg"))
        assert (prox.fl.momentum, prox.fl.weight_decay, prox.algorithm.params.mu) == (0.0, 0.0, 1e-3)
        assert avg.fl.momentum == 0.9 and avg.fl.weight_decay > 0 and prox.fl.lr == avg.fl.lr
        dyn = make_spec(f"experiment={preset}", *row("FedDyn"))
        assert (dyn.algorithm.params.variant, dyn.algorithm.params.alpha) == ("law", 0.01)


@pytest.mark.parametrize("label", ["FedDF", "FedBE", "Server-FT"])
def test_fedlaw_proxy_rows_step_the_codes_central_sgd(make_spec, label: str) -> None:
    # server_funct.py feddf / fedbe / server_finetune step central_node.optimizer: SGD at the clients' initial lr
    # and weight decay (CIFAR-100: 0.01 / 5e-5), not the paper's Adam 0.005 of FedLAW's own weights
    seen = set()
    for preset in LAW_PRESETS:
        spec = make_spec(f"experiment={preset}", *row(label))
        hp = spec.algorithm.params
        assert (hp.optimizer, hp.server_lr, hp.server_weight_decay) == ("sgd", spec.fl.lr, spec.fl.weight_decay)
        seen.add((spec.fl.lr, spec.fl.weight_decay))
    assert {(0.08, 5e-4), (0.01, 5e-5)} <= seen
