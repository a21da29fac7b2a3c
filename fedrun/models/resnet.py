"""CIFAR-style ResNet-18 with GroupNorm (FedIMA's resnetcifar; FedCos's resnet_gn with 16 groups)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.config.registry import MODELS, positive
from fedrun.models.base import ModelParams, require_image


@dataclass
class ResNetGNParams(ModelParams):
    """``model=resnet18``: ``groups`` GroupNorm groups (IMA: 2, FedCos: 16); ``projector`` adds IMA's FC(512,128)."""

    groups: int = 2  # GroupNorm groups (FedIMA: 2; FedCos: 16)
    projector: bool = False  # FedIMA's FC(512,128) before the classifier

    def __post_init__(self) -> None:
        positive("groups", self.groups)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = nn.GroupNorm(groups, cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(groups, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.n1(self.conv1(x)))
        return torch.relu(self.n2(self.conv2(out)) + self.shortcut(x))


class ResNetGN(nn.Module):
    def __init__(self, blocks: list[int], in_ch: int, num_classes: int, groups: int, projector: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False), nn.GroupNorm(groups, 64), nn.ReLU())
        layers, cin = [], 64
        for i, (n, cout) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True)):
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1, groups))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.projector = nn.Linear(512, 128) if projector else nn.Identity()
        self.fc = nn.Linear(128 if projector else 512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.pool(self.layers(self.stem(x))).flatten(1)
        return self.fc(self.projector(z))


@MODELS.register("resnet18", ResNetGNParams)
def resnet18(p: ResNetGNParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    require_image("resnet18", input_shape)
    return ResNetGN([2, 2, 2, 2], input_shape[0], num_classes, p.groups, p.projector)
