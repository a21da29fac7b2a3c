"""The weighted mean sum_i p_i x_i (FedAvg's aggregation, McMahan et al. 2017): no robustness, the baseline a
defence is compared with, and the rule behind a pre-aggregator alone (e.g. bucketing then the mean)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView
from fedrun.upload.pipeline import weighted_sum


@dataclass
class MeanParams:
    """No settings: the aggregation weights p_i come with the round (:class:`~fedrun.robust.base.ServerView`)."""


def weighted_mean(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """sum_i p_i x_i over the rows of ``x`` [m, d], accumulated in float64 and returned in ``x``'s dtype: the upload
    pipeline's weighted sum (:func:`fedrun.upload.pipeline.weighted_sum`), so that the mean rule in a run is, bit
    for bit, the run without a defence."""
    return weighted_sum(p, x)


@DEFENCES.register("mean", MeanParams)
class Mean(Defence):
    name = "mean"

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        m = x.shape[0]
        p = view.weights if view.weights is not None else torch.full((m,), 1.0 / m, dtype=torch.float64)
        return Aggregate(weighted_mean(x, p), weights=p.to(x.device, x.dtype))
