"""Which clients take part in a round: drawn from (seed, round) alone, so every algorithm sees the same cohort
sequence for a seed."""

from __future__ import annotations

import numpy as np

from fedrun.config.schema import FLConfig
from fedrun.core.rng import np_rng


def sample_clients(fl: FLConfig, seed: int, rnd: int, poisson: bool = False) -> np.ndarray:
    """Sorted client ids for round ``rnd``.

    fixed: max(int(C*N), 1) clients uniformly without replacement (full participation: everyone).
    bernoulli: each client independently with probability C (FedSAM's setting); if none is drawn, one
    client is taken uniformly so that the round is not empty.
    ``poisson`` (differential privacy's ``privacy.sampling=poisson``): each client independently with probability C,
    keyed by (seed, round) like bernoulli's draw, and nothing else: the cohort may be empty, as the privacy
    amplification by Poisson subsampling the accountant assumes requires (docs/privacy.md).
    """
    rng = np_rng(seed, "sample", rnd)
    n = fl.clients
    if poisson:
        return np.flatnonzero(rng.random(n) < fl.participation)
    if fl.sampling == "fixed":
        m = fl.cohort_size
        if m >= n:
            return np.arange(n)
        return np.sort(rng.choice(n, m, replace=False))
    chosen = np.flatnonzero(rng.random(n) < fl.participation)
    if chosen.size == 0:
        chosen = np.array([rng.integers(n)])
    return chosen


def participations(fl: FLConfig, seed: int, rounds: int, poisson: bool = False) -> np.ndarray:
    """How many of rounds 0..``rounds``-1 each client was sampled in (a pure function of the seed: a resumed run
    recomputes it)."""
    counts = np.zeros(fl.clients, dtype=np.int64)
    for rnd in range(rounds):
        counts[sample_clients(fl, seed, rnd, poisson)] += 1
    return counts
