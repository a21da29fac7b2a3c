"""Small models of the papers: MLP, McMahan CNN, FedLAW's SimpleCNN, LeNet5 and CIFAR AlexNet."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from torch import nn

from fedrun.config.registry import MODELS
from fedrun.core.errors import ConfigError
from fedrun.models.base import ModelParams, require_image


@dataclass
class MLPParams(ModelParams):
    """``model=mlp``: FedLAW's 784-200-200-10 by default (``hidden`` sets the layer widths)."""

    hidden: list[int] = field(default_factory=lambda: [200, 200])  # hidden widths (FedLAW: 200, 200); []: logistic
    dropout: float = 0.0  # dropout after each hidden layer

    def __post_init__(self) -> None:
        if any(h <= 0 for h in self.hidden):
            raise ConfigError("hidden", f"layer widths must be > 0, got {self.hidden}")
        if not 0 <= self.dropout < 1:
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")


@MODELS.register("mlp", MLPParams)
def mlp(p: MLPParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = prod(input_shape)
    for h in p.hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if p.dropout:
            layers.append(nn.Dropout(p.dropout))
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


@MODELS.register("cnn", ModelParams)
def mcmahan_cnn(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """McMahan et al. (2017) CNN: conv5x5(32)-pool-conv5x5(64)-pool-FC(512)-FC(C), for 28x28 inputs."""
    require_image("cnn", input_shape, size=28)
    c = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


@MODELS.register("simplecnn", ModelParams)
def simplecnn(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedLAW's SimpleCNN for 32x32 RGB: conv3(32)-pool-conv3(64)-pool-conv3(64)-FC(1024,64)-FC(64,C)."""
    require_image("simplecnn", input_shape, size=32)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


@MODELS.register("lenet", ModelParams)
def lenet5(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedLAW's LeNet5 for 28x28: conv5(16,pad2)-pool-conv5(32,pad2)-pool-FC(1568,C)."""
    require_image("lenet", input_shape, size=28)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 16, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, num_classes),
    )


@MODELS.register("alexnet_cifar", ModelParams)
def alexnet_cifar(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """AlexNet for 32x32 RGB (FedLAW Tables 1/9): conv11(64,s4,p5)-pool-conv5(192,p2)-pool-conv3(384)-conv3(256)-
    conv3(256)-pool-FC(256,C), ReLU after every conv, no normalisation. FedLAW's code has no AlexNet, so the
    widely used CIFAR adaptation (torchvision's convs, FC head reduced to one layer) is taken."""
    require_image("alexnet_cifar", input_shape, size=32)
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 64, 11, stride=4, padding=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 192, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(192, 384, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, num_classes),
    )
