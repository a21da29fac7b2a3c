"""FedAvg (McMahan et al. 2017): the contract's defaults, registered under ``fedavg``."""

from __future__ import annotations

from fedrun.algorithms.base import AlgoParams, Algorithm
from fedrun.config.registry import ALGORITHMS


@ALGORITHMS.register("fedavg", AlgoParams)
class FedAvg(Algorithm):
    """Local SGD on cross-entropy; the server takes the weighted mean of the client models."""

    steps_from_mean = True
    stacks = True
