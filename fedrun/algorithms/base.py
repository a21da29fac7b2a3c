"""The algorithm contract (docs/design.md): pure functions over parameter dicts that every engine can run.

An algorithm never sees the engine. It supplies server/client state, what is broadcast, the local
objective and step, what a client uploads, and how the server aggregates. Every hook takes and returns
tensor dicts, so the sequential engine can loop over clients and the vectorised engine can ``vmap`` the
same client step over a stacked cohort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from fedrun.config.schema import FLConfig
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree, nbytes, tree_map, weighted_mean
from fedrun.data.federated import FederatedData
from fedrun.data.proxy import ProxySet
from fedrun.models.base import FunctionalModel

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class SetupEnv:
    """The run's resources, handed to :meth:`Algorithm.setup` once before the first round."""

    device: torch.device
    seed: int
    data: FederatedData  # the clients' data (sizes, batches) and the test split
    proxy: ProxySet | None = None  # the server's proxy set (proxy.per_class > 0), for server-side methods
    dataset: str = ""  # the data source's registry name (FedLAW's lr_s is chosen by it)


@dataclass
class AlgoParams:
    """Hyperparameters shared by every method (``algorithm.*``); methods subclass this."""


class ClientContext(NamedTuple):
    """What a client sees while training: all tensors or tensor dicts, so it stacks for ``vmap``.

    ``global_params`` is w^t as broadcast, ``extras`` what :meth:`Algorithm.broadcast` sent with it,
    ``state`` this client's persistent state, ``lr`` this round's local learning rate, ``size`` n_i, the
    number of the client's training samples (a 0-d float tensor; every engine sets it, so a method can tell
    where its local epochs end: every ceil(n_i / B) steps; None only in hook-level tests).
    """

    global_params: Tensors
    extras: Tree
    state: Tree
    lr: float | torch.Tensor
    size: torch.Tensor | None = None


class RoundInfo(NamedTuple):
    """What the server knows when aggregating round ``round``.

    ``clients`` are the cohort's ids, ``sizes`` their training-set sizes, ``steps`` the local steps each
    took (all shape [m]); ``n_clients`` is N, the number of all clients.
    """

    round: int
    n_clients: int
    clients: torch.Tensor
    sizes: torch.Tensor
    steps: torch.Tensor
    lr: float


def sgd_step(
    params: Tensors,
    grads: Tensors,
    buf: Tensors | None,
    lr: float | torch.Tensor,
    momentum: float,
    weight_decay: float,
    grad_clip: float | None,
) -> tuple[Tensors, Tensors | None]:
    """One step of torch.optim.SGD semantics, functionally: clip(g), g += wd*w, b = mu*b + g, w -= lr*b.

    The clip rescales the whole gradient to global norm <= ``grad_clip`` (as ``clip_grad_norm_`` before
    ``optimizer.step()``); a zero-initialised buffer reproduces SGD's first-step ``b = g``.
    """
    if grad_clip is not None:
        total = torch.sqrt(torch.stack([g.pow(2).sum() for g in grads.values()]).sum())
        factor = torch.clamp(grad_clip / (total + 1e-6), max=1.0)
        grads = {k: g * factor for k, g in grads.items()}
    if weight_decay:
        grads = {k: torch.add(g, params[k], alpha=weight_decay) for k, g in grads.items()}
    if momentum and buf is not None:
        buf = {k: momentum * buf[k] + g for k, g in grads.items()}
        grads = buf
    if isinstance(lr, torch.Tensor):  # a compiled step, or a stack of jobs with their own lr, takes lr as a tensor:
        # w + g (-lr) in one fused multiply-add, the same rounding as the number's torch.add(w, g, alpha=-lr) below
        return {k: torch.addcmul(params[k], grads[k], -lr) for k in params}, buf
    # one fused kernel and no lr * g temporary (torch.optim.SGD's own form)
    return {k: torch.add(params[k], grads[k], alpha=-lr) for k in params}, buf


