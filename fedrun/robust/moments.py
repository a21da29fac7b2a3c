"""Coordinate-wise moments of a set of uploads [r, d], as the attacks read them (ALIE's mu and sigma, min-max's
``std`` perturbation, Fang et al.'s partial knowledge).

``torch.std(x, dim=0)`` reduces along the strided first axis, about 3x slower on the CPU than one subtraction
and a sum of squares along it (the same two-pass arithmetic: the deviations from the mean, then their squares).
On the CPU both passes run by chunks of :data:`CHUNK` columns, so that a chunk's deviations are still in the
cache when they are squared and summed: 2x faster on 80 rows of 199,210 (one thread), and the same numbers bit for
bit, as each column is reduced over the same rows in the same order (``tests/robust/test_attacks.py``).
"""

from __future__ import annotations

import torch

CHUNK = 2048  # columns per chunk on the CPU: 80 rows of them are 640 KiB of float32, within a core's L2


def coordinate_std(x: torch.Tensor, mean: torch.Tensor | None = None) -> torch.Tensor:
    """The unbiased standard deviation [d] of each coordinate of the rows of ``x`` [r, d] (zeros when r = 1);
    ``mean``: their mean, when the caller has it."""
    if x.shape[0] < 2:
        return torch.zeros_like(x[0])
    return coordinate_moments(x, mean)[1]


def coordinate_moments(x: torch.Tensor, mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the mean [d] (``mean`` when given), the unbiased standard deviation [d] (zeros when r = 1)) of each
    coordinate of the rows of ``x`` [r, d]: ``x.mean(dim=0)`` and the deviations' root mean square, bit for bit."""
    r, d = x.shape[0], x[0].numel()
    if r < 2:
        return (x.mean(dim=0) if mean is None else mean), torch.zeros_like(x[0])
    if not (x.device.type == "cpu" and x.dim() == 2 and x.is_contiguous() and d > CHUNK):
        # (a GPU's reduction may be laid out by the output's size: the whole at once there, as before)
        mean = x.mean(dim=0) if mean is None else mean
        return mean, _std(x, mean)
    out = torch.empty(d, dtype=x.dtype) if mean is None else mean
    std = torch.empty(d, dtype=x.dtype)
    for start in range(0, d, CHUNK):
        at = slice(start, start + CHUNK)
        if mean is None:
            out[at] = x[:, at].mean(dim=0)
        std[at] = _std(x[:, at], out[at])
    return out, std


def _std(x: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    dev = x - mean
    return (dev.square_().sum(dim=0) / (x.shape[0] - 1)).sqrt()  # squared in place: the same numbers, one buffer fewer
