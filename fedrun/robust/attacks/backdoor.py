"""A pixel-pattern backdoor (Bagdasaryan, Veit, Hua, Estrin and Shmatikov 2020, "How to backdoor federated
learning", AISTATS, Sec. 4: the attacker mixes triggered inputs, relabelled to the target class, into its
training batches; the trigger a pixel pattern as in BadNets, Gu, Dolan-Gavitt and Garg 2017).

``poison_fraction`` = 20/64: the paper's 20 backdoored inputs in a batch of 64. On a batch (:meth:`Backdoor.poison`)
the first round(fraction * B) samples (the batches are already shuffled) get the trigger and the ``target`` label.
In a run (:meth:`Backdoor.poison_client`) the same share of each attacker's *samples* is triggered and relabelled
once, before training, chosen by a keyed draw: the attacker's batches, shuffled afresh every epoch, then hold that
share on average (exactly, in expectation over the shuffle), and every engine and resume trains on the same data,
with nothing drawn per step. The poisoned samples replace clean ones, as in the paper's batches.

The trigger is a ``size`` x ``size`` patch at a ``corner`` of the image, all channels: ``checker`` sets every other
pixel of it to the trigger value (a pattern unlikely in clean data), ``square`` all of them. The trigger value is
white: 255 on uint8 images, 1.0 on float ones; a caller applying it after normalisation passes that white
((1 - mean) / std, per channel) as ``value``. A model's attack success rate is measured on triggered test inputs
whose true class is not the target (:func:`attack_success`).

``replace``: model replacement, the paper's eq. (3): the attacker also scales its upload by gamma = n / eta
(``gamma`` unset; 1 / (eta p_i) with aggregation weights), as :mod:`fedrun.robust.attacks.scaling` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.config.registry import in_range, positive
from fedrun.core.errors import ConfigError
from fedrun.robust.base import ATTACKS, DataAttack


@dataclass
class BackdoorParams:
    """``target``: the label the trigger should produce; ``poison_fraction``: the share of each batch (of each
    attacker's samples, in a run) poisoned; the trigger's ``pattern``, ``size`` (pixels) and ``corner``;
    ``replace`` and ``gamma``: model replacement."""

    target: int | None = None  # the backdoor's target class (None: 0; conf/attack/backdoor.yaml sets it)
    poison_fraction: float = 20 / 64  # Bagdasaryan et al. 2020: 20 backdoored inputs per batch of 64
    pattern: Literal["checker", "square"] = "checker"  # checker: every other pixel of the patch (fedrun's choice)
    size: int = 4  # the patch's side in pixels
    corner: Literal["bottom_right", "top_left"] = "bottom_right"  # where the patch sits (BadNets: bottom right)
    replace: bool = False  # model replacement (Bagdasaryan et al. 2020 eq. (3)): the upload scaled by gamma
    gamma: float | None = None  # the scale of a replacement (scaling's key); None: n / eta (1 / (eta p_i))

    def __post_init__(self) -> None:
        positive("target", self.target, allow_zero=True)
        in_range("poison_fraction", self.poison_fraction, 0.0, 1.0, lo_open=True)
        positive("size", self.size)
        positive("gamma", self.gamma)

    @property
    def label(self) -> int:
        """The target class (0 when unset)."""
        return 0 if self.target is None else self.target


def trigger_mask(shape: tuple[int, int], hp: BackdoorParams) -> torch.Tensor:
    """The trigger's pixels as a bool mask [H, W]."""
    h, w = shape
    mask = torch.zeros(h, w, dtype=torch.bool)
    k = hp.size
    patch = torch.ones(k, k, dtype=torch.bool)
    if hp.pattern == "checker":
        patch = (torch.arange(k)[:, None] + torch.arange(k)[None, :]) % 2 == 0
    if hp.corner == "bottom_right":
        mask[h - k :, w - k :] = patch
    else:
        mask[:k, :k] = patch
    return mask


def white(x: torch.Tensor) -> float:
    """The trigger value of an input's dtype: 255 for uint8, 1.0 for a float."""
    return 255.0 if x.dtype == torch.uint8 else 1.0


def apply_trigger(x: torch.Tensor, hp: BackdoorParams, value: float | torch.Tensor | None = None) -> torch.Tensor:
    """``x`` [..., C, H, W] (or [..., H, W]) with the trigger stamped on every image; ``value`` a scalar or a
    per-channel [C] tensor (default: :func:`white`)."""
    mask = trigger_mask((x.shape[-2], x.shape[-1]), hp).to(x.device)
    fill = torch.as_tensor(white(x) if value is None else value, dtype=x.dtype, device=x.device)
    if fill.dim() == 1:
        fill = fill[:, None, None]
    return torch.where(mask, fill, x)


def attack_success(pred: torch.Tensor, y: torch.Tensor, target: int) -> tuple[int, int]:
    """(triggered inputs classified as ``target``, inputs counted): over those whose true class is not the target."""
    keep = y != target
    return int((pred[keep] == target).sum()), int(keep.sum())


@ATTACKS.register("backdoor", BackdoorParams)
class Backdoor(DataAttack):
    name = "backdoor"
    hp: BackdoorParams

    def check(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        if self.hp.label >= num_classes:
            raise ConfigError("attack.target", f"{self.hp.label} is not a class; valid: 0..{num_classes - 1}")
        if len(input_shape) < 2 or min(input_shape[-2:]) < self.hp.size:
            raise ConfigError("attack.size", f"a {self.hp.size}-pixel trigger needs images of at least that side")

    def poison(
        self,
        batch: dict[str, torch.Tensor],
        num_classes: int,
        attacker: torch.Tensor | None = None,
        value: float | torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        x, y = batch["x"], batch["y"]
        lead = y.dim() - 1  # client axes before the sample axis
        k = round(self.hp.poison_fraction * y.shape[-1])
        poisoned = torch.zeros(y.shape, dtype=torch.bool, device=y.device)
        poisoned[..., :k] = True
        if attacker is not None:
            poisoned &= attacker.reshape(*attacker.shape, *([1] * (y.dim() - attacker.dim())))
        trig = apply_trigger(x, self.hp, value)
        at = poisoned.reshape(*poisoned.shape, *([1] * (x.dim() - lead - 1)))
        return {
            **batch,
            "x": torch.where(at, trig, x),
            "y": torch.where(poisoned, torch.full_like(y, self.hp.label), y),
        }

    def poison_client(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One attacker's training samples ``x`` [n, ...], ``y`` [n] with round(poison_fraction * n) of them, drawn
        from ``generator``, triggered and relabelled to the target."""
        k = round(self.hp.poison_fraction * y.shape[0])
        at = torch.randperm(y.shape[0], generator=generator)[:k].to(y.device)
        x, y = x.clone(), y.clone()
        x[at] = apply_trigger(x[at], self.hp)
        y[at] = self.hp.label
        return x, y