class Algorithm:
    """FedAvg (McMahan et al. 2017), and the base every method overrides.

    Clients minimise their empirical loss with local SGD from w^t; the server sets
    w^{t+1} = sum_{i in S} p_i w_i with p_i from ``fl.weighting`` (size: n_i / sum_S n_j, or uniform 1/m).
    """

    Params: type[AlgoParams] = AlgoParams
    # True when the method produces the global model's buffers (BatchNorm running statistics) itself, in
    # :meth:`aggregate` (``self.model.set_buffers``): the runner then leaves them as the method set them.
    # False (FedAvg and every client-side method): the runner installs :func:`average_buffers` of the
    # cohort's uploaded statistics, weighted like the parameters.
    owns_buffers: bool = False
    # True when every client holds a model of its own (its personal parts live in its client state): the
    # per-client evaluation (eval.local_test) then evaluates :meth:`personal_model`, not the global model
    personal: bool = False
    # (k, lr): the k SGD steps of size lr on a client's own data that make its personalised model at evaluation
    # (Per-FedAvg: one step of alpha); eval.finetune_steps, when set, overrides it. (0, None): none
    adaptation: tuple[int, float | None] = (0, None)
    # entries added to every training batch, (rnd, clients, step) -> {name: tensor}, drawn by the engines' batch
    # builder so that every engine's batch carries the same draws: a method whose step needs per-step random inputs
    # declares it (DP-SGD's form of a method carries its noise: fedrun/privacy/mechanisms/sample.py); None: none
    batch_extras: Callable[[int, torch.Tensor, int], dict[str, torch.Tensor]] | None = None
    # the method uploads its model alone and steps the server from the weighted mean of the uploads, which a
    # capability may replace: client-level DP-FedAvg's clipped noisy sum (McMahan et al. 2018; FedOpt: Reddi et al.
    # 2021 sec. 5), a robust aggregate. Declared by each such method in its own class body, not inherited
    # (:meth:`declares`): a subclass that changes the upload or the server step must not pass unseen
    steps_from_mean: bool = False
    # True when the method's authors report each client's best local model so far as judged on its local *test*
    # split (LG-FedAvg's main_lg.py): the per-client evaluation then adds local_best_acc_* (selection on test data)
    select_on_test: bool = False
    # the method's client step may train stacked with other jobs of a sweep (fedrun/engines/stacked.py: one vmap over
    # the jobs' cohorts with one job's method object): whatever differs between the jobs reaches the step through its
    # arguments or the ``hp`` fields named in ``stack_scalars``, never through state the method keeps on itself.
    # Declared in the method's own class body (:meth:`declares`) once tests/engines/test_stacked.py checks it
    stacks: bool = False
    # ``hp`` fields that may differ between stacked jobs (FedProx's mu): each row of the stacked step sees its own
    # job's value, as a tensor; every other field must be equal across the stack
    stack_scalars: tuple[str, ...] = ()

    def __init__(self, hp: AlgoParams, fl: FLConfig, model: FunctionalModel) -> None:
        self.hp = hp
        self.fl = fl
        self.model = model
        self.env: SetupEnv | None = None

    @classmethod
    def declares(cls, flag: str) -> bool:
        """Whether this method's own class body sets the class flag ``flag`` true (inherited values do not count)."""
        return bool(cls.__dict__.get(flag, False))

    # ---- set-up ----------------------------------------------------------------------------------------
    def setup(self, env: SetupEnv) -> None:
        """Receive the run's resources (device, seed, data, the proxy set for server-side methods)."""
        self.env = env

    @property
    def seed(self) -> int:
        """The run's seed; 0 before :meth:`setup` (a method exercised on its own, as in its unit tests)."""
        return self.env.seed if self.env is not None else 0

    @property
    def setup_env(self) -> SetupEnv:
        """The environment :meth:`setup` received; a RuntimeError before it."""
        if self.env is None:
            raise RuntimeError(f"{type(self).__name__}.setup(env) must run first")
        return self.env

    def server_init(self, params: Tensors) -> Tree:
        """Server state kept across rounds (momentum, control variate...). FedAvg keeps none."""
        return {}

    def client_init(self, params: Tensors) -> Tree:
        """Template of one client's persistent state (e.g. c_i); the runner keeps one per client."""
        return {}

    def client_rows(self, rows: Tree) -> Tree:
        """Every client's initial state, stacked [N] (``client_init``'s template repeated), for a method whose
        clients start from different states (FedRoD's class counts, known after :meth:`setup`); as given."""
        return rows

    def local_lr(self, rnd: int, lr: float) -> float:
        """This round's local learning rate given the configured schedule's ``lr`` (IMA decays it further)."""
        return lr

    def round_fl(self, rnd: int) -> FLConfig:
        """The FL settings every engine trains round ``rnd`` with (IMA's ``ed`` lowers ``local_epochs``).

        A pure function of the round, never a mutation of ``self.fl``: engines that hold their own copy of
        the algorithm (Ray actors) compute the same settings as the driver, and a resumed round gets them too.
        """
        return self.fl

    # ---- server -> client ------------------------------------------------------------------------------
    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        """Extra tensors sent with w^t (they count in the download bytes)."""
        return {}

    # ---- client ----------------------------------------------------------------------------------------
    def local_loss(self, params: Tensors, batch: Batch, ctx: ClientContext) -> torch.Tensor:
        """The client objective on one batch: mean cross-entropy for FedAvg."""
        return self.model.loss(params, batch)

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        """(gradient of the local objective, loss): overridden by SAM-style and control-variate methods."""
        return autodiff.grad_and_value(self.local_loss)(params, batch, ctx)

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        """One local step: returns (params, optimizer buffer, client state, loss)."""
        grads, loss = self.local_grad(params, batch, ctx)
        fl = self.fl
        params, opt = sgd_step(params, grads, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        return params, opt, ctx.state, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """After local training: (what the client uploads, its new persistent state)."""
        return {"params": end}, ctx.state

    # ---- server ----------------------------------------------------------------------------------------
    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        """Combine the cohort's uploads (stacked, leading dim m) into w^{t+1}; returns diagnostics too."""
        return weighted_mean(uploads["params"], weights), server_state, {}

    def eval_params(self, params: Tensors, server_state: Tree) -> Tensors:
        """The model the run evaluates after aggregation: w^{t+1}, the one broadcast, for all but a few methods
        whose code reports another (FedDyn ``variant=official``: the cohort's plain average)."""
        return params

    # ---- personalised evaluation and traffic (docs/personalised.md) --------------------------------------
    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        """The parameters client i is evaluated with on its local test split, given the global model and its
        persistent state (one client's row; vmapped over the clients): the global model for FedAvg."""
        return params

    def own_logits(self, own: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        """The logits of a client's own model ``own`` (what :meth:`personal_model` returned) on inputs ``x``: the
        model's forward pass, for every method but an output mixture (APFL ``form=code``)."""
        return self.model.logits(own, x, buffers)

    def own_loss(self, own: Tensors, batch: Batch) -> torch.Tensor:
        """The loss of a client's own model (fine-tuning it at evaluation): the model's cross-entropy, or that of
        :meth:`own_logits` where a method overrides it."""
        return self.model.loss(own, batch)

    def personal_keys(self) -> list[str] | None:
        """The parameters in which :meth:`personal_model` may differ from the global model (FedPer: the head);
        None: any of them. Lets the evaluation share the rest between clients (metrics/head_eval.py)."""
        return None

    def personal_buffers(self, client_state: Tree) -> Tensors:
        """Buffers (BatchNorm statistics) of client i's own model that replace the global ones (FedBN); none."""
        return {}

    def broadcast_bytes(self, params: Tensors, extras: Tree) -> int:
        """Bytes one client downloads: w^t and the extras (a method that keeps parts local sends less)."""
        return nbytes(params) + nbytes(extras)

    # ---- helpers ---------------------------------------------------------------------------------------
    @staticmethod
    def mean_delta(params: Tensors, uploads: Tree, weights: torch.Tensor) -> Tensors:
        """Weighted mean client update sum_i p_i (w_i - w^t)."""
        avg = weighted_mean(uploads["params"], weights)
        return tree_map(lambda a, w: a - w, avg, params)


def average_buffers(stacked: Tensors, weights: torch.Tensor) -> Tensors:
    """The cohort's buffers combined like a state-dict FedAvg: float statistics (BatchNorm running mean and
    variance) weighted like the parameters; integer counters take the cohort's maximum."""
    return {
        k: weighted_mean({k: v}, weights)[k] if v.is_floating_point() else v.max(0).values for k, v in stacked.items()
    }
