"""``fmnist_domains``: an offline, synthetic domain-shift benchmark built from Fashion-MNIST.

Not Digit-Five and not from any of the papers: it exists so that feature skew (``partition=domains``)
can be run and tested without downloads. Each Fashion-MNIST image (train and test) is assigned to one
of the domains at random (balanced) and rendered in that domain's style, as a 3x28x28 RGB image like
FedIMA's Digit-Five inputs (so ``digit5_cnn`` runs on it; normalised with mean = std = 0.5 as there):

- ``plain``: the grey image copied to three channels;
- ``rotate``: rotated by 90 degrees;
- ``invert``: contrast inversion (255 - x);
- ``noise``: additive Gaussian noise (std ``noise_std`` of the range), clipped;
- ``colour``: a random foreground and background colour per image (in the spirit of MNIST-M).

Every sample carries its domain id (``Split.domain``); ``domain_names`` lists the styles in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedrun.config.registry import DATASETS, in_range
from fedrun.core.errors import ConfigError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.mnist import MNISTParams, load_fmnist
from fedrun.data.standin import image_dataset, signature

STYLES = ("plain", "rotate", "invert", "noise", "colour")


@dataclass
class FMNISTDomainsParams(DataParams):
    """``data=fmnist_domains``: which ``domains`` (styles, in order), the noise level and the rendering seed."""

    domains: list[str] = field(default_factory=lambda: list(STYLES))  # the styles, one domain each, in order
    noise_std: float = 0.3  # Gaussian noise std of the "noise" style, as a fraction of the range
    seed: int = 0  # draws the domain assignment and the rendering

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [d for d in self.domains if d not in STYLES]
        if bad or not self.domains or len(set(self.domains)) != len(self.domains):
            raise ConfigError("domains", f"invalid {self.domains}; a non-empty list of distinct: {', '.join(STYLES)}")
        in_range("noise_std", self.noise_std, 0.0, 1.0)


def render(gray: np.ndarray, style: str, rng: np.random.Generator, noise_std: float = 0.3) -> np.ndarray:
    """uint8 [N,28,28] grey images -> uint8 [N,3,28,28] in ``style``."""
    g = gray.astype(np.float32)
    if style == "rotate":
        g = np.rot90(g, k=1, axes=(1, 2))
    elif style == "invert":
        g = 255.0 - g
    elif style == "noise":
        g = g + rng.normal(0.0, noise_std * 255.0, g.shape).astype(np.float32)
    rgb = np.repeat(g[:, None], 3, axis=1)
    if style == "colour":
        fg = rng.uniform(0, 255, (len(g), 3, 1, 1)).astype(np.float32)
        bg = rng.uniform(0, 255, (len(g), 3, 1, 1)).astype(np.float32)
        a = rgb / 255.0
        rgb = a * fg + (1.0 - a) * bg
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def _render_split(split: Split, p: FMNISTDomainsParams, rng: np.random.Generator) -> Split:
    gray = split.x.numpy()[:, 0]
    n = len(gray)
    dom = rng.permutation(n) % len(p.domains)
    out = np.empty((n, 3, 28, 28), dtype=np.uint8)
    for d, style in enumerate(p.domains):
        where = np.flatnonzero(dom == d)
        out[where] = render(gray[where], style, rng, p.noise_std)
    return Split(torch.from_numpy(out), split.y, domain=torch.from_numpy(dom.astype(np.int64)))


def standin_fmnist_domains(p: FMNISTDomainsParams, rng: np.random.Generator) -> Dataset:
    return image_dataset("fmnist_domains", 10, (3, 28, 28), (0.5,) * 3, (0.5,) * 3, rng, list(p.domains))


@DATASETS.register(
    "fmnist_domains",
    FMNISTDomainsParams,
    standin=standin_fmnist_domains,
    signature=lambda p: signature("fmnist_domains", 10, (3, 28, 28), p),
)
def load_fmnist_domains(p: FMNISTDomainsParams) -> Dataset:
    """Fashion-MNIST rendered as ``p.domains`` (synthetic domain shift; see the module docstring)."""
    try:
        base = load_fmnist(MNISTParams(root=p.root, download=p.download))
    except DataMissing as e:
        raise DataMissing(f"fmnist_domains renders Fashion-MNIST; {e}") from None
    rng = np.random.default_rng(p.seed)
    return Dataset(
        name="fmnist_domains",
        train=_render_split(base.train, p, rng),
        test=_render_split(base.test, p, rng),
        num_classes=10,
        input_shape=(3, 28, 28),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        domain_names=list(p.domains),
        notes={"synthetic": "Fashion-MNIST rendered in several styles; not Digit-Five"},
    )
