"""FedDyn (Acar et al. 2021): a dynamic regulariser makes the local optima consistent with the global one.

Local loss f_i(w) - <g_i, w> + (alpha/2) ||w - w^t||^2 (FedDyn Alg. 1); after training
g_i <- g_i - alpha (w_i - w^t). Server (Alg. 1, uniform weights): h <- h - (alpha/N) sum_S (w_i - w^t),
w^{t+1} = (1/|S|) sum_S w_i - h/alpha. g_i is kept per client, h on the server.

The model mean and the h update weigh the clients alike, by ``fl.weighting``: with ``uniform`` the above,
exactly; with ``size`` the same rule for the size-weighted objective sum_i (n_i/n) f_i (n: all N clients'
samples), i.e. w^{t+1} = sum_S p_i w_i - h/alpha, p_i = n_i / sum_S n_j, and h <- h - alpha sum_S (n_i/n)
(w_i - w^t), so h stays the (n_i/n)-weighted sum of every client's g_i and the fixed point is a stationary
point of that objective. (Mixing a size-weighted mean with the uniform h would be neither.)

``variant=law``: FedLAW's code (client_funct.py ``client_feddyn`` lines 126-149, server_funct.py ``feddyn``
lines 799-832) uses the unsquared (alpha/2) ||w - w^t||_2 and h <- h - alpha sum_S p_i (w_i - w^t)
(size-weighted over the cohort, no 1/N), w^{t+1} = sum_S p_i w_i - h/alpha: that corrected model is what it
broadcasts and is_eval_round (main_baselines.py line 64). Its server model is a deep copy of the first
selected client's model with the parameters overwritten (``central_node.model =
copy.deepcopy(uploaded_models[0])``), so the global BatchNorm buffers are the first client's of the cohort,
not a mean: ``law`` owns the buffers and installs ``uploads["buffers"][0]`` (at full participation
select_list is range(N): client 0). The FedDyn authors' own code (alpemreacar/FedDyn
``utils_methods.train_FedDyn``) differs again: a per-client alpha_i = alpha / (N n_i / n) and it reports the
plain mean of the cohort's models (``avg_model``) while clients start from the corrected one; it is not
available as ``variant=official`` (below).

``law`` is unstable on FedLAW's Table 3 FMNIST-MLP alpha=0.1 setting at alpha=0.01, and so is the code's own rule:
tests/algorithms/test_feddyn_law_trajectory.py pins ``law`` over whole rounds (momentum kept, weight decay, lr
decay) to that rule written with nn.Module and torch.optim.SGD. The unsquared penalty's gradient has norm alpha/2
at any distance from w^t, so only the linear term and weight decay pull a client back, and h/alpha = -(the sum of every
round's mean update) is added to each broadcast undamped (the h update's alpha cancels the 1/alpha). Issue 38:
seed 10 diverges (round 9 in fedrun's vectorised run; the rule written in plain torch, fp32, blew up at round 5,
NaN at 6, from the same partition, init and batches), and seed 9's accuracy swings by 4.3 points a round on
average through rounds 151-200 (64.7-80.7%). At seed 10 the squared penalty (``variant=paper``, which equals
``law`` but for the square at full participation with ``fl.weighting=size`` and no buffers) ran 20 rounds without
diverging (rounds 11-20: 65.9-81.1%, mean 75.5%), and ``law`` at the code's default alpha = args.mu = 1e-3 stayed
finite but oscillating (rounds 11-20: 49.0-73.1%, mean 61.8%).

``variant=official``: the FedDyn authors' code (``utils_methods.train_FedDyn`` 366-392,
``utils_general.train_feddyn_mdl`` 185-226). Client i's coefficient is alpha_i = alpha / (N n_i / n), and its
loss is f_i(w) + alpha_i <l_i, w> + (alpha_i/2) ||w - w^t||^2 (the linear term, plus SGD weight decay alpha_i
against the broadcast model), with l_i <- l_i + (w_i - w^t) its accumulated updates: Alg. 1's rule with
g_i = -alpha_i l_i and alpha_i in place of alpha. The server averages the cohort's models uniformly (np.mean),
broadcasts the "cloud" model avg + (1/N) sum_{all i} l_i and is_eval_round the plain average (``avg_model``, the
reported "sel" accuracy; :meth:`eval_params`). The code also clips gradients to norm 10: ``fl.grad_clip=10``.
The prox term reaches its SGD as ``weight_decay=alpha_i`` (plus the local wd), so what the code clips is the
gradient of f_i + alpha_i <w, l_i - w^t> alone, and alpha_i w is added after the clip (:meth:`client_step`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.algorithms.base import AlgoParams, Batch, ClientContext, RoundInfo, SetupEnv, sgd_step
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.core.tree import Tensors, Tree, dot, sq_norm, sub, tree_map, weighted_mean, zeros_like


@dataclass
class FedDynParams(AlgoParams):
    """``alpha``: regularisation strength (FedLAW used 0.01; FedDyn paper grid {0.1, 0.01, 0.001})."""

    alpha: float = 0.01  # regularisation strength (FedLAW Sec. 5: 0.01; FedDyn paper grid {0.1, 0.01, 0.001})
    # paper: Alg. 1 (mean and h follow fl.weighting) | law: FedLAW's code | official: the FedDyn authors' code
    variant: Literal["paper", "law", "official"] = "paper"

    def __post_init__(self) -> None:
        positive("alpha", self.alpha)


@ALGORITHMS.register("feddyn", FedDynParams)
class FedDyn(FedAvg):
    """Linear term -<g_i, w> plus a prox term; the server corrects the average by -h/alpha."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("alpha",)

    hp: FedDynParams

    @property
    def owns_buffers(self) -> bool:  # type: ignore[override]
        """``law``: the first selected client's BatchNorm buffers (module docstring); else the cohort's mean."""
        return self.hp.variant == "law"

    def server_init(self, params: Tensors) -> Tree:
        if self.hp.variant == "official":  # the cloud model's correction, and the average it is evaluated as
            return {"h": zeros_like(params), "avg": tree_map(lambda p: p.detach().clone(), params)}
        return {"h": zeros_like(params)}

    def eval_params(self, params: Tensors, server_state: Tree) -> Tensors:
        """``official``: the cohort's plain average (the code's ``avg_model``); else w^{t+1}, as broadcast."""
        return server_state["avg"] if self.hp.variant == "official" else params

    def client_alpha(self, ctx: ClientContext) -> float | torch.Tensor:
        """alpha, or the official code's alpha_i = alpha n / (N n_i) (n: all N clients' samples)."""
        if self.hp.variant != "official" or ctx.size is None or not getattr(self, "total_size", None):
            return self.hp.alpha
        return self.hp.alpha * self.total_size / (self.fl.clients * ctx.size)

    def client_init(self, params: Tensors) -> Tree:
        return {"grad": zeros_like(params)}

    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        loss = super().local_loss(params, batch, ctx)
        lin = dot(ctx.state["grad"], params)
        diff = sub(params, ctx.global_params)
        if self.hp.variant == "law":  # vector_norm's gradient is 0 (not NaN) at w = w^t
            dist = torch.linalg.vector_norm(torch.cat([d.reshape(-1) for d in diff.values()]))
        else:
            dist = sq_norm(diff)
        return loss - lin + 0.5 * self.client_alpha(ctx) * dist

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        """``official`` with ``fl.grad_clip``: clip grad f_i + alpha_i (l_i - w^t), then add the weight decay
        alpha_i w, as ``train_feddyn_mdl`` (clip_grad_norm_ before ``SGD(weight_decay=alpha_i + wd).step()``)."""
        fl = self.fl
        if self.hp.variant != "official" or fl.grad_clip is None:
            return super().client_step(params, opt, batch, ctx)
        grads, loss = self.local_grad(params, batch, ctx)
        a = self.client_alpha(ctx)
        clipped = {k: g - a * params[k] for k, g in grads.items()}  # the gradient of the code's loss
        total = torch.sqrt(sum(g.pow(2).sum() for g in clipped.values()))
        factor = torch.clamp(fl.grad_clip / (total + 1e-6), max=1.0)
        grads = {k: g * factor + a * params[k] for k, g in clipped.items()}
        params, opt = sgd_step(params, grads, opt, ctx.lr, fl.momentum, fl.weight_decay, None)
        return params, opt, ctx.state, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        a = self.client_alpha(ctx)
        grad = tree_map(lambda g, w, w0: g - a * (w - w0), ctx.state["grad"], end, start)
        return {"params": end}, {**ctx.state, "grad": grad}

    def setup(self, env: SetupEnv) -> None:
        super().setup(env)
        self.total_size = float(env.data.sizes.sum())

    def global_weights(self, info: RoundInfo) -> torch.Tensor:
        """The cohort's weights in the global objective: 1/N (uniform) or n_i/n over all clients (size).

        n is all N clients' samples (from the data at setup; hook-level use without it: N x the cohort's mean).
        """
        sizes = info.sizes.to(torch.float64)
        if self.fl.weighting != "size":
            return torch.full_like(sizes, 1.0 / info.n_clients)
        total = self.total_size if getattr(self, "total_size", None) else info.n_clients * float(sizes.mean())
        return sizes / total

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        a = self.hp.alpha
        if self.hp.variant == "official":  # h here is -(1/N) sum_all l_i; the cohort's l_i grew by w_i - w^t
            avg = weighted_mean(uploads["params"], torch.full_like(weights, 1.0 / len(weights)))
            moved = tree_map(lambda m, w: (m - w) * (len(weights) / self.fl.clients), avg, params)
            h = tree_map(lambda h, d: h - d, server_state["h"], moved)
            return tree_map(lambda m, hh: m - hh, avg, h), {**server_state, "h": h, "avg": avg}, {}
        if self.hp.variant == "law":
            step = tree_map(lambda d: a * d, self.mean_delta(params, uploads, weights))
            if uploads.get("buffers"):
                self.model.set_buffers({k: v[0].clone() for k, v in uploads["buffers"].items()})
        else:
            omega = self.global_weights(info).to(weights.device)  # sums to |S|/N (uniform), not to 1

            def dyn(wi: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
                o = omega.to(w.dtype).reshape((-1,) + (1,) * w.dim())
                return a * (o * (wi - w.unsqueeze(0))).sum(0)

            step = tree_map(dyn, uploads["params"], params)
        h = tree_map(lambda h, s: h - s, server_state["h"], step)
        mean_w = weighted_mean(uploads["params"], weights)
        return tree_map(lambda m, hh: m - hh / a, mean_w, h), {**server_state, "h": h}, {}
