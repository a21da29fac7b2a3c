"""The engine interface: train one round's cohort from w^t and return stacked uploads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors, Tree
from fedrun.data.federated import FederatedData


@dataclass
class CohortResult:
    """``uploads`` and ``states`` are stacked trees (leading dim = cohort); ``steps`` local steps per client.

    ``client_loss`` (optional): each client's float64 sum of local losses, in cohort order, so an engine
    that combines shards (``ray``) can form ``loss`` exactly as a single engine does.
    """

    uploads: Tree
    states: Tree
    steps: torch.Tensor
    samples: int
    loss: float
    client_loss: torch.Tensor | None = None


class Engine(ABC):
    """Runs :meth:`Algorithm.client_step` for every client of a cohort."""

    def __init__(self, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int) -> None:
        self.algorithm = algorithm
        self.data = data
        self.fl = fl
        self.seed = seed

    @abstractmethod
    def train_cohort(
        self, rnd: int, params: Tensors, extras: Tree, clients: torch.Tensor, states: Tree, lr: float
    ) -> CohortResult:
        """Train every client in ``clients`` for round ``rnd`` starting from ``params``."""

    def close(self) -> None:
        """Release what the engine holds beyond this process (Ray actors, a local cluster); a no-op here.

        The runner calls it when a run ends, however it ends; it must be safe to call more than once.
        """
        return None
