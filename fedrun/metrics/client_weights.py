"""Each cohort client's weight in the aggregate, recovered from the models (``eval.client_weights=true``).

For an aggregate that is a linear combination of the uploaded models, w^{t+1} = sum_i c_i w_i, the
coefficients are the least-squares solution of that equation over every parameter (normal equations with
the Gram matrix of the client models, accumulated leaf by leaf in float64; a minimum-norm solution when two
uploads are identical). FedAvg gives c = p; fixed global weight shrinking c = gamma * p; FedLAW (Li et al.
ICML 2023, eq. 3) c = gamma * lambda, so lambda = c / sum(c) and gamma = sum(c). The recovery is exact up
to the float32 rounding of w^{t+1} (errors ~1e-6 in tests), works from outside any method, and does not
depend on how the method computes its combination. For aggregates that are not such a combination (server
steps, distillation, IMA's window) the coefficients are only the best linear fit.

FedLAW Table 11 correlates each client's accumulated weight (lambda summed over the rounds it took part in)
with its data size and heterogeneity: see fedrun/papers/correlation.py. The runner writes one row per round
and cohort client to ``client_weights.csv``: round, client, size, p (the configured weight), coef (c_i) and
lambda (c_i / sum c).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedrun.core.tree import Tensors
from fedrun.storage.rundir import CLIENT_WEIGHTS_FILE as CLIENT_WEIGHTS_FILE


def effective_weights(stacked: Tensors, new: Tensors) -> torch.Tensor:
    """c [m] (float64, CPU) minimising ||sum_i c_i stacked[.][i] - new|| over all floating-point parameters."""
    gram: torch.Tensor | None = None
    rhs: torch.Tensor | None = None
    for k, w in stacked.items():
        if not w.is_floating_point():
            continue
        a = w.reshape(w.shape[0], -1).to(torch.float64)
        g, r = (a @ a.T).cpu(), (a @ new[k].reshape(-1).to(torch.float64)).cpu()
        gram, rhs = (g, r) if gram is None or rhs is None else (gram + g, rhs + r)
    if gram is None or rhs is None:
        raise ValueError("effective_weights: no floating-point parameters")
    return torch.linalg.lstsq(gram, rhs.unsqueeze(1), driver="gelsd").solution.squeeze(1)


def weight_rows(
    rnd: int, clients: torch.Tensor, sizes: torch.Tensor, weights: torch.Tensor, coef: torch.Tensor
) -> list[dict[str, float | int]]:
    """``client_weights.csv`` rows of round ``rnd`` (0-based; written 1-based like metrics.csv)."""
    total = float(coef.sum())
    return [
        {
            "round": rnd + 1,
            "client": int(clients[j]),
            "size": int(sizes[j]),
            "p": float(weights[j]),
            "coef": float(coef[j]),
            "lambda": float(coef[j]) / total if total else float("nan"),
        }
        for j in range(len(clients))
    ]


def resumed_rows(path: Path, done: int) -> list[dict[str, Any]]:
    """The rows of rounds <= ``done`` already in ``path`` (a resumed run recomputes the later ones)."""
    if not done or not path.is_file():
        return []
    rows = pd.read_csv(path)
    return rows[rows["round"] <= done].to_dict("records")
