"""DenseNet-121 for 32x32 inputs, as in FedLAW (ZexiLee/ICML-2023-FedLAW models_dict/densenet.py, after
kuangliu/pytorch-cifar): a 3x3 conv stem with 2*growth channels, dense blocks of [6, 12, 24, 16]
BN-ReLU-conv1x1(4*growth)-BN-ReLU-conv3x3(growth) bottlenecks, transitions BN-ReLU-conv1x1 (x0.5)-avgpool2,
then BN-ReLU-avgpool-FC. growth = 32. BatchNorm statistics as in ``fedrun.models.resnet_cifar``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedrun.config.registry import MODELS
from fedrun.models.base import require_image
from fedrun.models.resnet_cifar import BNParams, bn, with_bn_stats


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.bn1 = bn(cin)
        self.conv1 = nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2 = bn(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(torch.relu(self.bn1(x)))
        out = self.conv2(torch.relu(self.bn2(out)))
        return torch.cat([out, x], 1)


class Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(bn(cin), nn.ReLU(), nn.Conv2d(cin, cout, 1, bias=False), nn.AvgPool2d(2))


class DenseNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...], growth: int, in_ch: int, num_classes: int, reduction: float = 0.5):
        super().__init__()
        planes = 2 * growth
        layers: list[nn.Module] = [nn.Conv2d(in_ch, planes, 3, padding=1, bias=False)]
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(planes, growth))
                planes += growth
            if i < len(blocks) - 1:
                out = int(math.floor(planes * reduction))
                layers.append(Transition(planes, out))
                planes = out
        layers += [bn(planes), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


@MODELS.register("densenet121", BNParams)
def densenet121(p: BNParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """DenseNet-121 (blocks 6-12-24-16, growth 32) for 32x32 inputs."""
    require_image("densenet121", input_shape, size=32)
    return with_bn_stats(DenseNet((6, 12, 24, 16), 32, input_shape[0], num_classes), p)
