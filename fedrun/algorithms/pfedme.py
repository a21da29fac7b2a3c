"""pFedMe (Dinh et al. NeurIPS 2020): personalised models as Moreau envelopes of the clients' losses.

Each local step takes a minibatch D and approximately solves the personal problem
theta_i = argmin_theta f_i(theta; D) + (lambda/2) ||theta - w_i||^2 with ``inner_steps`` (K) gradient steps of lr
``personal_lr`` started from the last theta_i (Algorithm 1, line 7; the code's ``pFedMeOptimizer``), then moves
the local model towards it, w_i <- w_i - eta lambda (w_i - theta_i) (line 8). Every round's theta_i starts from
w^t, as the code's ``set_parameters`` does. The server mixes, w <- (1 - beta) w^t + beta mean_S w_i (line 11).
theta_i is the client's personalised model.

Checked against the authors' code (``FLAlgorithms/optimizers/fedoptimizer.py`` and ``users/userpFedMe.py`` of
CharlieDinh/pFedMe, as stored copies of it show): lambda 15, K 5, personal lr 0.09, beta 1 are its main.py
defaults (with lr 0.005, batch 20, 20 local steps a round: ``fl.local_steps=20``); its personal step adds
``mu * theta`` with mu = 0.001 (``pFedMeOptimizer``'s default), absent from the paper's Algorithm 1, so it is an
option here (``mu``, default 0: the paper).

What the authors' code scores as the personalised model is not theta_i: ``pFedMeOptimizer.step`` returns its own
``param_groups[0]['params']``, the client model's Parameter objects, and ``UserpFedMe.train`` keeps that list as
``persionalized_model_bar``; its last line, ``update_parameters(self.local_model)``, then writes w_i into those same
Parameters, so ``test_persionalized_model`` evaluates w_i, the local model at the end of the client's local
round (a shared reference, ``users/userbase.py``). ``score=code`` evaluates that (each client keeps its last
w_i); the default ``score=theta`` is the paper's theta_i. Measured with the authors' code, the two differ by at
most 0.04 points on the best round (fedrun issue 50).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import one_of
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree, weighted_mean


@dataclass
class PFedMeParams(AlgoParams):
    """lambda, K, the personal lr and beta of Algorithm 1 (the code's defaults: 15, 5, 0.09, 1); the code's mu."""

    lam: float = 15.0  # lambda, the pull of theta_i to w_i (pFedMe code default --lamda 15)
    inner_steps: int = 5  # K, gradient steps on the personal problem per local step (code default --K 5)
    personal_lr: float = 0.09  # the lr of those steps (code default --personal_learning_rate 0.09)
    beta: float = 1.0  # server mixing, w <- (1 - beta) w^t + beta mean w_i (code default --beta 1.0)
    mu: float = 0.0  # + mu theta in each personal step: the code's pFedMeOptimizer (mu 0.001); the paper has none
    score: str = "theta"  # the model scored as personalised: theta (the paper) | code (w_i, the authors' code)

    def __post_init__(self) -> None:
        one_of("score", self.score, ("theta", "code"))
        positive("lam", self.lam)
        positive("inner_steps", self.inner_steps)
        positive("personal_lr", self.personal_lr)
        positive("beta", self.beta)
        positive("mu", self.mu, allow_zero=True)


@ALGORITHMS.register("pfedme", PFedMeParams)
class PFedMe(FedAvg):
    """Clients: K prox steps on theta_i, then w_i <- w_i - eta lambda (w_i - theta_i); server: beta-mix."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: PFedMeParams
    personal = True

    def client_init(self, params: Tensors) -> Tree:
        first = next(iter(params.values()))
        theta = {k: t.detach().clone() for k, t in params.items()}
        state = {"theta": theta, "fresh": torch.ones((), dtype=first.dtype, device=first.device)}
        if self.hp.score == "code":  # w_i at the end of the client's last local round
            state["w"] = {k: t.detach().clone() for k, t in params.items()}
        return state

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        fresh, hp = ctx.state["fresh"] > 0, self.hp
        theta = {k: torch.where(fresh, ctx.global_params[k], t) for k, t in ctx.state["theta"].items()}
        grad = autodiff.grad_and_value(self.model.loss)
        loss = torch.zeros(())
        for _ in range(hp.inner_steps):
            g, loss = grad(theta, batch)
            theta = {k: t - hp.personal_lr * (g[k] + hp.lam * (t - params[k]) + hp.mu * t) for k, t in theta.items()}
        w = {k: p - ctx.lr * hp.lam * (p - theta[k]) for k, p in params.items()}
        return w, opt, {**ctx.state, "theta": theta, "fresh": torch.zeros_like(ctx.state["fresh"])}, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        state = {**ctx.state, "fresh": torch.ones_like(ctx.state["fresh"])}
        if self.hp.score == "code":
            state["w"] = dict(end)
        return {"params": end}, state

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        mean, b = weighted_mean(uploads["params"], weights), self.hp.beta
        return {k: (1 - b) * params[k] + b * mean[k] for k in params}, server_state, {}

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        """theta_i (the paper), or w_i as the authors' code scores it (``score=code``)."""
        return dict(client_state["w" if self.hp.score == "code" else "theta"])
