"""The engine interface: train one round's cohort from w^t and return stacked uploads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import FLConfig, HardwareConfig
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
    """Runs :meth:`Algorithm.client_step` for every client of a cohort.

    An engine registers itself with the dataclass of its options (``@ENGINES.register("name", NameParams)``);
    its fields are keys of the ``hardware`` section (``hardware.chunk``), with their one default there. The
    classmethods say what ``engine=auto`` and the runner need: whether it can run on this machine and this
    method (:meth:`machine_blocker`, :meth:`method_blocker`) and how it is built (:meth:`build`).
    """

    def __init__(self, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int) -> None:
        self.algorithm = algorithm
        self.data = data
        self.fl = fl
        self.seed = seed

    @classmethod
    def build(
        cls, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, hw: HardwareConfig, options: Any
    ) -> Engine:
        """The engine for a run: ``hw`` is the ``hardware`` section, ``options`` this engine's params built from it
        (None for an engine that registered none)."""
        return cls(algorithm, data, fl, seed)

    # an engine that runs every method as written (the reference semantics): the one a fallback can name, when
    # every other engine failed its warm-up on a method (engine=auto)
    runs_every_method: bool = False

    @classmethod
    def machine_blocker(cls, device: torch.device, hw: HardwareConfig, options: Any) -> str | None:
        """Why ``engine=auto`` must not consider this engine on this machine (a package not installed, a device it
        does not support); None when it may. Naming the engine (``hardware.engine=name``) is not refused by it."""
        return None

    @classmethod
    def method_blocker(cls, algorithm: Algorithm) -> str | None:
        """Why this engine cannot run ``algorithm`` (None: it can); ``engine=auto`` then runs it on another."""
        return None

    @classmethod
    def probe_failure(cls, error: BaseException) -> str:
        """The reason ``engine=auto`` gives when this engine failed its warm-up on the run's own method."""
        first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")[:200]
        return f"{type(error).__name__}: {first}"

    @abstractmethod
    def train_cohort(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: torch.Tensor,
        states: Tree,
        lr: float,
        budgets: torch.Tensor | None = None,
    ) -> CohortResult:
        """Train every client in ``clients`` for round ``rnd`` starting from ``params``.

        ``budgets`` (the system model's partial work, fedrun/system/): each client's most local steps, in cohort
        order; a client runs the prefix of its own :func:`batch_plan` of that length (all of it when the budget is
        larger). None: every client runs its whole plan, the code path of a run without a system model.
        ``CohortResult.steps`` are the steps each client really ran.
        """

    def close(self) -> None:
        """Release what the engine holds beyond this process (Ray actors, a local cluster); a no-op here.

        The runner calls it when a run ends, however it ends; it must be safe to call more than once.
        """
        return None
