"""FedSAM's EMNIST CNN (Qu et al. 2022 / Caldarola et al.; the TFF EMNIST CNN of Reddi et al. 2021)."""

from __future__ import annotations

from torch import nn

from fedrun.config.registry import MODELS
from fedrun.models.base import ModelParams, require_image


@MODELS.register("emnist_cnn", ModelParams)
def emnist_cnn(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """conv3(32)-ReLU-conv3(64)-ReLU-maxpool2-Dropout(0.25)-FC(9216,128)-ReLU-Dropout(0.5)-FC(128,C), 28x28 input."""
    require_image("emnist_cnn", input_shape, size=28)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * 12 * 12, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )
