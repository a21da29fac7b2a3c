"""FedDyn ``variant=law`` over whole rounds against FedLAW's rule written with nn.Module and torch.optim.SGD.

The reference follows the FedLAW code's facts (client_funct.py ``client_feddyn`` and ``Client_update``,
server_funct.py ``feddyn``, nodes.py, utils.py ``init_optimizer``/``lr_scheduler``): each client keeps its own
``torch.optim.SGD(lr, momentum, weight_decay)`` across rounds, minimises CE + (alpha/2)||w - w^t||_2 - <w, g_i>
(unsquared norm, one flat vector), then g_i <- g_i - alpha (w_i - w^t); the server's state h <- h - alpha
sum_S p_i (w_i - w^t) and w^{t+1} = sum_S p_i w_i - h/alpha, p_i = n_i / sum_S n_j. Only the data (partition,
batch order) is fedrun's: the rule under test is written here without fedrun's hooks, tree helpers or sgd_step.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from client_methods_util import SMALL, train

from fedrun.data.federated import batch_plan
from fedrun.run.experiment import build_experiment

ALPHA, LR, DECAY, MOMENTUM, WD, ROUNDS = 0.05, 0.05, 0.9, 0.9, 5e-4, 3
LAW = (
    *SMALL,
    "algorithm=feddyn",
    f"algorithm.alpha={ALPHA}",
    "algorithm.variant=law",
    "hardware.precision=fp64",
    f"fl.rounds={ROUNDS}",
    f"fl.lr={LR}",
    f"fl.lr_decay={DECAY}",
    f"fl.momentum={MOMENTUM}",
    f"fl.weight_decay={WD}",
    "fl.keep_momentum=true",
    "fl.weighting=size",
)


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.view(-1) for p in net.parameters()])


def _law_reference(spec) -> list[torch.Tensor]:  # noqa: ANN001
    """FedLAW's FedDyn for ROUNDS rounds from fedrun's initial model: the flat w^{t+1} after each round."""
    exp = build_experiment(spec)
    fed, fl, n = exp.fed, spec.fl, spec.fl.clients
    central = copy.deepcopy(exp.model.module)
    nets = [copy.deepcopy(central) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD) for m in nets]
    old_grad = [torch.zeros_like(_flat(central)) for _ in range(n)]
    h = torch.zeros_like(_flat(central))
    p = fed.sizes.to(torch.float64) / fed.sizes.sum()
    out = []
    for rnd in range(ROUNDS):
        w_t = _flat(central).detach().clone()
        for i in range(n):
            nets[i].load_state_dict(central.state_dict())
            opts[i].param_groups[0]["lr"] = LR * DECAY**rnd
            for t, idx in enumerate(batch_plan(fed.clients[i], fl, spec.seed, rnd, i)):
                batch = fed.train_batch(idx, rnd, i, t)
                opts[i].zero_grad()
                v = _flat(nets[i])
                loss = F.cross_entropy(nets[i](batch["x"]), batch["y"])
                loss = loss + ALPHA / 2 * torch.norm(v - w_t, 2) - torch.dot(v, old_grad[i])
                loss.backward()
                opts[i].step()
            old_grad[i] = old_grad[i] - ALPHA * (_flat(nets[i]).detach() - w_t)
        ends = torch.stack([_flat(m).detach() for m in nets])
        h = h - ALPHA * (p[:, None] * (ends - w_t)).sum(0)
        new = (p[:, None] * ends).sum(0) - h / ALPHA
        torch.nn.utils.vector_to_parameters(new, central.parameters())
        out.append(new)
    return out


def test_law_variant_follows_fedlaws_code_over_rounds(make_spec) -> None:
    """Three rounds at full participation with momentum kept across rounds, weight decay and lr decay: the
    global model fedrun's law variant broadcasts equals the reference's after every round (float64)."""
    spec = make_spec(*LAW)
    _, _, log = train(spec)
    want = _law_reference(spec)
    for rnd in range(1, ROUNDS):  # round r's start is w^r, the model the server broadcast after round r - 1
        got = torch.cat([v.reshape(-1) for v in log[rnd]["start"].values()])
        torch.testing.assert_close(got, want[rnd - 1], atol=1e-10, rtol=0)
    assert float((want[-1] - want[0]).norm()) > 1e-3  # the rounds moved the model: the comparison is not vacuous
