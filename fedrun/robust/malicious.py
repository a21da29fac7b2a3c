"""The malicious clients: a fixed set drawn from the run's seed, a fraction of all clients.

round(fraction * n) clients drawn without replacement from a generator keyed by (seed, "malicious"), so every
method and defence at a seed faces the same attackers, however many random numbers the rest of the run draws
(the same rounding as the corrupted clients of fedrun/data/corrupt.py). They take part when sampled, like any
client; the run records the set in its directory.
"""

from __future__ import annotations

import math

import numpy as np

from fedrun.config.registry import in_range
from fedrun.core.errors import ConfigError
from fedrun.core.rng import np_rng


def check_fraction(fraction: float, field: str = "attack.fraction") -> None:
    """Refuse an attack fraction outside [0, 1) in one line naming ``field``."""
    if not math.isfinite(fraction):
        raise ConfigError(field, f"must be a finite number in [0.0, 1.0), got {fraction!r}")
    in_range(field, fraction, 0.0, 1.0, hi_open=True, why="all clients malicious leaves no honest update")


def malicious_clients(seed: int, n: int, fraction: float) -> np.ndarray:
    """Sorted ids (int64) of the round(fraction * n) malicious clients among ``n`` at ``seed``."""
    check_fraction(fraction)
    k = round(fraction * n)
    return np.sort(np_rng(seed, "malicious").choice(n, k, replace=False)).astype(np.int64)
