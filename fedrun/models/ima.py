"""FedIMA's models (Zhou et al., TailinZhou/FedIMA model.py).

All are normalisation-free or GroupNorm, so they run under the vectorised engine. Each ends in a
``feature_dim``-wide feature layer (128; the FedFA/MOON feature) followed by the classifier FC(128, C).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from fedrun.config.registry import MODELS, positive
from fedrun.core.errors import ConfigError
from fedrun.models.base import ModelParams, require_image


@dataclass
class IMAParams(ModelParams):
    """``feature_dim``: width of the layer before the classifier (FedIMA: 128)."""

    feature_dim: int = 128  # width of the layer before the classifier (FedIMA: 128)

    def __post_init__(self) -> None:
        positive("feature_dim", self.feature_dim)


@dataclass
class IMACNNParams(IMAParams):
    """``model=ima_cnn``: ``width`` conv channels (null: 32 for 1-channel input as for FMNIST, 64 for RGB as for
    CIFAR-10)."""

    width: int | None = None  # conv channels; None: 32 for 1-channel input (FMNIST), 64 for RGB (CIFAR-10)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("width", self.width)


@MODELS.register("ima_cnn", IMACNNParams)
def ima_cnn(p: IMACNNParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedIMA's "CNN" (the code has 3 FC layers; the paper says 2 conv + 2 FC):
    conv5(w)-ReLU-pool-conv5(w)-ReLU-pool-FC(.,384)-ReLU-FC(384,128)-ReLU-FC(128,C).
    FMNIST: w=32, FC(512,384); CIFAR-10: w=64, FC(1600,384)."""
    require_image("ima_cnn", input_shape)
    c, h, w_in = input_shape
    w = p.width or (32 if c == 1 else 64)
    side_h, side_w = ((h - 4) // 2 - 4) // 2, ((w_in - 4) // 2 - 4) // 2
    if side_h < 1 or side_w < 1:
        require_image("ima_cnn", input_shape, size=28)
    return nn.Sequential(
        nn.Conv2d(c, w, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(w, w, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(w * side_h * side_w, 384),
        nn.ReLU(),
        nn.Linear(384, p.feature_dim),
        nn.ReLU(),
        nn.Linear(p.feature_dim, num_classes),
    )


@MODELS.register("digit5_cnn", IMAParams)
def digit5_cnn(p: IMAParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedIMA's Digit-Five CNN-GN (``mixed_digit_gn``): 3 x [conv5 pad2 (3->64->64->128) - GN(2) - ReLU -
    pool2] on 3x28x28 -> 1152 -> FC(1152,384)-ReLU-FC(384,128)-FC(128,C) (no ReLU on the feature)."""
    require_image("digit5_cnn", input_shape, channels=3, size=28)
    layers: list[nn.Module] = []
    for cin, cout in ((3, 64), (64, 64), (64, 128)):
        layers += [nn.Conv2d(cin, cout, 5, 1, 2), nn.GroupNorm(2, cout), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(128 * 3 * 3, 384),
        nn.ReLU(),
        nn.Linear(384, p.feature_dim),
        nn.Linear(p.feature_dim, num_classes),
    )


VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


@dataclass
class GNParams(IMAParams):
    """``groups``: GroupNorm groups on every conv (FedIMA VGG11: 2, AlexNet: 32)."""

    groups: int = 2  # GroupNorm groups on every conv (FedIMA's VGG11: 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("groups", self.groups)


@MODELS.register("vgg11", GNParams)
def vgg11(p: GNParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedIMA's VGG11-GN for 32x32: cfg 64-M-128-M-256-256-M-512-512-M-512-512-M of conv3 pad1 - GN - ReLU,
    then FC(512,128) (feature, no ReLU) and FC(128,C)."""
    require_image("vgg11", input_shape, size=32)
    layers: list[nn.Module] = []
    cin = input_shape[0]
    for v in VGG11:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.GroupNorm(p.groups, int(v)), nn.ReLU()]
            cin = int(v)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, p.feature_dim), nn.Linear(p.feature_dim, num_classes))


@dataclass
class AlexNetParams(GNParams):
    """``model=alexnet``: FedIMA's AlexNet-GN (GN with 32 groups)."""

    groups: int = 32  # GroupNorm groups on every conv (FedIMA's AlexNet: 32)


@MODELS.register("alexnet", AlexNetParams)
def alexnet(p: AlexNetParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedIMA's AlexNet-GN (PACS, 224 px): torchvision AlexNet's convs 64(11,s4,p2)-M-192(5,p2)-M-384-256-256
    (3,p1)-M(3,2), each conv - GN(32) - ReLU; AdaptiveAvgPool(6) - FC(9216,1024)-ReLU-FC(1024,128)-ReLU-FC(128,C)
    (the dropout layers are commented out in the code)."""
    require_image("alexnet", input_shape)
    if min(input_shape[1:]) < 63:
        raise ConfigError(
            "model.name", f"alexnet needs images >= 63x63 (PACS: 224); the dataset gives {list(input_shape)}"
        )

    def block(cin: int, cout: int, k: int, s: int, pad: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, s, pad), nn.GroupNorm(p.groups, cout), nn.ReLU()]

    return nn.Sequential(
        *block(input_shape[0], 64, 11, 4, 2),
        nn.MaxPool2d(3, 2),
        *block(64, 192, 5, 1, 2),
        nn.MaxPool2d(3, 2),
        *block(192, 384, 3, 1, 1),
        *block(384, 256, 3, 1, 1),
        *block(256, 256, 3, 1, 1),
        nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d(6),
        nn.Flatten(),
        nn.Linear(256 * 6 * 6, 1024),
        nn.ReLU(),
        nn.Linear(1024, p.feature_dim),
        nn.ReLU(),
        nn.Linear(p.feature_dim, num_classes),
    )
