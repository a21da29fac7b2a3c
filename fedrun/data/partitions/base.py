"""What a partition function receives, and the shared parameter base."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PartitionParams:
    """Fields every partition accepts (``partition.*``)."""


@dataclass
class PartitionInput:
    """The training split's metadata a partition may use (never the images themselves)."""

    labels: np.ndarray
    num_classes: int
    domains: np.ndarray | None = None
    coarse: np.ndarray | None = None
    natural: list[np.ndarray] | None = None
