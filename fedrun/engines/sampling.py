"""Which clients train and which are aggregated in a round; the cohort itself is drawn in fedrun/data/cohorts.py
(from (seed, round) alone, so every algorithm sees the same cohort sequence for a seed)."""

from __future__ import annotations

import torch

from fedrun.config.schema import FLConfig
from fedrun.core.tree import tree_map
from fedrun.data.cohorts import participations as participations
from fedrun.data.cohorts import sample_clients as sample_clients
from fedrun.engines.base import CohortResult


def training_clients(fl: FLConfig, sampled: torch.Tensor) -> torch.Tensor:
    """The clients that train this round: the sampled cohort, or with ``fl.train_all`` every client.

    FedLAW's Alg. 1 (lines 3-8) and its code (``main_fedlaw.py``/``main_baselines.py``: ``Client_update``
    trains every node, then ``generate_selectlist`` picks the m whose models are aggregated) train all n
    clients under partial participation; clients keep their own state (momentum) from these rounds.
    """
    if fl.train_all:
        return torch.arange(fl.clients, dtype=sampled.dtype)
    return sampled


def aggregated_part(res: CohortResult, trained: torch.Tensor, sampled: torch.Tensor) -> CohortResult:
    """The rows of ``res`` (trained in ``trained`` order) that belong to the ``sampled`` clients, in their
    order; ``samples`` and ``loss`` stay those of everything trained."""
    if trained.shape == sampled.shape and bool((trained == sampled).all()):
        return res
    pos = torch.searchsorted(trained, sampled)  # trained is sorted (arange)
    pick = lambda t: t.index_select(0, pos.to(t.device))  # noqa: E731
    return CohortResult(
        uploads=tree_map(pick, res.uploads),
        states={},  # the trained clients' states are scattered by the caller before this selection
        steps=pick(res.steps),
        samples=res.samples,
        loss=res.loss,
        client_loss=None if res.client_loss is None else pick(res.client_loss),
    )
