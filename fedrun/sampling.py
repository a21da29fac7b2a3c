"""Which clients take part in a round: drawn from (seed, round) alone, so every algorithm sees the same
cohort sequence for a seed."""

from __future__ import annotations

import numpy as np

from fedrun.config import FLConfig
from fedrun.rng import np_rng


def sample_clients(fl: FLConfig, seed: int, rnd: int) -> np.ndarray:
    """Sorted client ids for round ``rnd``.

    fixed: max(int(C*N), 1) clients uniformly without replacement (full participation: everyone).
    bernoulli: each client independently with probability C (FedSAM's setting); if none is drawn, one
    client is taken uniformly so that the round is not empty.
    """
    rng = np_rng(seed, "sample", rnd)
    n = fl.clients
    if fl.sampling == "fixed":
        m = fl.cohort_size
        if m >= n:
            return np.arange(n)
        return np.sort(rng.choice(n, m, replace=False))
    chosen = np.flatnonzero(rng.random(n) < fl.participation)
    if chosen.size == 0:
        chosen = np.array([rng.integers(n)])
    return chosen
