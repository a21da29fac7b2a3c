"""He et al.'s CIFAR ResNets with BatchNorm, as in FedLAW (ZexiLee/ICML-2023-FedLAW models_dict/resnet.py).

3x3 conv(16k) - BN - ReLU stem, three stages of n BasicBlocks with 16k/32k/64k channels (stride 2 at the
start of stages 2 and 3; 1x1 conv + BN shortcut where the shape changes), global average pooling and
FC(64k, C). depth = 6n + 2: ResNet8 (n=1), ResNet20 (3), ResNet56 (9), ResNet110 (18); WRN56-4 is n=9 with
width factor k=4 (the stem is widened too, as in FedLAW's WResNet_cifar). ResNet8 is used in FedLAW's
tables but not in its repository; it is the same construction with n=1.

BatchNorm keeps running statistics in buffers, so these models set ``vmap_safe = False`` and need the
sequential engine.
"""

from __future__ import annotations

import torch
from torch import nn

from fedrun.models.base import ModelParams, require_image
from fedrun.registry import MODELS

DEPTHS = {"resnet8": (8, 1), "resnet20": (20, 1), "resnet56": (56, 1), "resnet110": (110, 1), "wrn56_4": (56, 4)}


class BasicBlockBN(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetCIFAR(nn.Module):
    """depth = 6n + 2, width factor ``k``."""

    vmap_safe = False

    def __init__(self, depth: int, k: int, in_ch: int, num_classes: int) -> None:
        super().__init__()
        n = (depth - 2) // 6
        w = 16 * k
        self.stem = nn.Sequential(nn.Conv2d(in_ch, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
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
    def factory(p: ModelParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        require_image(name, input_shape, size=32)
        return ResNetCIFAR(depth, k, input_shape[0], num_classes)

    factory.__doc__ = f"FedLAW's {name}: CIFAR ResNet, depth {depth}, width x{k}, BatchNorm (sequential engine)."
    MODELS.register(name, ModelParams)(factory)


for _name, (_depth, _k) in DEPTHS.items():
    _register(_name, _depth, _k)
