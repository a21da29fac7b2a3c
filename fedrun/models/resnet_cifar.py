"""He et al.'s CIFAR ResNets with BatchNorm, as in FedLAW (ZexiLee/ICML-2023-FedLAW models_dict/resnet.py).

3x3 conv(16k) - BN - ReLU stem, three stages of n BasicBlocks with 16k/32k/64k channels (stride 2 at the
start of stages 2 and 3; 1x1 conv + BN shortcut where the shape changes), global average pooling and
FC(64k, C). depth = 6n + 2: ResNet8 (n=1), ResNet20 (3), ResNet56 (9), ResNet110 (18); WRN56-4 is n=9 with
width factor k=4 (the stem is widened too, as in FedLAW's WResNet_cifar). ResNet8 is used in FedLAW's
tables but not in its repository; it is the same construction with n=1.

BatchNorm statistics: ``running_stats: true`` (default, FedLAW's code) keeps running statistics. The
sequential engine passes each client's copy of them through the client step (so ``torch.func`` may update
them in place), uploads them, and the server averages them with the aggregation weights like the rest of
the state dict; evaluation uses the averaged statistics. Such models have buffers, so they run on the
sequential engine only. ``running_stats: false`` normalises every batch by its own statistics in training
*and* evaluation: no buffers, so every engine, vmap included, can run it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.config.registry import MODELS
from fedrun.models.base import ModelParams, require_image

DEPTHS = {"resnet8": (8, 1), "resnet20": (20, 1), "resnet56": (56, 1), "resnet110": (110, 1), "wrn56_4": (56, 4)}


@dataclass
class BNParams(ModelParams):
    """``running_stats``: BatchNorm with running statistics (FedLAW's code) or by batch statistics alone."""

    # FedLAW's BatchNorm with running statistics (sequential engine); false: batch statistics only, any engine
    # (supported until an engine passes BN buffers through the client step)
    running_stats: bool = True


def bn(channels: int) -> nn.BatchNorm2d:
    """BatchNorm2d built without running statistics; :func:`with_bn_stats` adds them when configured."""
    return nn.BatchNorm2d(channels, track_running_stats=False)


def with_bn_stats(module: nn.Module, p: BNParams) -> nn.Module:
    """Give every BatchNorm of ``module`` running statistics (zero mean, unit variance) when ``p.running_stats``."""
    if p.running_stats:
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.track_running_stats:
                m.track_running_stats = True
                m.register_buffer("running_mean", torch.zeros(m.num_features))
                m.register_buffer("running_var", torch.ones(m.num_features))
                m.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
    return module


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
        return with_bn_stats(ResNetCIFAR(depth, k, input_shape[0], num_classes), p)

    factory.__doc__ = f"FedLAW's {name}: CIFAR ResNet, depth {depth}, width x{k}, BatchNorm."
    MODELS.register(name, BNParams)(factory)


for _name, (_depth, _k) in DEPTHS.items():
    _register(_name, _depth, _k)
