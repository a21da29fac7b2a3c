"""Label flipping: an attacker trains on its data with every label l replaced by C - 1 - l, C the classes (Fang
et al. 2020, Sec. 5.1 and FLTrust, Cao et al. 2021: "l -> M - l - 1"; ByzFL's clients flip the same way).
``source`` and ``target`` set a targeted flip instead: only class ``source`` becomes ``target`` (Tolpegin, Truex,
Gursoy and Liu 2020, "Data poisoning attacks against federated learning systems"). Inputs are untouched."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.config.registry import positive
from fedrun.core.errors import ConfigError
from fedrun.robust.base import ATTACKS, DataAttack


@dataclass
class LabelFlipParams:
    """Unset ``source``/``target``: every label l becomes C - 1 - l; set: class ``source`` becomes ``target``."""

    source: int | None = None  # None: flip every class (Fang et al. 2020; FLTrust)
    target: int | None = None

    def __post_init__(self) -> None:
        positive("source", self.source, allow_zero=True)
        positive("target", self.target, allow_zero=True)


def flip_labels(
    y: torch.Tensor, num_classes: int, source: int | None = None, target: int | None = None
) -> torch.Tensor:
    """``y`` with every l as C - 1 - l, or with ``source`` as ``target``."""
    if source is None or target is None:
        return num_classes - 1 - y
    return torch.where(y == source, torch.full_like(y, target), y)


@ATTACKS.register("label_flip", LabelFlipParams)
class LabelFlip(DataAttack):
    name = "label_flip"
    hp: LabelFlipParams

    def __init__(self, hp: LabelFlipParams) -> None:
        # checked here, not in the params: ``attack.target`` is the backdoor's key too, set without a source
        if (hp.source is None) != (hp.target is None):
            raise ConfigError("attack.source", "source and target are set together (a targeted flip) or not at all")
        super().__init__(hp)

    def check(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        for key in ("source", "target"):
            value = getattr(self.hp, key)
            if value is not None and value >= num_classes:
                raise ConfigError(f"attack.{key}", f"{value} is not a class; valid: 0..{num_classes - 1}")

    def poison(
        self, batch: dict[str, torch.Tensor], num_classes: int, attacker: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        y = batch["y"]
        flipped = flip_labels(y, num_classes, self.hp.source, self.hp.target)
        if attacker is not None:
            flipped = torch.where(attacker.reshape(*attacker.shape, *([1] * (y.dim() - attacker.dim()))), flipped, y)
        return {**batch, "y": flipped}

    def poison_client(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One attacker's training samples with every label flipped (inputs untouched)."""
        return x, flip_labels(y, num_classes, self.hp.source, self.hp.target)
