"""Coordinate-wise moments of a set of uploads [r, d], as the attacks read them (ALIE's mu and sigma, min-max's
``std`` perturbation, Fang et al.'s partial knowledge).

``torch.std(x, dim=0)`` reduces along the strided first axis, about 3x slower on the CPU than one subtraction
and a sum of squares along it (the same two-pass arithmetic: the deviations from the mean, then their squares).
On the CPU a large matrix is reduced by chunks of :data:`CHUNK` columns, so that a chunk's deviations are still in
the cache when they are squared and summed: about 2x faster on 80 rows of 199,210 (one thread), and the same
numbers bit for bit, as each column is reduced over the same rows in the same order (``tests/robust/test_attacks.py``).
A matrix under :data:`MIN_BYTES` is reduced at once: there the chunks' own dispatches would cost more than they
save (20 rows of 199,210: 5 ms at once, 8 ms by chunks).
"""

from __future__ import annotations

import torch

# columns per chunk on the CPU (80 rows of them: 640 KiB of float32, within a core's L2); a multiple of 256: torch
# sums whole blocks of columns with its vector kernel and the columns left over with a scalar one, which rounds
# otherwise, so chunks must leave over the columns the whole matrix does (a width of 3276 changes the last bits)
CHUNK = 2048
MIN_BYTES = 32 << 20  # the smallest matrix reduced by chunks


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
    if not (x.device.type == "cpu" and x.dim() == 2 and x.is_contiguous() and x.nbytes >= MIN_BYTES):
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
