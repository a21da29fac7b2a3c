"""Loss-landscape geometry over parameter dicts: lines, planes through three models, random directions.

- 1-D: theta(a) = (1 - a) w_A + a w_B (Goodfellow et al. 2015; FedIMA Sec. 3.2 "1D visualization").
- 2-D through three models (Garipov et al. 2018, as FedIMA Fig. 1 / Sec. 3.2 draws it): u = w_2 - w_1,
  v = (w_3 - w_1) minus its projection on u, both normalised; the point (x, y) is w_1 + x u_hat + y v_hat,
  so the anchors sit at (0, 0), (||u||, 0) and (<w_3 - w_1, u_hat>, ||v||).
- 2-D around one model along two random filter-normalised directions (Li et al. 2018, "Visualizing the
  loss landscape of neural nets"; FedGAM Fig. 4, FedSAM Fig. 3): d ~ N(0, I) per tensor, each filter d_f
  (a slice along the output dimension of a weight with >= 2 dims) rescaled to ||theta_f||; biases and
  normalisation parameters (<= 1 dim) are zeroed, Li et al.'s ``ignore=biasbn`` default.

Every scan takes an ``evaluate(params) -> (loss, error)`` callable, so it runs on any model and data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fedrun.core.tree import Tensors, add, dot, norm, scale, sub

Evaluate = Callable[[Tensors], tuple[float, float]]


def lerp(a: Tensors, b: Tensors, t: float) -> Tensors:
    """(1 - t) a + t b."""
    return {k: torch.lerp(a[k], b[k], t) for k in a}


def line_scan(a: Tensors, b: Tensors, alphas: Sequence[float], evaluate: Evaluate) -> dict[str, np.ndarray]:
    """Loss and error at (1 - alpha) a + alpha b for each alpha."""
    out = np.array([evaluate(lerp(a, b, float(t))) for t in alphas], dtype=np.float64).reshape(-1, 2)
    return {"alpha": np.asarray(alphas, dtype=np.float64), "loss": out[:, 0], "error": out[:, 1]}


@dataclass
class Plane:
    """A 2-D affine slice of parameter space: origin + x * u + y * v (u, v orthonormal unless random)."""

    origin: Tensors
    u: Tensors
    v: Tensors
    anchors: np.ndarray  # [k, 2] coordinates of the models that define the plane

    def point(self, x: float, y: float) -> Tensors:
        return add(add(self.origin, self.u, x), self.v, y)


def plane_through(w1: Tensors, w2: Tensors, w3: Tensors) -> Plane:
    """The plane through three models (Gram-Schmidt on w2 - w1 and w3 - w1); raises if they are collinear."""
    u = sub(w2, w1)
    u_len = float(norm(u))
    if u_len == 0:
        raise ValueError("plane_through: the first two models are identical")
    u_hat = scale(u, 1 / u_len)
    w = sub(w3, w1)
    x3 = float(dot(w, u_hat))
    v = add(w, u_hat, -x3)
    v_len = float(norm(v))
    if v_len <= 1e-12 * max(u_len, 1.0):
        raise ValueError("plane_through: the three models are collinear")
    anchors = np.array([[0.0, 0.0], [u_len, 0.0], [x3, v_len]])
    return Plane(w1, u_hat, scale(v, 1 / v_len), anchors)


def filter_normalised_direction(params: Tensors, gen: torch.Generator, ignore_1d: bool = True) -> Tensors:
    """A Gaussian direction with each filter rescaled to the norm of the same filter of ``params`` (Li et al.)."""
    out = {}
    for k, w in params.items():
        d = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype).to(w.device)
        if w.dim() <= 1:
            out[k] = torch.zeros_like(w) if ignore_1d else d * (w.norm() / d.norm().clamp_min(1e-12))
            continue
        dims = tuple(range(1, w.dim()))
        vn = torch.linalg.vector_norm
        out[k] = d * (vn(w, dim=dims, keepdim=True) / vn(d, dim=dims, keepdim=True).clamp_min(1e-12))
    return out


def random_plane(params: Tensors, seed: int = 0, ignore_1d: bool = True) -> Plane:
    """The plane around ``params`` spanned by two independent filter-normalised directions (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    d1 = filter_normalised_direction(params, gen, ignore_1d)
    d2 = filter_normalised_direction(params, gen, ignore_1d)
    return Plane(params, d1, d2, np.zeros((1, 2)))


def grid_scan(
    plane: Plane, xs: Sequence[float] | np.ndarray, ys: Sequence[float] | np.ndarray, evaluate: Evaluate
) -> dict[str, np.ndarray]:
    """Loss and error on the grid ``xs`` x ``ys`` of ``plane``: arrays [len(ys), len(xs)] (row = y)."""
    loss = np.empty((len(ys), len(xs)))
    err = np.empty_like(loss)
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            loss[i, j], err[i, j] = evaluate(plane.point(float(x), float(y)))
    return {"x": np.asarray(xs, dtype=np.float64), "y": np.asarray(ys, dtype=np.float64), "loss": loss, "error": err}


def plane_axes(anchors: np.ndarray, points: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid coordinates covering the anchors with ``margin`` x their extent on every side (anchors on the grid
    when ``points`` is chosen so; the two axes get the same spacing-independent bounds)."""
    lo, hi = anchors.min(0), anchors.max(0)
    pad = margin * (hi - lo).max()
    return np.linspace(lo[0] - pad, hi[0] + pad, points), np.linspace(lo[1] - pad, hi[1] + pad, points)
