"""MimeLite (Karimireddy et al. 2021, "Mime"): server momentum applied, frozen, inside local steps.

Local step w <- w - eta [(1 - beta) g_i(w) + beta m] with m downloaded and fixed during the round (Mime
Alg. 1, SGDm base). Each client also uploads its full-batch gradient at w^t, grad f_i(w^t). No extra pass
over the data: the gradient at w^t is taken on every local batch it trains on (kept in its state while it
trains, reset after) and combined by ``grad``:

- ``full`` (default, the paper's full-batch gradient): weighted by each batch's number of samples, so that
  over whole local epochs (each a permutation of the client's data) it *is* grad f_i(w^t), exactly; with
  ``fl.local_steps`` it is the sample-weighted mean over the batches drawn;
- ``minibatch``: the plain mean of the per-batch gradients (each batch alike), the approximation fedrun
  used before; it differs from ``full`` when an epoch's last batch is short (B does not divide n_i).

Server: m <- (1 - beta) sum_S p_i grad f_i(w^t) + beta m and w^{t+1} = sum_S p_i w_i. Two vectors travel
each way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range
from fedrun.config.schema import one_of
from fedrun.core.tree import Tensors, Tree, tree_map, weighted_mean, zeros_like


@dataclass
class MimeLiteParams(AlgoParams):
    """``beta``: server momentum (Mime paper: 0.9); ``grad``: full (paper) or minibatch (see the module)."""

    beta: float = 0.9  # the frozen server momentum (Mime paper: 0.9)
    # full: the paper's full-batch gradient at w^t (sample-weighted over the local batches) | minibatch: the plain
    # mean of the per-batch gradients at w^t (differs when last batches are short)
    grad: str = "full"

    def __post_init__(self) -> None:
        # the client direction (1 - beta) g + beta m, with m <- (1 - beta) g + beta m from 0: zero at beta = 1
        in_range("beta", self.beta, 0.0, 1.0, hi_open=True, why="1 keeps m at 0: the clients never move")
        one_of("grad", self.grad, ("full", "minibatch"))


@ALGORITHMS.register("mimelite", MimeLiteParams)
class MimeLite(FedAvg):
    """Frozen server momentum in the client step; clients upload (w_i, grad f_i(w^t))."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: MimeLiteParams

    def server_init(self, params: Tensors) -> Tree:
        return {"m": zeros_like(params)}

    def client_init(self, params: Tensors) -> Tree:
        return {"g0_sum": zeros_like(params), "g0_count": torch.zeros(())}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"m": server_state["m"]}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        b, fl = self.hp.beta, self.fl
        g, loss = self.local_grad(params, batch, ctx)
        g0, _ = self.local_grad(ctx.global_params, batch, ctx)
        direction = tree_map(lambda a, m: (1 - b) * a + b * m, g, ctx.extras["m"])
        params, opt = sgd_step(params, direction, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        if self.hp.grad == "full":  # n_b * (mean gradient of the batch) = the batch's summed gradient
            w = batch.get("w")
            n_b = w.sum() if w is not None else torch.tensor(float(batch["y"].shape[0]), device=batch["y"].device)
            n_b = n_b.to(ctx.state["g0_count"].dtype)
        else:
            n_b = torch.ones_like(ctx.state["g0_count"])
        state = {
            "g0_sum": tree_map(lambda s, x: s + n_b.to(x.dtype) * x, ctx.state["g0_sum"], g0),
            "g0_count": ctx.state["g0_count"] + n_b,
        }
        return params, opt, state, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        count = ctx.state["g0_count"].clamp_min(1.0)
        full_grad = tree_map(lambda s: s / count, ctx.state["g0_sum"])
        reset = {"g0_sum": zeros_like(ctx.state["g0_sum"]), "g0_count": torch.zeros_like(ctx.state["g0_count"])}
        return {"params": end, "grad": full_grad}, reset

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        b = self.hp.beta
        mean_g = weighted_mean(uploads["grad"], weights)
        m = tree_map(lambda g, m: (1 - b) * g + b * m, mean_g, server_state["m"])
        return weighted_mean(uploads["params"], weights), {**server_state, "m": m}, {}
