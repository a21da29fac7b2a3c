"""FedCos's models (benjiachong/FedCos models/Nets.py)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from torch import nn

from fedrun.config.registry import MODELS
from fedrun.core.errors import ConfigError
from fedrun.models.base import ModelParams, require_image


@dataclass
class FedCosMLPParams(ModelParams):
    """``model=fedcos_mlp``: one hidden layer of ``hidden`` units with dropout ``dropout`` (FedCos: 200, 0.5)."""

    hidden: int = 200  # hidden units (FedCos: 200)
    dropout: float = 0.5  # dropout after the hidden layer (FedCos: 0.5)

    def __post_init__(self) -> None:
        if self.hidden <= 0:
            raise ConfigError("hidden", f"must be > 0, got {self.hidden}")
        if not 0 <= self.dropout < 1:
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")


@MODELS.register("fedcos_mlp", FedCosMLPParams)
def fedcos_mlp(p: FedCosMLPParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedCos's FMNIST MLP: FC(784,200)-Dropout(0.5)-ReLU-FC(200,C) (dropout before the ReLU, as in the code)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(prod(input_shape), p.hidden),
        nn.Dropout(p.dropout),
        nn.ReLU(),
        nn.Linear(p.hidden, num_classes),
    )


@MODELS.register("fedcos_cnn", ModelParams)
def fedcos_cnn(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedCos's CIFAR "CNN" (= its LeNet; the paper says 2 FC, the code has 3): conv5(6)-ReLU-pool-conv5(16)-
    ReLU-pool-FC(400,120)-ReLU-FC(120,84)-ReLU-FC(84,C), for 32x32 inputs."""
    require_image("fedcos_cnn", input_shape, size=32)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )
