"""He et al.'s CIFAR ResNets with BatchNorm, as in FedLAW (ZexiLee/ICML-2023-FedLAW models_dict/resnet.py).

3x3 conv(16k) - BN - ReLU stem, three stages of n BasicBlocks with 16k/32k/64k channels (stride 2 at the
start of stages 2 and 3; 1x1 conv + BN shortcut where the shape changes), global average pooling and
FC(64k, C). depth = 6n + 2: ResNet8 (n=1), ResNet20 (3), ResNet56 (9), ResNet110 (18); WRN56-4 is n=9 with
width factor k=4 (the stem is widened too, as in FedLAW's WResNet_cifar). ResNet8 is used in FedLAW's
tables but not in its repository; it is the same construction with n=1.

BatchNorm statistics: FedLAW's code keeps running statistics (buffers updated in place during training).
fedrun's engines take gradients with ``torch.func``, which forbids in-place updates of buffers captured by the
transformed function, so by default (``running_stats: false``) BatchNorm normalises with the statistics of
the current batch in training *and* evaluation (``track_running_stats=False``: no buffers, pure, works on
every engine, vmap included). ``running_stats: true`` (FedLAW's behaviour) is refused with a ConfigError
until an engine threads buffers through the client step; such models would set ``vmap_safe = False``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.errors import ConfigError
from fedrun.models.base import ModelParams, require_image
from fedrun.registry import MODELS

DEPTHS = {"resnet8": (8, 1), "resnet20": (20, 1), "resnet56": (56, 1), "resnet110": (110, 1), "wrn56_4": (56, 4)}


@dataclass
class BNParams(ModelParams):
    """``running_stats``: BatchNorm with running statistics (FedLAW's code; not supported by the engines yet)."""

    running_stats: bool = False

    def __post_init__(self) -> None:
        if self.running_stats:
            raise ConfigError(
                "running_stats",
                "BatchNorm running statistics need an engine that passes buffers through the client step "
                "(torch.func forbids updating them in place); use running_stats=false (batch statistics)",
            )


def bn(channels: int, running_stats: bool = False) -> nn.BatchNorm2d:
    """BatchNorm2d; without running statistics it has no buffers and normalises every batch by its own stats."""
    return nn.BatchNorm2d(channels, track_running_stats=running_stats)


class BasicBlockBN(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = bn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = bn(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetCIFAR(nn.Module):
    """depth = 6n + 2, width factor ``k``."""

    def __init__(self, depth: int, k: int, in_ch: int, num_classes: int) -> None:
        super().__init__()
        n = (depth - 2) // 6
        w = 16 * k
        self.stem = nn.Sequential(nn.Conv2d(in_ch, w, 3, 1, 1, bias=False), bn(w), nn.ReLU())
        layers, cin = [], w
        for stage, cout in enumerate((16 * k, 32 * k, 64 * k)):
            for j in range(n):
                layers.append(BasicBlockBN(cin, cout, 2 if (stage > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64 * k, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


def _register(name: str, depth: int, k: int) -> None:
    def factory(p: BNParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        require_image(name, input_shape, size=32)
        return ResNetCIFAR(depth, k, input_shape[0], num_classes)

    factory.__doc__ = f"FedLAW's {name}: CIFAR ResNet, depth {depth}, width x{k}, BatchNorm (batch statistics)."
    MODELS.register(name, BNParams)(factory)


for _name, (_depth, _k) in DEPTHS.items():
    _register(_name, _depth, _k)
