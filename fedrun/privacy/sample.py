"""Sample-level differential privacy: DP-SGD inside each client (Abadi et al. 2016, "Deep learning with differential
privacy", Alg. 1), with Opacus' arithmetic (``GradSampleModule`` + ``DPOptimizer``):

    g = (sum_{j in B} g_j min(1, C / ||g_j||) + N(0, z^2 C^2 I)) / |B|

the clipped sum formed by book-keeping on the ghost norm (fedrun/privacy/ghost.py; Bu et al. 2023, Li et al. 2022)
for a model that is a chain of Linear/Conv2d layers trained on the plain cross-entropy, or else from per-sample
gradients g_j of ``torch.func`` (``vmap(grad)``); either way the step runs inside the vectorised engine's ``vmap``
over the cohort as it does in the sequential loop. The noise of client i's step t of round r is drawn
on CPU (float32) from the generator keyed by (seed, "dp-sgd", r, i, t) and travels in the batch
(:class:`NoiseForBatches`, the method's ``batch_extras``): every engine, and a resumed run, adds the same noise.

The budget is per client, over the samples of its own data: each step is accounted as a Poisson-subsampled
Gaussian at q_i = B / n_i (fedrun's batches are a shuffled epoch's slices: fixed-size, accounted as Poisson, as
Opacus' and TF-Privacy's examples do; docs/privacy.md), composed over every step client i has taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad_and_value, vmap

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import FLConfig
from fedrun.core.rng import torch_gen
from fedrun.core.tree import Tensors
from fedrun.data.federated import num_local_steps
from fedrun.models.base import FunctionalModel
from fedrun.privacy.accounting import epsilon
from fedrun.privacy.ghost import LayerChain, layer_chain
from fedrun.privacy.settings import PrivacySettings

NOISE_KEY = "dp_noise"  # the batch entry holding the step's noise, [d] (one client) or [k, d] (k clients)
Loss = Callable[..., torch.Tensor]


def per_sample_grads(
    loss: Loss, params: Tensors, batch: dict[str, torch.Tensor], ctx: object
) -> tuple[Tensors, torch.Tensor]:
    """(g_j for every sample j of ``batch``, [B, ...] per parameter; the B losses): ``loss`` on each one-sample
    batch, ``vmap(grad_and_value)``."""

    def one(p: Tensors, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss(p, {"x": x[None], "y": y[None]}, ctx)

    out: tuple[Tensors, torch.Tensor] = vmap(grad_and_value(one), in_dims=(None, 0, 0))(params, batch["x"], batch["y"])
    return out


def clip_and_sum(grads: Tensors, clip: float, weight: torch.Tensor | None = None) -> Tensors:
    """sum_j g_j min(1, C / ||g_j||) (Opacus' factor C / (||g_j|| + 1e-6), at most 1); ``weight`` (0 or 1 per
    sample: the vectorised engine's padding) leaves padded samples out."""
    b = next(iter(grads.values())).shape[0]
    norms = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.reshape(b, -1), dim=1) for g in grads.values()]), dim=0
    )
    factor = torch.clamp(clip / (norms + 1e-6), max=1.0)
    if weight is not None:
        factor = factor * weight.to(factor.dtype)
    return {k: torch.tensordot(factor, g, dims=1) for k, g in grads.items()}


def add_noise(total: Tensors, noise: torch.Tensor, batch_size: torch.Tensor | float) -> Tensors:
    """(sum + noise) / |B|, the flat ``noise`` [d] laid over the parameters in sorted key order."""
    out, at = {}, 0
    for k in sorted(total):
        n = total[k].numel()
        out[k] = (total[k] + noise[at : at + n].reshape(total[k].shape)) / batch_size
        at += n
    return out


@dataclass
class DPSGD:
    """The DP-SGD gradient that replaces a method's :meth:`Algorithm.local_grad` (fedrun/privacy/mechanisms/sample.py).

    ``chain`` (:func:`dp_sgd_for`): the book-keeping path of fedrun/privacy/ghost.py, which forms the clipped sum
    without one gradient per sample; without it (or for an input shape it does not support), ``vmap(grad)``. The
    chain computes the model's plain cross-entropy itself, in place of ``loss``: :func:`dp_sgd_for` sets it only
    where ``loss`` is exactly that."""

    clip: float
    chain: LayerChain | None = None

    def __call__(
        self, loss: Loss, params: Tensors, batch: dict[str, torch.Tensor], ctx: object
    ) -> tuple[Tensors, torch.Tensor]:
        weight = batch.get("w")
        fast = self.chain.clipped_sum(params, batch, self.clip, weight) if self.chain is not None else None
        if fast is not None:
            total, losses = fast
        else:
            grads, losses = per_sample_grads(loss, params, batch, ctx)
            total = clip_and_sum(grads, self.clip, weight)
        size = weight.sum() if weight is not None else float(batch["y"].shape[0])
        value = (losses * weight).sum() / size if weight is not None else losses.mean()
        return add_noise(total, batch[NOISE_KEY], size), value.detach()


def dp_sgd_for(algorithm: Algorithm, clip: float) -> DPSGD:
    """``algorithm``'s DP-SGD step: book-keeping (fedrun/privacy/ghost.py) when its local objective is the model's
    plain cross-entropy (``Algorithm.local_loss`` not overridden: a proximal or contrastive term would enter every
    sample's gradient) and the model a chain of supported layers; ``vmap(grad)`` per-sample gradients otherwise."""
    model = algorithm.model
    plain = type(algorithm).local_loss is Algorithm.local_loss and all(
        getattr(type(model), f) is getattr(FunctionalModel, f) for f in ("loss", "logits")
    )
    chain = layer_chain(model.module, model.init_params()) if plain else None
    return DPSGD(clip, chain)


@dataclass
class NoiseForBatches:
    """A DP-SGD method's batch extras (:attr:`Algorithm.batch_extras`): N(0, (z C)^2 I_d) of client ``cid``'s step
    ``t`` of round ``rnd``; ``std`` reads z C when drawn (z is the run's state, restored by a resume)."""

    dim: int
    std: float | Callable[[], float]
    seed: int
    dtype: torch.dtype
    device: torch.device

    def draw(self, rnd: int, cid: int, step: int) -> torch.Tensor:
        # float32 on CPU (a step's noise is as large as the model, drawn every step): the same bits on every device
        g = torch_gen(self.seed, "dp-sgd", rnd, cid, step)
        std = self.std() if callable(self.std) else self.std
        return torch.randn(self.dim, generator=g, dtype=torch.float32).mul_(std)

    def __call__(self, rnd: int, clients: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        ids = clients.reshape(-1).tolist()
        noise = torch.stack([self.draw(rnd, int(c), step) for c in ids]).reshape(*clients.shape, self.dim)
        return {NOISE_KEY: noise.to(self.dtype).to(self.device)}


@dataclass
class SampleDP:
    """Sample-level DP's accounting: each client's budget at q_i = B / n_i over the local steps it took, at the
    run's noise multiplier z (fedrun/privacy/mechanisms/sample.py keeps z as the run's state)."""

    config: PrivacySettings
    fl: FLConfig
    sizes: np.ndarray  # n_i
    z: float

    @staticmethod
    def worst_case(fl: FLConfig, sizes: np.ndarray) -> tuple[float, int]:
        """(q, steps) of the client that spends the most: the smallest (largest q = B/n), taking part in every round
        (the budget ``target_epsilon`` is solved for)."""
        n = int(sizes.min())
        return min(fl.batch_size / n, 1.0), fl.rounds * num_local_steps(n, fl)

    def epsilon(self, steps: np.ndarray) -> float:
        """The largest budget over the clients, each at q_i = B / n_i after ``steps[i]`` steps (dp-accounting)."""
        c = self.config
        return max(
            (
                epsilon(min(self.fl.batch_size / int(n), 1.0), self.z, int(s), c.delta, c.accountant)
                for n, s in zip(self.sizes, steps, strict=True)
            ),
            default=0.0,
        )
