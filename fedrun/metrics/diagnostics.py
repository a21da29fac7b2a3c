"""Per-round training-dynamics diagnostics from a cohort's uploaded models (``eval.diagnostics=true``).

All quantities come from the Gram matrix G_ij = <d_i, d_j> of the clients' updates d_i = w_i - w^t
(accumulated leaf by leaf in float64, so no [m, P] copy of the cohort is ever made):

- ``grad_coherence`` - FedLAW's local gradient coherence (Li et al. ICML 2023, Sec. 5, Fig. 5/6): the
  cosine similarity of clients' local updates, averaged over pairs i != j with weights p_i p_j (p = the
  round's aggregation weights). FedLAW writes c_cohort = (1/m) sum_{i!=j} p_i p_j cos(g_i, g_j); here the
  pair weights are normalised to sum to one, so identical updates give 1, and two opposite updates -1,
  whatever the cohort size. Clients with a zero update (no local steps) are left out.
- ``global_update_norm`` - FedLAW's global gradient ||g_g^t||: the norm of the *uniform* average of the
  local updates (FedLAW Sec. 4, Fig. 2/3 right, "uniform average of local updates").
- ``global_grad_norm`` - the same per unit of local work: ``global_update_norm / (lr * mean local steps)``,
  an average gradient norm comparable across lr schedules and local-epoch settings.
- ``client_dist_mean`` / ``client_dist_max`` - FedIMA's locality (Zhou et al., Sec. 4): the distance
  ||w_i - w_bar|| of each client model to the cohort's weighted average w_bar = sum p_i w_i (the
  federated-model-averaging point), mean and maximum over the cohort.
"""

from __future__ import annotations

import math

import torch

from fedrun.core.tree import Tensors, Tree

DIAGNOSTIC_COLUMNS = ("grad_coherence", "global_update_norm", "global_grad_norm", "client_dist_mean", "client_dist_max")


def update_gram(params: Tensors, client_params: Tensors) -> torch.Tensor:
    """G [m, m] (float64, on CPU): inner products of the updates ``client_params[k][i] - params[k]``."""
    gram: torch.Tensor | None = None
    for k, w in params.items():
        d = (client_params[k] - w.unsqueeze(0)).reshape(client_params[k].shape[0], -1).to(torch.float64)
        g = d @ d.T
        gram = g if gram is None else gram + g
    if gram is None:
        raise ValueError("update_gram: no parameters")
    return gram.cpu()


def coherence(gram: torch.Tensor, weights: torch.Tensor | None = None) -> float:
    """Weighted mean pairwise cosine of the updates behind ``gram`` (NaN with fewer than two non-zero updates)."""
    m = gram.shape[0]
    p = torch.full((m,), 1.0 / m, dtype=torch.float64) if weights is None else weights.to(torch.float64).cpu()
    norms = gram.diagonal().clamp_min(0).sqrt()
    live = norms > 0
    if int(live.sum()) < 2:
        return math.nan
    g, n, p = gram[live][:, live], norms[live], p[live]
    cos = g / (n[:, None] * n[None, :])
    pair = p[:, None] * p[None, :]
    pair.fill_diagonal_(0.0)
    return float((pair * cos).sum() / pair.sum())


def distances_to_mean(gram: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """||d_i - sum_j p_j d_j|| for every client i, from the Gram matrix alone."""
    p = weights.to(torch.float64).cpu()
    gp = gram @ p
    sq = gram.diagonal() - 2 * gp + p @ gp
    return sq.clamp_min(0).sqrt()


def round_diagnostics(
    params: Tensors, uploads: Tree, weights: torch.Tensor, steps: torch.Tensor, lr: float
) -> dict[str, float]:
    """The columns of :data:`DIAGNOSTIC_COLUMNS` for one round (global model ``params`` = w^t, before aggregation)."""
    gram = update_gram(params, uploads["params"])
    m = gram.shape[0]
    mean_update_sq = gram.sum() / m**2
    update_norm = float(mean_update_sq.clamp_min(0).sqrt())
    work = lr * float(steps.to(torch.float64).mean()) if steps.numel() else 0.0
    dist = distances_to_mean(gram, weights)
    return {
        "grad_coherence": coherence(gram, weights),
        "global_update_norm": update_norm,
        "global_grad_norm": update_norm / work if work > 0 else math.nan,
        "client_dist_mean": float(dist.mean()),
        "client_dist_max": float(dist.max()),
    }
