"""Centered clipping (Karimireddy, He and Jaggi 2021, "Learning from history for Byzantine robust optimization",
ICML, eq. (2)): from a centre v_0, L steps of

    v_{l+1} = v_l + (1/n) sum_i (x_i - v_l) min(1, tau / ||x_i - v_l||),

each upload's pull on the centre clipped to radius tau. The centre is the previous round's aggregate (the
paper's momentum; :attr:`ServerView.previous`, zeros in the first round): the rule is ``stateful``, the caller
keeps the last aggregate and checkpoints it. Defaults tau = 100 and L = 1: the authors' CIFAR-10 runs
(epfml/byzantine-robust-optimizer, ``momentum-robustness/cifar10-all.py``: ``Clipping(tau=100, n_iter=1)``).
Unweighted (the paper's 1/n), as ByzFL's ``CenteredClipping``. Each step is one pass over the [m, d] uploads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView


@dataclass
class CenteredClippingParams:
    """``tau``: the clipping radius; ``clip_iterations``: the clipping steps L."""

    tau: float = 100.0  # clipping radius (the authors' CIFAR-10 runs: Clipping(tau=100, n_iter=1))
    clip_iterations: int = 1  # L (the authors' runs: 1)

    def __post_init__(self) -> None:
        positive("tau", self.tau)
        positive("clip_iterations", self.clip_iterations)


def centered_clipping(x: torch.Tensor, centre: torch.Tensor, tau: float, iterations: int) -> torch.Tensor:
    """L steps of centered clipping of the rows of ``x`` [m, d] from ``centre`` [d]."""
    v = centre
    for _ in range(iterations):  # clipping steps, each one pass over the uploads
        diff = x - v
        scale = (tau / diff.norm(dim=1).clamp_min(torch.finfo(x.dtype).tiny)).clamp(max=1.0)
        v = v + (scale @ diff) / x.shape[0]
    return v


@DEFENCES.register("centered_clipping", CenteredClippingParams)
class CenteredClipping(Defence):
    name = "centered_clipping"
    stateful = True
    hp: CenteredClippingParams

    def min_uploads(self, f: int) -> int:
        return 2 * f + 1  # a minority of Byzantine uploads (the paper's guarantee needs a small fraction)

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        centre = view.previous.to(x.dtype) if view.previous is not None else torch.zeros_like(x[0])
        return Aggregate(centered_clipping(x, centre, self.hp.tau, self.hp.clip_iterations))
