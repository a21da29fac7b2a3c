"""PFLlib's 4-layer CNN (TsingZ0/PFLlib ``system/flcore/trainmodel/models.py``, ``FedAvgCNN``), its benchmark's CV
model: conv5x5(32)-ReLU-maxpool2-conv5x5(64)-ReLU-maxpool2-FC(dim, 512)-ReLU-FC(512, C), no padding, so
``dim`` = 64 x 4 x 4 = 1024 on 28 x 28 inputs (``main.py`` passes dim=1024 for the MNIST family) and 1600 on 32 x 32.
The layers keep PFLlib's names (``conv1``, ``conv2``, ``fc1``, ``fc``); its personalised methods split off ``fc``
as the head (``main.py``: ``args.head = model.fc``), which is the last layer, fedrun's default head.
"""

from __future__ import annotations

import torch
from torch import nn

from fedrun.config.registry import MODELS
from fedrun.core.errors import ConfigError
from fedrun.models.base import ModelParams, require_image


class PFLlibCNN(nn.Module):
    """``FedAvgCNN(in_features, num_classes, dim)`` of PFLlib, for ``input_shape`` [C, H, W] images."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        side = lambda n: ((n - 4) // 2 - 4) // 2  # noqa: E731  # two unpadded 5x5 convolutions, each pooled by 2
        if side(h) < 1 or side(w) < 1:
            raise ConfigError("model.name", f"pfllib_cnn needs images of at least 16 x 16; the dataset gives {h}x{w}")
        self.conv1 = nn.Sequential(nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Sequential(nn.Linear(64 * side(h) * side(w), 512), nn.ReLU())
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc1(torch.flatten(self.conv2(self.conv1(x)), 1)))


@MODELS.register("pfllib_cnn", ModelParams)
def pfllib_cnn(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """PFLlib's FedAvgCNN (module docstring): 582,026 parameters on Fashion-MNIST."""
    require_image("pfllib_cnn", input_shape)
    return PFLlibCNN(input_shape, num_classes)
